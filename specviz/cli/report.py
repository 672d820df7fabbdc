"""`python -m specviz report`: one pair over a prompt set, category by category
(specviz.report), into a directory: runs.jsonl, report.json, report.html and traces/.

    python -m specviz report --prompts builtin --max-new-tokens 32 --out DIR
    python -m specviz report --prompts FILE.jsonl --compare-with ngram --out DIR
    python -m specviz report --prompts builtin --shard 0/4 --out DIR0   # and 1/4 ...
    python -m specviz report merge DIR0 DIR1 DIR2 DIR3 --out DIR

Bad input (a malformed line, an empty or too long prompt, a directory holding another
report) prints one line and exits 2 before anything is written. Progress goes to stderr.
Ctrl-C keeps every finished prompt; the same command again resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from specviz.cli.args import add_run_args, load_pair_from_args, say, settings_from_args

COMPARE_HELP = (
    "a second drafter or pair on the same prompts and seeds: ngram or eagle (that drafter "
    "on this pair; eagle needs a head from train-head), variant:NAME (the offline pair's "
    "draft built as another variant: w8-bf16, w8-fp16, w8-fp32, bf16, fp16), draft:ID "
    "(another draft model for this target), or a registered pair name"
)


def add_parser(sub: Any) -> None:
    r = sub.add_parser(
        "report",
        help="a pair report over a prompt set (or: report merge DIR... --out DIR)",
        description="Run a pair over a prompt set and write runs.jsonl, report.json and "
        "report.html into --out; `report merge DIR... --out DIR` combines shards.",
    )
    r.add_argument("merge", nargs="*", metavar="merge DIR", help="merge these shard directories")
    r.add_argument(
        "--prompts", default=None, help="a JSON lines file ({prompt, category, id}) or builtin"
    )
    r.add_argument("--out", required=True, metavar="DIR", help="the report's directory")
    r.add_argument("--shard", default="0/1", help="run every n-th prompt: i/n, 0 <= i < n")
    r.add_argument("--compare-with", default=None, metavar="DRAFTER", help=COMPARE_HELP)
    r.add_argument("--raw", action="store_true", help="do not apply the chat template")
    add_run_args(r)
    r.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    if args.merge:
        return cmd_merge(args)
    from specviz.report import prompts as prompt_sets
    from specviz.report.run import Plan, ReportRun, Shard, check_prompts, check_resumable

    if args.prompts is None:
        raise ValueError("give --prompts FILE.jsonl or --prompts builtin")
    prompts = prompt_sets.read_prompts(args.prompts)
    settings = settings_from_args(args)
    shard = Shard.parse(args.shard)
    compare_settings = _compare_settings(args.compare_with, settings)
    plan = Plan(
        prompts=prompts,
        settings=settings,
        pair=pair_identity(args),
        compare_with=args.compare_with,
        compare_settings=compare_settings,
        shard=shard,
        raw=args.raw,
        source=args.prompts,
    )
    out = Path(args.out)
    resuming = check_resumable(out, plan)  # before any model loads
    pair = load_pair_from_args(args)
    compare_pair = _compare_pair(args, pair)
    check_prompts(pair, plan, compare_pair)
    about = {"pair": pair.describe(), "command": "report"}
    run = ReportRun(out, plan, pair, compare_pair, about=about)
    mine = len(plan.mine())
    say(
        f"report: {mine} prompts{'' if shard.n == 1 else f' (shard {shard.text})'} from "
        f"{args.prompts} into {out}"
        + (f"; resuming after {run.resumed} finished" if resuming else "")
    )
    try:
        for progress in run:
            say(progress.line())
    except KeyboardInterrupt:
        paths = run.write()
        say(
            f"stopped: {len(run.records)} of {mine} prompts kept in {out / 'runs.jsonl'}; "
            f"the same command resumes; partial report in {paths[2]}"
        )
        return 130
    for path in run.write():
        say(f"wrote {path}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from specviz.report.run import merge

    words = list(args.merge)
    if words[0] != "merge":
        raise ValueError(
            f"unexpected argument {words[0]!r}: report takes --prompts, or merge DIR..."
        )
    if len(words) < 2:
        raise ValueError("report merge needs the shard directories")
    if args.prompts is not None:
        raise ValueError("report merge reads the shards' prompts: drop --prompts")
    for path in merge([Path(d) for d in words[1:]], Path(args.out), say):
        say(f"wrote {path}")
    return 0


def pair_identity(args: argparse.Namespace) -> dict[str, Any]:
    """The pair as the arguments name it (checked, nothing loaded): what a resume matches."""
    from specviz.backend.offline import OFFLINE_IDS
    from specviz.models import resolve_pair

    spec = resolve_pair(args.pair, args.draft, args.target)
    ident: dict[str, Any] = {
        "name": spec.name,
        "draft": spec.draft,
        "target": spec.target,
        "dtype": args.dtype,
        "device": args.device,
        "compile": args.compile,
    }
    if spec.draft in OFFLINE_IDS:
        from specviz.backend.draft_choice import requested

        ident["offline_draft"] = requested()
    return ident


def _compare_settings(what: str | None, settings: Any) -> Any:
    """The second drafter's settings: the n-gram drafter's, or the same ones."""
    if what is None:
        return None
    from specviz.drafters import ENTRIES

    if what in ENTRIES and not ENTRIES[what].needs_draft_model:  # ngram, eagle
        return settings.with_(drafter=what)
    if what.startswith(("variant:", "draft:")):
        kind, _, name = what.partition(":")
        if not name:
            raise ValueError(f"--compare-with {kind}: needs a name, e.g. {kind}:bf16")
        if kind == "variant":
            from specviz.backend.draft_choice import VARIANTS

            if name not in VARIANTS:
                raise ValueError(
                    f"--compare-with variant:{name}: known variants are {', '.join(VARIANTS)}"
                )
        return settings
    from specviz.models import PAIRS

    if what not in PAIRS:
        raise ValueError(
            f"--compare-with {what!r}: give ngram, eagle, variant:NAME, draft:ID or a pair name "
            f"({', '.join(PAIRS)})"
        )
    return settings


def _compare_pair(args: argparse.Namespace, pair: Any) -> Any:
    """The pair the second drafter runs on (None: this pair)."""
    what = args.compare_with
    from specviz.drafters import ENTRIES

    if what is None or what in ENTRIES:  # another drafter on this pair
        return None
    kind, _, name = what.partition(":")
    if kind == "variant":
        return variant_pair(pair, name)
    if kind == "draft":
        from specviz.models import load_pair

        return load_pair(draft=name, target=pair.target.name, dtype=args.dtype, device=args.device)
    other = argparse.Namespace(**{**vars(args), "pair": what, "draft": None, "target": None})
    return load_pair_from_args(other)


def variant_pair(pair: Any, variant: str) -> Any:
    """The offline pair with its draft built as another variant (specviz.backend.draft_choice)."""
    from specviz.backend import draft_choice
    from specviz.backend.offline import OFFLINE_DRAFT, OFFLINE_TARGET
    from specviz.pair import LoadedModel

    if pair.target.name != OFFLINE_TARGET or pair.target.dtype != "float32":
        raise ValueError("--compare-with variant: needs the offline pair in float32")
    model = draft_choice.build(pair.target.model, variant).to(pair.device)
    draft = LoadedModel(
        f"{OFFLINE_DRAFT} ({variant})",
        model,
        pair.device,
        draft_choice.describe_variant(variant),
        pair.target.vocab_size,
        0.0,
        "derived",
    )
    return dataclasses.replace(pair, draft=draft, _texts={})
