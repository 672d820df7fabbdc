"""`python -m specviz prepare`: the set-up step, converting the offline model, choosing its
draft and, on a CPU, compiling its calls ahead of time (each once; later runs read the
results)."""

from __future__ import annotations

import argparse
from typing import Any

from specviz.cli.args import say


def add_parser(sub: Any) -> None:
    pr = sub.add_parser(
        "prepare",
        help="the set-up step: convert the offline model, choose its draft and compile its "
        "calls ahead of time (once each)",
    )
    pr.add_argument(
        "--remeasure", action="store_true", help="measure the offline draft's variants again"
    )
    pr.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    pr.set_defaults(func=cmd_prepare)


def cmd_prepare(args: argparse.Namespace) -> int:
    """Print the converted model's directory, then the offline draft's choice."""
    from specviz import draft_choice, metrics
    from specviz.compiled import packages
    from specviz.models import prepare_offline_packages, prepare_offline_pair
    from specviz.offline import prepare_offline

    print(prepare_offline())
    choice = prepare_offline_pair(args.device, remeasure=args.remeasure, say=say)
    print(f"offline draft: {choice.summary()}")
    for cand in choice.candidates:
        print(
            f"  {cand.variant:8s} step {cand.step_ms:6.1f} ms (2 tokens {cand.step2_ms:6.1f})  "
            f"c {cand.c:.2f}  alpha {metrics.alpha_text(cand.alpha):>12s}  predicted "
            f"{cand.predicted:.2f}x at gamma {draft_choice.JUDGE_GAMMA}, "
            f"{cand.predicted_best:.2f}x at gamma {cand.gamma}"
        )
    built = prepare_offline_packages(args.device, say=say)
    if built is not None:
        took = ", ".join(f"{k} {s:.0f} s" for k, s in built.items()) or "none needed"
        print(f"compiled ahead of time: {took} ({packages.store()})")
    return 0
