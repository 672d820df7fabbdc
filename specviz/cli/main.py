"""The parser and dispatch of `python -m specviz ...` (see specviz.cli)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from specviz.cli import (
    across_runs,
    bench,
    check,
    costs,
    generate,
    prepare,
    report,
    train_head,
    verifications,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m specviz",
        description="Command line: `python -m specviz generate|prepare|costs|bench|check|"
        "verifications|sweep|calibration|report|train-head ...`.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in (generate, prepare, costs, bench, check, verifications, report, train_head):
        command.add_parser(sub)
    across_runs.add_parsers(sub)  # sweep, calibration
    return parser


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
