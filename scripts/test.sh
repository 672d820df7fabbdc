#!/usr/bin/env bash
# Set up (idempotently) and run the whole test suite, on two pytest-xdist workers (one torch
# thread each; SPECVIZ_TEST_WORKERS changes the count, 0 runs in this process). A module's
# tests keep to one worker (--dist loadscope), so that a module fixture (a served app, a
# browser, a baseline) is built once. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
# the set-up just ran: its idempotence test (tests/test_deploy.py) runs it once more, not twice
export SPECVIZ_SET_UP_RAN=1
workers="${SPECVIZ_TEST_WORKERS:-2}"
HF_HUB_OFFLINE=1 exec "${SPECVIZ_VENV:-.venv}/bin/python" -m pytest \
    -n "$workers" --dist loadscope "$@"
