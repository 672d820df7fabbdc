"""The compiled path ahead of time (aoti) against eager, speculative and autoregressive, at
generate's defaults on one prompt, seeds 0 to 2: REPS runs of each kind interleaved in one
process, medians of ms per token, and the ratios per seed and their median over seeds.

    PYTHONPATH=. .venv/bin/python scripts/aoti_ratio.py [REPS]

Needs the offline pair's packages (python -m specviz prepare builds them).
"""

import statistics
import sys

from specviz.config import Settings
from specviz.engine import generate
from specviz.models import load_pair

PROMPT = "Explain in three sentences why the sky is blue."
base = load_pair()
paths = {"aoti": base.with_compile("aoti"), "eager": base.with_compile("off")}
assert paths["aoti"].compile_backend == "aoti"
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
ms = {}
for p in paths.values():  # warm: loads, probes
    for m in ("spec", "ar"):
        generate(p, PROMPT, Settings(method=m, max_new_tokens=8))
for seed in (0, 1, 2):
    for _rep in range(REPS):
        for name, p in paths.items():
            for m in ("spec", "ar"):
                t = generate(p, PROMPT, Settings(method=m, seed=seed))
                ms.setdefault((seed, name, m), []).append(
                    1000 * t.stats.wall_s / max(1, len(t.token_ids))
                )
rows = []
for seed in (0, 1, 2):
    med = {k[1:]: statistics.median(v) for k, v in ms.items() if k[0] == seed}
    r = {"seed": seed, **{f"{a}_{b}": round(v, 1) for (a, b), v in med.items()}}
    r["aoti_ar/aoti_spec"] = round(med[("aoti", "ar")] / med[("aoti", "spec")], 2)
    r["eager_ar/aoti_spec"] = round(med[("eager", "ar")] / med[("aoti", "spec")], 2)
    r["eager_spec/aoti_spec"] = round(med[("eager", "spec")] / med[("aoti", "spec")], 2)
    r["eager_ar/eager_spec"] = round(med[("eager", "ar")] / med[("eager", "spec")], 2)
    rows.append(r)
    print(r, flush=True)
for k in ("aoti_ar/aoti_spec", "eager_ar/aoti_spec", "eager_spec/aoti_spec", "eager_ar/eager_spec"):
    print(k, "median over seeds", statistics.median(r[k] for r in rows))
