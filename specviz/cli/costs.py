"""`python -m specviz costs`: where a round's time goes, the step, verify and overhead costs
measured on this machine, and the speedup each gamma predicts from them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from specviz.cli.args import (
    add_run_args,
    csv_list,
    load_pair_from_args,
    require_prompt,
    say,
    settings_from_args,
)
from specviz.config import DEFAULT_GAMMAS, DEFAULT_PROMPT


def add_parser(sub: Any) -> None:
    cmd = sub.add_parser(
        "costs", help="where a round's time goes: step, verify and overhead costs measured"
    )
    cmd.add_argument(
        "--gammas",
        default=None,
        help="comma-separated, e.g. 1,2,4,8 (default: "
        f"{','.join(map(str, DEFAULT_GAMMAS))}; on the packaged path those of them whose "
        "target calls have packages here)",
    )
    cmd.add_argument("--prompt", default=DEFAULT_PROMPT)
    cmd.add_argument("--reps", type=int, default=9, help="timed calls per width (median)")
    cmd.add_argument(
        "--tokens",
        type=int,
        default=None,
        help="tokens of the runs that time the overhead (default: --max-new-tokens); steps "
        "are timed at the prompt plus half as many positions",
    )
    cmd.add_argument("--json", action="store_true", help="print the costs as JSON on stdout")
    add_run_args(cmd)
    cmd.set_defaults(func=cmd_costs)


def cmd_costs(args: argparse.Namespace) -> int:
    from specviz import costs, metrics

    settings = settings_from_args(args)
    gammas = csv_list(args.gammas, int) or DEFAULT_GAMMAS
    for g in gammas:
        settings.with_(gamma=g)  # one-line error for a gamma out of range
    if not 3 <= args.reps <= 100:
        raise ValueError(f"reps must be in 3..100, got {args.reps}")
    if args.tokens is not None and not 8 <= args.tokens <= 1024:
        raise ValueError(f"tokens must be in 8..1024, got {args.tokens}")
    require_prompt(args.prompt)
    pair = load_pair_from_args(args)
    if args.gammas is None:  # measure the path a run takes: where packages exist, on them
        ready = costs.compiled_gammas(pair, args.prompt, gammas, args.tokens, settings)
        if ready and ready != list(gammas):
            left = [g for g in gammas if g not in ready]
            some = "gammas " if len(left) > 1 else "gamma "
            say(
                f"costs: {some}{', '.join(map(str, left))} "
                f"{'have' if len(left) > 1 else 'has'} no compiled package for the target here "
                "(a target without one runs eager): measured gamma "
                f"{', '.join(map(str, ready))} on the compiled path (--gammas "
                f"{','.join(map(str, gammas))} --compile aoti builds the rest)"
            )
            gammas = ready
    sc = costs.measure_costs(
        pair,
        settings,
        gammas,
        args.prompt,
        reps=args.reps,
        tokens=args.tokens,
        say=say,
        roofline=True,
    )
    if args.json:
        sys.stdout.write(json.dumps(sc.to_dict()) + "\n")
        return 0
    from specviz.threads import machine_lines

    threads, busy = machine_lines(sc.machine)
    threads = threads or f"{sc.threads} threads"
    print(f"device {sc.device}, {threads}, draft variant {sc.draft_variant}")
    if busy:
        print(busy)
    for role, path in sc.paths.items():
        print(f"{role} ran {path}")
    print(f"target step      {sc.target_step_ms:.2f} ms")
    print(f"draft step       {sc.draft_step_ms:.2f} ms   c = {sc.c:.3f}")
    if sc.draft_step2_ms is not None and sc.c2 is not None:
        two = f"{sc.draft_step2_ms:.2f} ms   c2 = {sc.c2:.3f}"
        print(f"draft, 2 tokens  {two} (opens a round after a full accept)")
    print(f"baseline outside its model call  {sc.ar_overhead_ms_per_token:.2f} ms per token")
    print(f"alpha (from the timing runs)     {metrics.alpha_text(sc.alpha)}")
    print()
    print("gamma  verify ms  steps  overhead ms  Leviathan  refined")
    for call in sc.verify:
        g = call.width - 1
        a = sc.alpha if sc.alpha is not None else 1.0
        print(
            f"{g:5d}  {call.ms:9.2f}  {call.steps:5.2f}"
            f"  {sc.overhead_ms_by_gamma.get(g, 0.0):11.2f}"
            f"  {metrics.expected_speedup(a, g, sc.c):8.2f}x  {sc.predicted(a, g):6.2f}x"
        )
    if sc.roofline is not None:
        print()
        for line in costs.roofline_lines(sc.roofline):
            print(line)
    return 0
