#!/usr/bin/env bash
# Set up (idempotently) and run specviz on the offline default pair.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec "${SPECVIZ_VENV:-.venv}/bin/python" -m specviz generate \
    --prompt "Explain in three sentences why the sky is blue." "$@"
