"""Target calls of n-gram drafting on the bench's prompts: specviz's n-gram drafter against
transformers' prompt lookup, replayed from one greedy autoregressive run per prompt.

    PYTHONPATH=. .venv/bin/python scripts/lookup_calls.py [--tokens 32,128]
        [--gammas 1,2,3,4,6,8,16] [--ngram 3] [--quick]

Runs the offline target autoregressively (greedy, EOS ignored, as the bench does) on the
full prompt set (--quick: the quick bench's), then counts each rule's target calls with
specviz.bench.lookup.replay_calls: no speculative run and no clock, so the counts are exact
and take seconds. Prints a markdown table, one row per (tokens, gamma), and the prompts on
which specviz's drafter needs more calls.
"""

from __future__ import annotations

import argparse

from specviz.bench.contenders import NGRAM_SIZE, specviz_run
from specviz.bench.lookup import replay_calls, specviz_lookup, transformers_lookup
from specviz.bench.prompts import prompt_set
from specviz.cli.args import csv_list
from specviz.models import load_pair


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="32,128")
    ap.add_argument("--gammas", default="1,2,3,4,6,8,16")
    ap.add_argument("--ngram", type=int, default=NGRAM_SIZE)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    tokens, gammas = csv_list(args.tokens, int), csv_list(args.gammas, int)
    pair = load_pair().without_eos()
    ar = specviz_run(pair, "greedy", method="ar")
    prompts = prompt_set(quick=args.quick)
    outs = {}
    for bp in prompts:
        ids = pair.encode_prompt(bp.text)
        outs[bp.name] = (ids, ar(ids, bp.text, 0, max(tokens)).tokens)
    ours, theirs = specviz_lookup(pair.vocab_size, args.ngram), transformers_lookup(args.ngram)
    names = [bp.name for bp in prompts]
    print(f"Target calls, greedy, n-gram size {args.ngram}: specviz / transformers per prompt")
    print()
    print("| tokens | gamma | " + " | ".join(names) + " | total | more calls on |")
    print("|---|---|" + "---|" * len(names) + "---|---|")
    for n in tokens:
        for g in gammas:
            cells, total, worse = [], [0, 0], []
            for name in names:
                ids, out = outs[name]
                a = replay_calls(ids, out[:n], ours, g)
                b = replay_calls(ids, out[:n], theirs, g)
                cells.append(f"{a} / {b}")
                total[0], total[1] = total[0] + a, total[1] + b
                if a > b:
                    worse.append(name)
            row = [str(n), str(g), *cells, f"{total[0]} / {total[1]}", ", ".join(worse) or "none"]
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
