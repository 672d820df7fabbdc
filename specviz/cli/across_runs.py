"""Command line for views across runs: `python -m specviz sweep|calibration ...`.

specviz.cli.main registers these subcommands; errors follow its rules (one line on stderr,
exit code 2, before any model loads where possible). With --json, stdout carries one JSON
object and nothing else; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from specviz.cli.args import (
    add_run_args,
    csv_list,
    load_pair_from_args,
    settings_from_args,
)
from specviz.config import DEFAULT_PROMPT, Settings


def add_parsers(sub: Any) -> None:
    """Add the sweep and calibration subcommands to the CLI's subparsers."""
    _add_sweep_parser(sub)
    _add_calibration_parser(sub)


# --- sweep ---------------------------------------------------------------------------------


def _add_sweep_parser(sub: Any) -> None:
    s = sub.add_parser(
        "sweep",
        help="measure speculative against autoregressive speedup over gamma and temperature",
    )
    s.add_argument("--gammas", required=True, help="comma-separated, e.g. 1,2,4,8")
    s.add_argument(
        "--temperatures", default=None, help="comma-separated (default: --temperature's value)"
    )
    s.add_argument("--reps", type=int, default=3, help="repetitions per cell (medians)")
    s.add_argument("--prompt", default=DEFAULT_PROMPT)
    s.add_argument("--raw", action="store_true", help="do not apply the chat template")
    s.add_argument("--json", action="store_true", help="print {rows: [...]} as JSON on stdout")
    s.add_argument("--csv", default=None, metavar="PATH", help="also write the rows as CSV")
    add_run_args(s)
    s.set_defaults(func=cmd_sweep, gamma=None, temperature=None)


def sweep_plan_from_args(args: argparse.Namespace) -> Any:
    """A validated SweepPlan from parsed arguments (raises ValueError)."""
    from specviz.analysis.sweep import SweepPlan

    if args.gamma is not None:
        raise ValueError("the sweep takes --gammas (a list), not --gamma")
    if args.adaptive_gamma:
        raise ValueError("the sweep measures constant gammas: drop --adaptive-gamma")
    if args.temperature is not None and args.temperatures is not None:
        raise ValueError("give --temperatures or --temperature, not both")
    gammas = csv_list(args.gammas, int) or ()
    temps = csv_list(args.temperatures, float) if args.temperatures is not None else None
    if temps is None:
        temps = (Settings().temperature if args.temperature is None else args.temperature,)
    args.gamma, args.temperature = Settings().gamma, temps[0]
    return SweepPlan(
        gammas=gammas,
        temperatures=temps,
        settings=settings_from_args(args),
        reps=args.reps,
        prompt=args.prompt,
        raw=args.raw,
    )


def cmd_sweep(args: argparse.Namespace) -> int:
    from specviz.analysis import sweep

    plan = sweep_plan_from_args(args)
    pair = load_pair_from_args(args)
    result = sweep.run_sweep(pair, plan, progress=_sweep_progress)
    if args.csv:
        Path(args.csv).write_text(sweep.csv_text(result.rows), encoding="utf-8")
        print(f"wrote {args.csv}", file=sys.stderr)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict()) + "\n")
    else:
        print(sweep.format_table(result.rows))
        print(
            "measured: the baselines' seconds / the speculative runs' for the same tokens, "
            "every gamma interleaved with its repetition's baseline, pooled over the "
            "repetitions, with the middle 90 % of its bootstrap (EOS ignored)"
        )
        print(
            "expected: Leviathan's formula at the measured c and alpha "
            "(sum p q under exact-match verification)"
        )
    return 0


def _sweep_progress(event: Any) -> None:
    if event.row is not None:
        r = event.row
        print(
            f"[{event.done}/{event.total}] gamma {r['gamma']}, temperature "
            f"{r['temperature']:g}: measured {r['measured_speedup']:.2f}x, "
            f"expected {r['expected_speedup']:.2f}x",
            file=sys.stderr,
            flush=True,
        )


# --- calibration ---------------------------------------------------------------------------


def _add_calibration_parser(sub: Any) -> None:
    cmd = sub.add_parser(
        "calibration",
        help="reliability diagram of the acceptance rule from JSON traces",
    )
    cmd.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="files of one JSON trace each, or JSON lines (generate --json); - reads stdin",
    )
    cmd.add_argument("--bins", type=int, default=10, help="equal-width bins of [0, 1]")
    cmd.add_argument("--min-n", type=int, default=40, help="judge bins with at least N")
    cmd.add_argument("--json", action="store_true", help="print {bins: [...]} as JSON on stdout")
    cmd.set_defaults(func=cmd_calibration)


def cmd_calibration(args: argparse.Namespace) -> int:
    from specviz.analysis import calibration as cal

    if args.min_n < 1:
        raise ValueError(f"min-n must be at least 1, got {args.min_n}")
    counts = cal.Calibration(args.bins).add_all(cal.read_traces(args.traces))
    if counts.drafts.total == 0:
        raise ValueError(
            f"no sampled draft decisions in {counts.traces} trace(s): greedy, AR and "
            "exact-match runs have none"
        )
    result = counts.to_dict(min_n=args.min_n)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
        return 0
    print(f"drafts: acceptance frequency against min(1, p/q), {result['drafts']} decisions")
    print(cal.format_table(result["bins"]))
    print(cal.summary_line(result, "drafts"))
    if result["residual_bins"]:
        print()
        print(f"resampled: drawn frequency against r(x), {result['residual_candidates']} cands.")
        print(cal.format_table(result["residual_bins"]))
        print(cal.summary_line(result, "residual"))
    return 0
