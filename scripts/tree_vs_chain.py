"""Chains against trees of the same node count on one pair: tokens per target call, the
verify call's width and cost, and the measured speedup against the autoregressive baseline.

    PYTHONPATH=. .venv/bin/python scripts/tree_vs_chain.py [--tokens 64] [--seeds 3] \
        [--draft-temperature 1.5]

Each shape runs the same prompt and seeds; the baseline runs once per seed. A tree of the
same depth contains the chain and wins by construction, so the chain here has as many
drafted positions as the tree has nodes (the same verify width, nodes + 1).
"""

from __future__ import annotations

import argparse
import statistics

from specviz.config import DEFAULT_PROMPT, Settings, shape_text, tree_nodes
from specviz.engine import generate, warm_up
from specviz.models import load_pair

PAIRS = (((8,), (2, 1, 1, 1)), ((9,), (3, 1, 1)), ((10,), (2, 2, 1)))


def row(pair, base: Settings, seeds: int, ar_ms: list[float], **changes) -> dict:
    traces = [generate(pair, DEFAULT_PROMPT, base.with_(seed=s, **changes)) for s in range(seeds)]
    calls = sum(t.stats.target_calls for t in traces)
    tokens = sum(t.stats.new_tokens for t in traces)
    ms = [t.stats.ms_per_token for t in traces]
    rounds = [r for t in traces for r in t.rounds[1:]]  # the first call also reads the prompt
    return {
        "tokens_per_call": tokens / calls,
        "verify_ms": statistics.median(r.verify_ms for r in rounds),
        "speedup": statistics.median(a / b for a, b in zip(ar_ms, ms, strict=True)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--draft-temperature", type=float, default=None)
    args = ap.parse_args()
    pair, seeds = load_pair(), range(args.seeds)
    base = Settings(max_new_tokens=args.tokens, draft_temperature=args.draft_temperature)
    warm_up(pair, DEFAULT_PROMPT, base)
    warm_up(pair, DEFAULT_PROMPT, base.with_(tree=(2, 2, 1)))
    ar = base.with_(method="ar")
    ar_ms = [generate(pair, DEFAULT_PROMPT, ar.with_(seed=s)).stats.ms_per_token for s in seeds]
    print(f"draft temperature {args.draft_temperature or 'as the target'}, {args.tokens} tokens,")
    print(f"seeds 0..{args.seeds - 1}; AR {statistics.median(ar_ms):.1f} ms/token")
    print("| drafts | width | tokens/call | verify ms | speedup |")
    print("|---|---|---|---|---|")
    for (gamma,), shape in PAIRS:
        for name, kw, width in (
            (f"chain {gamma}", {"gamma": gamma}, gamma + 1),
            (f"tree {shape_text(shape)}", {"tree": shape}, tree_nodes(shape) + 1),
        ):
            r = row(pair, base, args.seeds, ar_ms, **kw)
            print(
                f"| {name} | {width} | {r['tokens_per_call']:.2f} | {r['verify_ms']:.1f} "
                f"| {r['speedup']:.2f}x |"
            )


if __name__ == "__main__":
    main()
