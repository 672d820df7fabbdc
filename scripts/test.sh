#!/usr/bin/env bash
# Set up (idempotently) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
HF_HUB_OFFLINE=1 exec "${SPECVIZ_VENV:-.venv}/bin/python" -m pytest "$@"
