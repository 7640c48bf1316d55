# syntax=docker/dockerfile:1
# banditgate: one image for the gateway and the workers (the command picks the role).
#   CPU image (default):  docker build -t banditgate .
#   GPU image (CUDA torch, faiss-gpu, open_clip):  docker build --build-arg VARIANT=gpu -t banditgate:gpu .
# NOTE: not built in this repository's CI (no Docker engine there); see docs/scaleout.md.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG VARIANT=cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY routers ./routers
COPY embeddings ./embeddings
COPY workers ./workers
COPY bench ./bench
COPY migrations ./migrations
# torch first, pinned, so nothing pulls another build: the CPU wheel for the default image, the CUDA
# wheel from PyPI for the GPU image. Then the package with its extra (cpu: faiss-cpu; gpu: faiss-gpu,
# open_clip) — never both, they provide the same `faiss` module.
RUN if [ "$VARIANT" = "gpu" ]; then \
        pip install torch==2.13.0; \
    else \
        pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu; \
    fi \
 && pip install ".[${VARIANT}]" \
 && python -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 'torch was replaced')"

FROM ${PYTHON_IMAGE} AS runtime
ARG VARIANT=cpu
LABEL org.opencontainers.image.title="banditgate" org.opencontainers.image.description="model-routing gateway (${VARIANT})"
RUN groupadd --system --gid 10001 banditgate \
 && useradd --system --uid 10001 --gid banditgate --home-dir /home/banditgate --create-home banditgate
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    BANDITGATE_EMBEDDER_DEVICE=cpu
WORKDIR /home/banditgate
USER banditgate
EXPOSE 8000
# The gateway's liveness endpoint; worker containers override or disable it (docker-compose.yml).
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD python -c "import urllib.request, sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status == 200 else 1)"
CMD ["banditgate", "serve", "--host", "0.0.0.0", "--port", "8000"]
