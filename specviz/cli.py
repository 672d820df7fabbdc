"""Command line: `python -m specviz generate|prepare|bench|check|sweep|calibration ...`.

Bad input prints one line to stderr and exits with code 2, before any model loads where
possible, and without a traceback. With --json, stdout carries one JSON trace per sample,
one per line, and nothing else.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from specviz.config import (
    COMPILE_CHOICES,
    DEFAULT_PROMPT,
    DRAFTERS,
    RULES,
    VERIFICATIONS,
    Settings,
    is_greedy,
)
from specviz.trace import Trace

# Terminal colours by token status, with a cue beyond colour for each.
ANSI = {
    "accepted": "\x1b[32m",  # green
    "rejected": "\x1b[31;9m",  # red, struck through
    "resampled": "\x1b[33;4m",  # orange/yellow, underlined
    "bonus": "\x1b[34;1;4m",  # blue, bold, underlined
}
RESET = "\x1b[0m"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default=None, help="registered pair name (default: the offline pair)")
    p.add_argument("--draft", default=None, help="draft model id (a custom pair, with --target)")
    p.add_argument("--target", default=None, help="target model id (a custom pair, with --draft)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument(
        "--compile",
        nargs="?",
        const="inductor",
        default="auto",
        choices=COMPILE_CHOICES,
        help="the compiled path: static KV cache and torch.compile'd forwards (a backend; "
        "bare: inductor; off: eager; default auto: inductor on CUDA, eager on the CPU)",
    )


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    d = Settings()
    p.add_argument("--drafter", default=d.drafter, choices=DRAFTERS)
    p.add_argument("--gamma", type=int, default=d.gamma, help="tokens drafted per round (1..32)")
    p.add_argument("--adaptive-gamma", action="store_true", help="grow/shrink gamma per round")
    p.add_argument("--temperature", type=float, default=d.temperature)
    p.add_argument("--draft-temperature", type=float, default=None, help="changes q only")
    p.add_argument("--top-p", type=float, default=d.top_p)
    p.add_argument("--top-k", type=int, default=d.top_k, help="0 disables top-k")
    p.add_argument("--greedy", action="store_true", help="argmax decoding (one-hot p and q)")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--top-n", type=int, default=d.top_n, help="tokens listed per position")
    p.add_argument(
        "--verification",
        default=d.verification,
        choices=VERIFICATIONS,
        help="rejection: u < p/q; exact-match: the target's own sample equals the draft",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m specviz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

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
    _add_model_args(g)
    _add_sampling_args(g)
    g.set_defaults(func=cmd_generate)

    pr = sub.add_parser(
        "prepare",
        help="the set-up step: convert the offline model and choose its draft (once each)",
    )
    pr.add_argument(
        "--remeasure", action="store_true", help="measure the offline draft's variants again"
    )
    pr.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    pr.set_defaults(func=cmd_prepare)
    _add_costs_parser(sub)
    _add_bench_parser(sub)
    _add_check_parser(sub)
    from specviz.inspect_cli import add_commands  # sweep, calibration

    add_commands(sub)
    for register in EXTRA_COMMANDS:
        register(sub)
    return parser


# Other modules add subcommands here: each entry takes the subparsers object.
EXTRA_COMMANDS: list[Callable[[Any], None]] = []


def settings_from_args(args: argparse.Namespace, method: str = "spec") -> Settings:
    """Validated Settings from parsed arguments (raises ValueError)."""
    from specviz.config import Limits

    return Settings(
        method=method,
        drafter=args.drafter,
        gamma=args.gamma,
        adaptive_gamma=args.adaptive_gamma,
        temperature=args.temperature,
        draft_temperature=args.draft_temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        greedy=args.greedy,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        top_n=args.top_n,
        verification=args.verification,
        limits=Limits.from_env(),
    )


def load_pair_from_args(args: argparse.Namespace, compiled: bool = True) -> Any:
    """The pair the arguments name; on the path --compile chooses if compiled, else eager."""
    from specviz.models import load_pair, resolve_pair

    resolve_pair(args.pair, args.draft, args.target)  # fail fast, before any load
    pair = load_pair(
        args.pair, draft=args.draft, target=args.target, dtype=args.dtype, device=args.device
    )
    backend = getattr(args, "compile", None)
    return pair.with_compile(backend) if backend and compiled else pair


def cmd_generate(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, args.method)
    if not args.prompt.strip():
        raise ValueError("prompt is empty")
    if not 1 <= args.samples <= 100_000:
        raise ValueError(f"samples must be in 1..100000, got {args.samples}")
    if args.compare and args.method != "spec":
        raise ValueError("--compare runs both methods: leave --method at spec")
    pair = load_pair_from_args(args)
    from specviz.engine import Run, warm_up

    methods = ["ar", "spec"] if args.compare else [args.method]
    # The prompt checks are the same for every seed: the first Run makes them before any
    # output; later Runs are built one at a time, so no finished trace is kept.
    first: Run | None = Run(pair, args.prompt, settings.with_(method=methods[0]), raw=args.raw)
    if args.compare:  # warm both paths first, so neither side pays for first-call setup
        warm_up(pair, args.prompt, settings, raw=args.raw)
    for i in range(args.samples):
        s = settings.with_(seed=args.seed + i)
        group = []
        for m in methods:
            run = first or Run(pair, args.prompt, s.with_(method=m), raw=args.raw)
            first = None
            for _ in run:
                pass
            group.append(run.trace)
            if args.json:
                sys.stdout.write(run.trace.to_json() + "\n")
                sys.stdout.flush()
        if not args.json:
            print_trace(group[-1], color=_use_color())
            if args.compare:
                print_comparison(group[0], group[-1])
    return 0


def print_comparison(ar: Trace, spec: Trace) -> None:
    """Chen et al.'s Table 1 columns plus c, for one prompt run both ways in this process,
    the refined prediction with the verify call's measured cost, and the guard's sentence
    when no gamma can win at the measured costs."""
    from specviz import metrics
    from specviz.costs import guard_sentence

    row = metrics.table1_row(ar, spec)
    c = metrics.cost_ratio(spec, ar)
    verify_steps = metrics.verify_steps(spec, ar)
    (name, a), g = metrics.expected_acceptance(spec), int(spec.settings["gamma"])
    print()
    print(f"AR ms/token            {row['ar_ms_per_token']:.1f}")
    print(f"speculative ms/token   {row['spec_ms_per_token']:.1f}")
    print(f"speedup                {row['speedup']:.2f}x  ({metrics.DEFINITIONS['speedup']})")
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
    if is_greedy(ar.settings):
        same = ar.token_ids == spec.token_ids
        print(f"greedy outputs equal   {'yes' if same else 'no'}")
    guard = guard_sentence(a, c, verify_steps)
    if guard:
        print()
        print(guard)


def _add_costs_parser(sub: Any) -> None:
    c = sub.add_parser(
        "costs", help="where a round's time goes: step, verify and overhead costs measured"
    )
    c.add_argument("--gammas", default="1,2,4,8", help="comma-separated, e.g. 1,2,4,8")
    c.add_argument("--prompt", default=DEFAULT_PROMPT)
    c.add_argument("--reps", type=int, default=9, help="timed calls per width (median)")
    c.add_argument(
        "--tokens",
        type=int,
        default=None,
        help="tokens of the runs that time the overhead (default: --max-new-tokens); steps "
        "are timed at the prompt plus half as many positions",
    )
    c.add_argument("--json", action="store_true", help="print the costs as JSON on stdout")
    _add_model_args(c)
    _add_sampling_args(c)
    c.set_defaults(func=cmd_costs)


def cmd_costs(args: argparse.Namespace) -> int:
    from specviz import costs, metrics

    settings = settings_from_args(args)
    gammas = _csv(args.gammas, int) or costs.DEFAULT_GAMMAS
    for g in gammas:
        settings.with_(gamma=g)  # one-line error for a gamma out of range
    if not 3 <= args.reps <= 100:
        raise ValueError(f"reps must be in 3..100, got {args.reps}")
    if args.tokens is not None and not 8 <= args.tokens <= 1024:
        raise ValueError(f"tokens must be in 8..1024, got {args.tokens}")
    if not args.prompt.strip():
        raise ValueError("prompt is empty")
    pair = load_pair_from_args(args)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    sc = costs.measure_costs(
        pair, settings, gammas, args.prompt, reps=args.reps, tokens=args.tokens, say=say
    )
    if args.json:
        sys.stdout.write(json.dumps(sc.to_dict()) + "\n")
        return 0
    print(f"device {sc.device}, {sc.threads} threads, draft variant {sc.draft_variant}")
    print(f"target step      {sc.target_step_ms:.2f} ms")
    print(f"draft step       {sc.draft_step_ms:.2f} ms   c = {sc.c:.3f}")
    if sc.draft_step2_ms is not None and sc.c2 is not None:
        print(
            f"draft, 2 tokens  {sc.draft_step2_ms:.2f} ms   c2 = {sc.c2:.3f} (after a full accept)"
        )
    print(f"baseline outside its model call  {sc.ar_overhead_ms_per_token:.2f} ms per token")
    print(f"alpha (from the timing runs)     {metrics.alpha_text(sc.alpha)}")
    print()
    print("gamma  verify ms  steps  overhead ms  Leviathan  refined")
    for v in sc.verify:
        g = v.width - 1
        a = sc.alpha if sc.alpha is not None else 1.0
        print(
            f"{g:5d}  {v.ms:9.2f}  {v.steps:5.2f}  {sc.overhead_ms_by_gamma.get(g, 0.0):11.2f}"
            f"  {metrics.expected_speedup(a, g, sc.c):8.2f}x  {sc.predicted(a, g):6.2f}x"
        )
    return 0


def _add_bench_parser(sub: Any) -> None:
    b = sub.add_parser(
        "bench", help="benchmark against transformers' generate() and assisted generation"
    )
    b.add_argument("--quick", action="store_true", help="a smoke run: fewer prompts and tokens")
    b.add_argument("--gammas", default=None, help="comma-separated, e.g. 1,2,4,8")
    b.add_argument("--max-new-tokens", type=int, default=None)
    b.add_argument("--reps", type=int, default=None, help="repetitions (at least 3)")
    b.add_argument("--kinds", default=None, help="prompt kinds: chat,summary,code,copy-edit")
    b.add_argument("--modes", default=None, help="greedy,sample")
    b.add_argument("--no-transformers", action="store_true", help="specviz contenders only")
    b.add_argument("--no-load-probe", action="store_true", help="skip the cold-load subprocess")
    b.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    b.add_argument("--out", default=None, help="directory for CSV, JSON and the HTML report")
    _add_model_args(b)
    b.set_defaults(func=cmd_bench)


def _csv(text: str | None, kind: type = str) -> tuple[Any, ...] | None:
    if text is None:
        return None
    try:
        return tuple(kind(x.strip()) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise ValueError(f"could not parse {text!r} as a comma-separated list") from exc


def cmd_bench(args: argparse.Namespace) -> int:
    from specviz import bench

    opts = bench.BenchOptions.make(
        quick=args.quick,
        gammas=_csv(args.gammas, int),
        max_new_tokens=args.max_new_tokens,
        reps=args.reps,
        kinds=_csv(args.kinds),
        modes=_csv(args.modes),
        hf=False if args.no_transformers else None,
        load_probe=False if args.no_load_probe else None,
        compile=None if args.compile in ("auto", "off") else args.compile,
    )
    pair = load_pair_from_args(args, compiled=False)  # the bench runs both paths
    if args.compile == "auto":  # the compiled rows where the compiled path is the default
        from specviz.compiled import auto_backend

        opts = dataclasses.replace(opts, compile=auto_backend(pair.device))
    result = bench.run_bench(pair, opts, log=lambda m: print(m, file=sys.stderr, flush=True))
    if args.out:
        for path in bench.write_outputs(result, Path(args.out)):
            print(f"wrote {path}", file=sys.stderr)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict()) + "\n")
    else:
        print(bench.format_report(result))
    return 0


def _add_check_parser(sub: Any) -> None:
    c = sub.add_parser(
        "check", help="check that speculative sampling leaves the output distribution unchanged"
    )
    c.add_argument("--prompt", default=DEFAULT_PROMPT)
    c.add_argument("--n", type=int, default=400, help="samples per method (at least 200)")
    c.add_argument("--length", type=int, default=2, help="tokens per continuation, 1..3")
    c.add_argument(
        "--break-rule",
        default="exact",
        choices=RULES,
        help="a deliberately wrong rejection rule, to see the check catch it",
    )
    c.add_argument("--raw", action="store_true", help="do not apply the chat template")
    c.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    c.add_argument("--out", default=None, help="directory for check.json and check.html")
    _add_model_args(c)
    _add_sampling_args(c)
    c.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 0 when the check passes, 1 when it finds a different distribution."""
    from specviz import check, check_figure

    settings = settings_from_args(args)
    check.validate(args.n, args.length, args.break_rule)
    settings.with_(rule=args.break_rule)  # a broken rule does not combine with exact match
    if not args.prompt.strip():
        raise ValueError("prompt is empty")
    pair = load_pair_from_args(args)
    result = check.run_check(
        pair,
        args.prompt,
        settings,
        n=args.n,
        length=args.length,
        rule=args.break_rule,
        progress_cb=_progress_bar(),
        raw=args.raw,
    )
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "check.json").write_text(json.dumps(result.to_dict(), indent=1))
        check_figure.check_figure(result).write_html(out / "check.html")
        print(f"wrote {out / 'check.json'} and {out / 'check.html'}", file=sys.stderr)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict()) + "\n")
    else:
        print(result.summary())
    return 0 if result.passed else 1


