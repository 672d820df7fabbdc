#!/usr/bin/env bash
# Set up (idempotently) and serve the specviz app on the offline default pair.
# Open http://127.0.0.1:7860 (GRADIO_SERVER_NAME and GRADIO_SERVER_PORT change the address).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" GRADIO_ANALYTICS_ENABLED="${GRADIO_ANALYTICS_ENABLED:-False}"
exec "${SPECVIZ_VENV:-.venv}/bin/python" app.py "$@"
