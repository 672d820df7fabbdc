#!/usr/bin/env bash
# The GPU check (specviz/gpucheck/): c, the verify call's cost (a chain's, and a tree's
# with its attention mask at widths up to 64), engine overhead against
# transformers' assisted generation, eager against compiled, and Leviathan's projection, on
# random-weight Llama networks of about 1B and 8B in bf16. One command, under 8 minutes on
# one CUDA GPU; no network, nothing installed beyond torch and transformers.
#   scripts/gpu_check.sh [--out FILE.json] [--compile inductor|eager|off] [--budget-s S]
#   scripts/gpu_check.sh --tiny     the same stages with tiny networks on the CPU (a test)
# The table goes to stdout (Markdown), the JSON to --out (default ./gpu_check.json).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
exec "$python" -m specviz.gpucheck "$@"
