"""`python -m specviz generate`: run one prompt (N seeds, optionally both methods) and print
each trace coloured by token status, or one JSON trace per line with --json."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from specviz.cli.args import (
    add_run_args,
    load_pair_from_args,
    require_prompt,
    settings_from_args,
)
from specviz.threads import Load, machine_lines
from specviz.trace import Trace

# Terminal colours by token status, with a cue beyond colour for each.
ANSI = {
    "accepted": "\x1b[32m",  # green
    "rejected": "\x1b[31;9m",  # red, struck through
    "resampled": "\x1b[33;4m",  # orange/yellow, underlined
    "bonus": "\x1b[34;1;4m",  # blue, bold, underlined
}
RESET = "\x1b[0m"


def add_parser(sub: Any) -> None:
    g = sub.add_parser("generate", help="generate text and print the trace")
    g.add_argument("--prompt", required=True)
    g.add_argument("--method", default="spec", choices=["spec", "ar"])
    g.add_argument("--samples", type=int, default=1, help="N runs with seeds S..S+N-1")
    g.add_argument("--raw", action="store_true", help="do not apply the chat template")
    g.add_argument("--json", action="store_true", help="one JSON trace per line on stdout")
    g.add_argument(
        "--compare",
        action="store_true",
        help="also run the autoregressive baseline in this process and print the speedup",
    )
    add_run_args(g)
    g.set_defaults(func=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, args.method)
    require_prompt(args.prompt)
    if not 1 <= args.samples <= 100_000:
        raise ValueError(f"samples must be in 1..100000, got {args.samples}")
    if args.compare and args.method != "spec":
        raise ValueError("--compare runs both methods: leave --method at spec")
    from specviz.threads import policy

    threads = policy()  # a bad thread setting stops here, before any load
    threads.rest()  # what other programs run from here on sets the count the runs start at
    pair = load_pair_from_args(args)
    from specviz.engine import Run, check_request, interleave, warm_up

    methods = ["ar", "spec"] if args.compare else [args.method]
    # The request's checks are the same for every seed: make them once, before any output.
    for m in methods:
        check_request(pair, args.prompt, settings.with_(method=m), raw=args.raw)
    if args.compare:  # warm both paths first, so neither side pays for first-call setup
        warm_up(pair, args.prompt, settings, raw=args.raw)
    for i in range(args.samples):
        s = settings.with_(seed=args.seed + i)
        if args.compare:  # both in turn, so that both meet the same load (engine.interleave)
            runs = [Run(pair, args.prompt, s.with_(method=m), raw=args.raw) for m in ("spec", "ar")]
        else:  # one Run at a time, so no finished trace is kept
            runs = [Run(pair, args.prompt, s.with_(method=args.method), raw=args.raw)]
        with threads.watch() as load:  # the thread count follows the machine between calls
            threads.pace()  # the first call (it reads the prompt) starts on the free cores
            for _ in interleave(runs) if args.compare else runs[0]:
                threads.pace()
        group = [r.trace for r in reversed(runs)]  # the baseline first, then the run
        for trace in group:
            trace.machine = load.to_dict()
        if args.json:
            for trace in group:
                sys.stdout.write(trace.to_json() + "\n")
            sys.stdout.flush()
        else:
            print_trace(group[-1], color=_use_color())
            if args.compare:
                print_comparison(group[0], group[-1])
            print_machine(load)
    return 0


def print_comparison(ar: Trace, spec: Trace) -> None:
    """Chen et al.'s Table 1 columns plus c, for one prompt run both ways in this process,
    the refined prediction with the verify call's measured cost, and the guard's sentence
    when no gamma can win at the measured costs."""
    from specviz import metrics
    from specviz.costs import speed_story

    row = metrics.table1_row(ar, spec)
    c = metrics.cost_ratio(spec, ar)
    verify_steps = metrics.verify_steps(spec, ar)
    (name, a), g = metrics.expected_acceptance(spec), spec.settings.gamma
    print()
    print(f"AR ms/token            {row['ar_ms_per_token']:.1f}")
    print(f"speculative ms/token   {row['spec_ms_per_token']:.1f}")
    story = speed_story(spec, ar)
    m = story.measured
    saved = f"{story.calls_saved} target calls saved"
    print(f"tokens per call        {story.tokens_per_call:.2f}  ({saved})")
    speed = f"{m.text()} middle 90 %" if m else f"{row['speedup']:.2f}x"
    print(f"speedup                {speed}  ({metrics.DEFINITIONS['speedup']})")
    print(f"c                      {c:.2f}  ({metrics.DEFINITIONS['c']})")
    if a is None:
        print(f"expected (Leviathan)   needs {name}, which this trace did not measure")
    else:
        print(
            f"expected (Leviathan)   {metrics.expected_speedup(a, g, c):.2f}x at {name} {a:.2f}, "
            f"gamma {g}; best gamma {metrics.best_gamma(a, c)}"
        )
        if verify_steps and g + 1 in verify_steps:
            refined = metrics.refined_speedup(a, g, c, verify_steps[g + 1])
            print(
                f"expected (refined)     {refined:.2f}x with the verify call at "
                f"{verify_steps[g + 1]:.2f} target steps (measured in this run)"
            )
    if ar.settings.is_greedy:
        same = ar.token_ids == spec.token_ids
        print(f"greedy outputs equal   {'yes' if same else 'no'}")
        div = metrics.greedy_divergence(spec, ar)
        if div is not None and div.spec_gap is not None and div.ar_gap is not None:
            print(
                f"first difference       token {div.pos}: the target's top-2 logit gap there is "
                f"{div.spec_gap:.4g} (speculative), {div.ar_gap:.4g} (autoregressive)"
            )
    guard = story.guard()
    if guard:
        print()
        print(guard)


def print_machine(load: Load) -> None:
    """The threads the run computed on, and one line when the rest of the machine was busy
    (measured from the CPU's counters over the run)."""
    threads, busy = machine_lines(load.to_dict())
    print(f"threads                {threads}")
    if busy:
        print(busy)


def _use_color() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def colored_text(trace: Trace, color: bool) -> str:
    """The output with each token marked by status; rejected drafts stay visible."""
    parts: list[str] = []

    def put(text: str, status: str) -> None:
        if color:
            parts.append(f"{ANSI[status]}{text}{RESET}")
        elif status == "rejected":
            parts.append(f"[-{text}-]")
        else:
            parts.append(text)

    if trace.method == "ar":
        return trace.text
    for r in trace.rounds:
        for d in r.verified:
            put(d.text, d.status)
        if r.added is not None:
            put(r.added.text, r.added.status)
    return "".join(parts)


def print_trace(trace: Trace, color: bool) -> None:
    from specviz import metrics

    models = [(role, trace.models[role]) for role in ("target", "draft") if role in trace.models]
    for role, text in models[: 1 if trace.method == "ar" else 2]:
        print(f"{role}: {text}")
    print()
    print(colored_text(trace, color))
    print()
    if color and trace.method == "spec":
        legend = "  ".join(f"{ANSI[s]}{s}{RESET}" for s in ANSI)
        print(f"legend: {legend}")
    s = trace.stats
    rows = [
        ("method", trace.method),
        ("new tokens", s.new_tokens),
        ("target calls", s.target_calls),
        ("tokens per call", f"{s.tokens_per_call:.2f}"),
    ]
    if trace.method == "spec":
        rows += [
            ("rounds", s.rounds),
            ("drafted / verified / accepted", f"{s.drafted} / {s.verified} / {s.accepted}"),
            *metrics.acceptance_rows(trace),
            metrics.out_tv_row(trace),
            ("draft ms / verify ms", f"{s.draft_ms:.0f} / {s.verify_ms:.0f}"),
        ]
    rows += [
        ("wall s", f"{s.wall_s:.2f}"),
        ("ms per token", f"{s.ms_per_token:.1f}"),
        ("stop", trace.stop_reason),
    ]
    width = max(len(k) for k, _ in rows)
    for k, value in rows:
        print(f"{k:<{width}}  {value}")
