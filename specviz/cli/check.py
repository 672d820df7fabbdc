"""`python -m specviz check`: does speculative sampling leave the output distribution
unchanged? Exit 0 when the check passes, 1 when it finds a different distribution."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specviz.cli.args import (
    add_run_args,
    load_pair_from_args,
    require_prompt,
    settings_from_args,
)
from specviz.config import DEFAULT_PROMPT, RULES
from specviz.verify.registry import OLD_RULE_NAMES


def rule_name(text: str) -> str:
    """A --break-rule value, its old name mapped to the new one."""
    return OLD_RULE_NAMES.get(text, text)


def add_parser(sub: Any) -> None:
    cmd = sub.add_parser(
        "check", help="check that speculative sampling leaves the output distribution unchanged"
    )
    cmd.add_argument("--prompt", default=DEFAULT_PROMPT)
    cmd.add_argument("--n", type=int, default=400, help="samples per method (at least 200)")
    cmd.add_argument("--length", type=int, default=2, help="tokens per continuation, 1..3")
    cmd.add_argument(
        "--break-rule",
        default="rejection",
        type=rule_name,
        choices=RULES,
        help="a deliberately wrong rejection rule, to see the check catch it "
        "(rejection: the papers' rule; exact is its old name)",
    )
    cmd.add_argument("--raw", action="store_true", help="do not apply the chat template")
    cmd.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    cmd.add_argument("--out", default=None, help="directory for check.json and check.html")
    add_run_args(cmd)
    cmd.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 0 when the check passes, 1 when it finds a different distribution."""
    from specviz.analysis import distribution_check
    from specviz.views import check_figure

    settings = settings_from_args(args)
    distribution_check.validate(args.n, args.length, args.break_rule)
    settings.with_(rule=args.break_rule)  # a broken rule does not combine with exact match
    require_prompt(args.prompt)
    pair = load_pair_from_args(args)
    result = distribution_check.run_check(
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
