# specviz: the app on port 7860, with the offline default pair converted at build time.
# The image runs the README's commands: scripts/setup.sh at build, scripts/run.sh to serve.
#   docker build -t specviz .                 CPU torch (the default)
#   docker run -p 7860:7860 specviz           then open http://127.0.0.1:7860
# A CUDA image (hub pairs offered first; let them download with -e HF_HUB_OFFLINE=0):
#   docker build -t specviz:cuda \
#     --build-arg BASE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04 --build-arg TORCH_INDEX= .
#   docker run --gpus all -p 7860:7860 -e HF_HUB_OFFLINE=0 specviz:cuda
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
# CPU wheels of torch; empty for PyPI's CUDA build.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

# CUDA bases carry no Python; python:* bases skip this.
RUN command -v python3 >/dev/null || { apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*; }

RUN useradd --create-home --uid 1000 specviz
WORKDIR /app
COPY --chown=specviz . /app
USER specviz
ENV SPECVIZ_CACHE=/app/.cache/specviz \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    GRADIO_ANALYTICS_ENABLED=False \
    PYTHONUNBUFFERED=1
RUN if [ -n "$TORCH_INDEX" ]; then export PIP_EXTRA_INDEX_URL="$TORCH_INDEX"; fi; \
    PIP_NO_CACHE_DIR=1 scripts/setup.sh

EXPOSE 7860
HEALTHCHECK --interval=30s --timeout=10s --start-period=120s \
    CMD [".venv/bin/python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:7860/', timeout=8)"]
CMD ["scripts/run.sh"]
