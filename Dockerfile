# syntax=docker/dockerfile:1
# banditgate: one image for the gateway and the workers (the command picks the role). docs/deploy.md.
#   CPU image (default):  docker build -t banditgate .
#   CPU image, torch from a wheel folder inside the build context (no access to the PyTorch index):
#                         docker build --build-arg TORCH_WHEEL_DIR=.wheels -t banditgate .
#   GPU image (CUDA torch, faiss-gpu, open_clip):  docker build --build-arg VARIANT=gpu -t banditgate:gpu .
#   Without a Docker engine: scripts/image.sh (buildah, on a local Debian bookworm base) builds the CPU
#   image and smoke-tests it.

# Any Debian-like image with Python 3.11 and its venv module, `python` on PATH and groupadd/useradd.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG VARIANT=cpu
# Where the CPU image gets torch: a folder of the build context holding a torch-2.13.0 CPU wheel (used
# when it holds one; .wheels/ is git-ignored and sent with the context), else this index.
ARG TORCH_WHEEL_DIR=.wheels
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# The GPU image replaces the faiss-cpu that the package depends on by this build (same `faiss` module).
ARG FAISS_GPU=faiss-gpu-cu12==1.14.1.post1
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY ${TORCH_WHEEL_DIR}/ /tmp/torch-wheels/
# torch first, pinned, so nothing pulls another build: the CPU wheel for the default image (never the
# multi-GB CUDA one), the CUDA wheel from PyPI for the GPU image.
RUN if [ "$VARIANT" = "gpu" ]; then \
        pip install torch==2.13.0; \
    elif ls /tmp/torch-wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then \
        pip install --find-links /tmp/torch-wheels torch==2.13.0+cpu; \
    else \
        pip install torch==2.13.0 --index-url "$TORCH_INDEX_URL"; \
    fi \
 && rm -rf /tmp/torch-wheels \
 && python -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 'torch was replaced')"
COPY pyproject.toml README.md ./
COPY app ./app
COPY routers ./routers
COPY embeddings ./embeddings
COPY replay_dataset ./replay_dataset
COPY workers ./workers
COPY bench ./bench
COPY migrations ./migrations
# Then the package with the variant's extra. `.[cpu]` works whether faiss-cpu is a base dependency or the
# `cpu` extra (pip only warns about an extra that does not exist). The GPU image installs faiss-gpu by
# replacement: the two wheels provide the same `faiss` module and must never be installed together.
RUN pip install ".[${VARIANT}]" \
 && if [ "$VARIANT" = "gpu" ]; then \
        pip uninstall -y faiss-cpu && pip install "$FAISS_GPU"; \
    fi \
 && python -c "import torch, faiss, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 'torch was replaced')"

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
