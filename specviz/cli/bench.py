"""`python -m specviz bench`: specviz's contenders against transformers' generate() and
assisted generation (specviz.bench), as a report, JSON, or files under --out."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from specviz.cli.args import add_model_args, csv_list, load_pair_from_args, say


def add_parser(sub: Any) -> None:
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
    add_model_args(b)
    b.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from specviz import bench

    opts = bench.BenchOptions.make(
        quick=args.quick,
        gammas=csv_list(args.gammas, int),
        max_new_tokens=args.max_new_tokens,
        reps=args.reps,
        kinds=csv_list(args.kinds),
        modes=csv_list(args.modes),
        hf=False if args.no_transformers else None,
        load_probe=False if args.no_load_probe else None,
        compile=None if args.compile in ("auto", "off") else args.compile,
    )
    pair = load_pair_from_args(args, compiled=False)  # the bench runs both paths
    if args.compile == "auto":  # the compiled rows where the compiled path is the default
        backend = pair.with_compile("auto").compile_backend  # None: no compiled rows
        opts = dataclasses.replace(opts, compile=backend)
    result = bench.run_bench(pair, opts, log=say)
    if args.out:
        for path in bench.write_outputs(result, Path(args.out)):
            print(f"wrote {path}", file=sys.stderr)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict()) + "\n")
    else:
        print(bench.format_report(result))
    return 0
