# Placeholder: the scale-out issue makes this the real multi-stage image (non-root, healthcheck, GPU arg).
# Not built on these machines (no Docker engine).
FROM python:3.11-slim
WORKDIR /srv
COPY . .
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir -e ".[cpu]"
EXPOSE 8000
CMD ["banditgate", "serve", "--host", "0.0.0.0", "--port", "8000"]
