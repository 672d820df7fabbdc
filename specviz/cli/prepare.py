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
    """At the count the app computes at on a quiet machine (specviz.threads: the cores this
    process may use, or SPECVIZ_THREADS), so that the draft is chosen at the app's count."""
    from specviz.threads import policy

    with policy().holding():
        return _prepare(args)


def _prepare(args: argparse.Namespace) -> int:
    """Print the converted model's directory, then the offline draft's choice."""
    from specviz import metrics
    from specviz.backend import draft_choice, packages
    from specviz.backend.offline import prepare_offline
    from specviz.models import prepare_offline_packages, prepare_offline_pair

    print(prepare_offline())
    choice = prepare_offline_pair(args.device, remeasure=args.remeasure, say=say)
    print(f"offline draft: {choice.summary()}")
    g = draft_choice.judge_gamma()
    for cand in choice.candidates:
        print(
            f"  {cand.variant:8s} eager step {cand.step_ms:6.1f} ms (2 tokens "
            f"{cand.step2_ms:6.1f})  c {cand.c:.2f}  alpha {metrics.alpha_text(cand.alpha):>12s}"
            f"  predicted {cand.predicted:.2f}x at gamma {g}"
        )
        if cand.packaged_step_ms is not None and choice.packaged_target_ms:
            print(
                f"  {'':8s} packaged step {cand.packaged_step_ms:6.1f} ms (2 tokens "
                f"{cand.packaged_step2_ms:6.1f})  c "
                f"{cand.packaged_step_ms / choice.packaged_target_ms:.2f}  predicted "
                f"{cand.packaged_predicted:.2f}x at gamma {g} on the compiled path"
            )
        elif cand.packaged_predicted is not None:
            print(
                f"  {'':8s} {cand.packaged_why}: predicted {cand.packaged_predicted:.2f}x at "
                f"gamma {g} beside the packaged target"
            )
    if choice.decided_by == "packaged":
        print(
            f"decided on the compiled path: target step {choice.packaged_target_ms:.1f} ms, "
            f"verification at {g + 1} positions {choice.packaged_verify_steps:.2f} steps"
        )
    if choice.head is not None:
        head = choice.head
        print(
            f"  {'eagle':8s} eager step {head.step_ms:6.1f} ms (2 tokens {head.step2_ms:6.1f})"
            f"  c {head.c:.2f}  alpha {metrics.alpha_text(head.alpha):>12s}  predicted "
            f"{head.ranked:.2f}x at gamma {g} (the EAGLE head; alpha one step from the "
            "target's features)"
        )
        print(f"drafter by measurement: {choice.drafter} ({choice.head_summary()})")
    built = prepare_offline_packages(args.device, say=say)
    if built is not None:
        took = ", ".join(f"{k} {s:.0f} s" for k, s in built.items()) or "none needed"
        print(f"compiled ahead of time: {took} ({packages.store()})")
    return 0
