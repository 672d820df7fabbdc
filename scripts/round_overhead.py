"""Where a speculative round's time goes outside the models, function by function.

Runs `generate`'s defaults (the offline pair, gamma 4, temperature 0.7, top-p 0.9, 128 new
tokens) on the eager path for seeds 0 to 2 under cProfile with the process's CPU clock, so
that other work on a shared machine hardly moves the figures, and prints the CPU time per
round of the engine's functions (the rule, the warps, the draws, the records) beside the
time inside the models' calls. The compiled path runs the same engine code around other
forwards. Run it with one thread (OMP_NUM_THREADS=1) for figures that add up:

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python scripts/round_overhead.py [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from specviz.config import DEFAULT_PROMPT, Settings
from specviz.engine import Run, warm_up
from specviz.models import load_pair


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--seeds", default="0,1,2")
    args = ap.parse_args()
    pair = load_pair()
    s = Settings()
    warm_up(pair, DEFAULT_PROMPT, s)
    prof = cProfile.Profile(time.process_time)
    rounds, cpu = 0, 0.0
    for seed in (int(x) for x in args.seeds.split(",")):
        run = Run(pair, DEFAULT_PROMPT, s.with_(seed=seed))
        c0 = time.process_time()
        prof.enable()
        for _ in run:
            pass
        prof.disable()
        cpu += time.process_time() - c0
        rounds += len(run.trace.rounds)
    rows, model = [], 0.0
    for (path, line, name), (_, calls, _, cum, _) in pstats.Stats(prof).stats.items():
        if name == "logits" and path.endswith(("specviz/lm.py", "specviz/backend/static_lm.py")):
            model += cum
        if "specviz" in path and name not in ("logits", "forward", "round", "_spec", "propose"):
            rows.append((cum, calls, f"{path.split('specviz/')[-1]}:{line} {name}"))
    print(
        f"draft variant {pair.draft.variant}; {rounds} rounds; CPU per round: "
        f"{cpu * 1e3 / rounds:.1f} ms, of which {model * 1e3 / rounds:.1f} ms in the models' "
        f"calls and {(cpu - model) * 1e3 / rounds:.1f} ms outside them"
    )
    for cum, calls, where in sorted(rows, reverse=True)[: args.top]:
        print(f"{cum * 1e3 / rounds:7.2f} ms  {calls / rounds:5.1f} calls  {where}")


if __name__ == "__main__":
    main()
