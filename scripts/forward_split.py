"""Where a speculative run's time goes, specviz against transformers' assisted generation at
one constant gamma: the target's forwards, the draft's forwards, and everything outside
them, per prompt of the quick bench, as medians over interleaved repetitions.

    PYTHONPATH=. .venv/bin/python scripts/forward_split.py [--gamma 4] [--reps 5]
        [--mode greedy|sample] [--tokens 32]

Both sides run the bench's own contenders (specviz.bench.contenders) on the offline pair,
so they get the same prompt ids, the same draft module and the same constant schedule; a
forward hook on each model times its calls. When the two sides make the same calls, the
forwards cost the same, and a ratio of their wall times can differ from 1 only by what lies
outside them.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specviz.bench.contenders import constant_schedule, hf_run, specviz_run
from specviz.bench.prompts import prompt_set
from specviz.models import load_pair


class ForwardTimer:
    """Seconds inside one model's forward calls, and their count, while attached."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.seconds, self.calls, self._t0 = 0.0, 0, 0.0
        self._hooks = [
            model.register_forward_pre_hook(self._pre),
            model.register_forward_hook(self._post),
        ]

    def _pre(self, *_: object) -> None:
        self._t0 = time.perf_counter()

    def _post(self, *_: object) -> None:
        self.seconds += time.perf_counter() - self._t0
        self.calls += 1

    def close(self) -> None:
        for h in self._hooks:
            h.remove()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mode", choices=["greedy", "sample"], default="greedy")
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()

    pair = load_pair("default", dtype="float32", device="cpu")
    assert pair.draft is not None
    sv = pair.without_eos()  # both sides ignore EOS, as in the bench
    contenders = {
        "specviz": specviz_run(sv, args.mode, gamma=args.gamma),
        "specviz minimal": specviz_run(sv, args.mode, gamma=args.gamma, trace_level="minimal"),
        "transformers": hf_run(pair, args.mode, assistant=constant_schedule(args.gamma)),
    }
    kinds = ("chat", "code", "copy-edit")
    print(f"gamma {args.gamma}, {args.mode}, {args.tokens} new tokens, {args.reps} repetitions")
    print(f"{'prompt':12s} {'contender':16s} {'wall':>7s} {'target':>14s} {'draft':>15s} outside")
    for bp in (p for p in prompt_set(True) if p.kind in kinds):
        ids = sv.encode_prompt(bp.text)
        for run in contenders.values():  # warm-up
            run(ids, bp.text, 0, args.tokens)
        rows: dict[str, list[tuple[float, float, float, int, int]]] = {}
        for rep in range(args.reps):
            order = list(contenders.items())
            for name, run in order if rep % 2 == 0 else reversed(order):
                target, draft = ForwardTimer(pair.target.model), ForwardTimer(pair.draft.model)
                try:
                    sample = run(ids, bp.text, 0, args.tokens)
                finally:
                    target.close()
                    draft.close()
                rows.setdefault(name, []).append(
                    (sample.wall_s, target.seconds, draft.seconds, target.calls, draft.calls)
                )
        for name, got in rows.items():
            wall, tgt, dft = (statistics.median(r[i] for r in got) * 1e3 for i in range(3))
            calls = f"({got[0][3]} calls)"
            dcalls = f"({got[0][4]} calls)"
            print(
                f"{bp.name:12s} {name:16s} {wall:5.0f}ms {tgt:5.0f}ms {calls:>9s} "
                f"{dft:5.0f}ms {dcalls:>9s} {wall - tgt - dft:5.0f}ms"
            )


if __name__ == "__main__":
    main()
