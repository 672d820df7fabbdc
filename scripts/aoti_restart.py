"""Seconds from launching a fresh process to the tokens of its first compiled round (the
packages the set-up step built, loaded by auto), at generate's defaults.

    PYTHONPATH=. .venv/bin/python scripts/aoti_restart.py "$(date +%s.%N)"
"""

import sys
import time

t_launch = float(sys.argv[1])

from specviz.config import Settings  # noqa: E402
from specviz.engine import Run  # noqa: E402
from specviz.models import load_pair  # noqa: E402

t_imp = time.time()
pair = load_pair().with_compile("auto")
t_load = time.time()
run = Run(pair, "Explain in three sentences why the sky is blue.", Settings())
for _update in run:
    t_first = time.time()
    break
print(
    f"backend {pair.compile_backend}; import {t_imp - t_launch:.1f} s, "
    f"load {t_load - t_imp:.1f} s, "
    f"first compiled round's tokens at {t_first - t_launch:.1f} s after launch"
)
