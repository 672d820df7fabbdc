"""`python -m specviz verifications`: the same prompt, seed and settings under every
verification, side by side. Per verification: tokens per target call, the acceptance rate,
the measured speedup over one autoregressive baseline (interleaved with every
verification's run) with its spread, the mean TV(out, p) per verified
position (the distortion each decision adds: 0 up to float error for the lossless ones),
and the distribution check's verdict. Exit 0 whatever the verdicts: the table is the result.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from specviz.cli.args import (
    add_run_args,
    load_pair_from_args,
    require_prompt,
    say,
    settings_from_args,
)
from specviz.config import DEFAULT_PROMPT

if TYPE_CHECKING:
    from specviz.analysis.verifications import Row


def add_parser(sub: Any) -> None:
    cmd = sub.add_parser(
        "verifications",
        help="run every verification (lossless and lossy) on one prompt and compare them",
    )
    cmd.add_argument("--prompt", default=DEFAULT_PROMPT)
    cmd.add_argument("--n", type=int, default=400, help="samples per method in each check")
    cmd.add_argument("--length", type=int, default=1, help="tokens per checked continuation")
    cmd.add_argument("--no-check", action="store_true", help="skip the distribution checks")
    cmd.add_argument("--raw", action="store_true", help="do not apply the chat template")
    cmd.add_argument("--json", action="store_true", help='print {"rows": [...]} on stdout')
    add_run_args(cmd)
    cmd.set_defaults(func=cmd_verifications)


def cmd_verifications(args: argparse.Namespace) -> int:
    from specviz.analysis import distribution_check
    from specviz.analysis.verifications import compare

    settings = settings_from_args(args)
    if not args.no_check:
        distribution_check.validate(args.n, args.length, "rejection")
    require_prompt(args.prompt)
    pair = load_pair_from_args(args)
    rows = compare(
        pair, args.prompt, settings, args.n, args.length, not args.no_check, args.raw, say
    )
    if args.json:
        sys.stdout.write(json.dumps({"rows": [asdict(r) for r in rows]}) + "\n")
    else:
        print(table(rows, settings.seed))
    return 0


def table(rows: list[Row], seed: int) -> str:
    """The rows as an aligned text table with its definitions underneath."""
    from specviz import metrics
    from specviz.analysis.verifications import COLUMNS, timing_sentence

    head = list(COLUMNS)
    body = [r.cells() for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = [
        "  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)) for line in [head, *body]
    ]
    d = metrics.DEFINITIONS
    lines += [
        "",
        timing_sentence(rows),
        f"seed {seed}, one autoregressive baseline for every row, interleaved with them",
        f"tokens/call: {d['tokens per call']}",
        f"acceptance: {d['acceptance rate']}",
        f"speedup: {d['speedup']}; in brackets the middle 90 % of its bootstrap",
        f"mean TV(out, p): {d['out TV']}; 0 up to float error for a lossless verification",
        "check: the distribution check (speculative samples against the target's p); a lossy "
        "verification fails it where its distortion is large enough to detect",
    ]
    return "\n".join(lines)