def _progress_bar() -> Callable[[Any], None]:
    """A one-line progress bar on stderr (only when stderr is a terminal)."""
    live = sys.stderr.isatty()

    def show(p: Any) -> None:
        if not live:
            return
        width = 30
        filled = width * p.done // max(1, p.total)
        bar = "#" * filled + "." * (width - filled)
        end = "\n" if p.done == p.total and p.stage != "sampling" else ""
        print(f"\r[{bar}] {p.done}/{p.total} {p.stage}", end=end, file=sys.stderr, flush=True)

    return show


def cmd_prepare(args: argparse.Namespace) -> int:
    """Print the converted model's directory, then the offline draft's choice."""
    from specviz import draft_choice, metrics
    from specviz.models import prepare_offline_pair
    from specviz.offline import prepare_offline

    print(prepare_offline())
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    choice = prepare_offline_pair(args.device, remeasure=args.remeasure, say=say)
    print(f"offline draft: {choice.summary()}")
    for c in choice.candidates:
        print(
            f"  {c.variant:8s} step {c.step_ms:6.1f} ms (2 tokens {c.step2_ms:6.1f})  "
            f"c {c.c:.2f}  alpha {metrics.alpha_text(c.alpha):>12s}  predicted "
            f"{c.predicted:.2f}x at gamma {draft_choice.JUDGE_GAMMA}, "
            f"{c.predicted_best:.2f}x at gamma {c.gamma}"
        )
    return 0


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
            ("draft ms / verify ms", f"{s.draft_ms:.0f} / {s.verify_ms:.0f}"),
        ]
    rows += [
        ("wall s", f"{s.wall_s:.2f}"),
        ("ms per token", f"{s.ms_per_token:.1f}"),
        ("stop", trace.stop_reason),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed its one-line error (or the help)
        return int(exc.code or 0)
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
