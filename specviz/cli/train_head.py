"""`python -m specviz train-head`: train the target's EAGLE feature head on its own answers
(specviz.head_train), resumably, within a time budget; prints the held-out alpha."""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

from specviz.head_cache import DEFAULT_BUDGET_MINUTES, DEFAULT_TOKENS


def add_parser(sub: Any) -> None:
    cmd = sub.add_parser(
        "train-head",
        help="train the target's EAGLE feature head on its own answers (self-distillation), "
        "resumably, within a time budget",
    )
    cmd.add_argument(
        "--budget-minutes",
        type=float,
        default=DEFAULT_BUDGET_MINUTES,
        help="the whole command's wall time, loading included; generating the data takes at "
        f"most 40%% of it (default {DEFAULT_BUDGET_MINUTES:g}: within 30 minutes on 2 cores), "
        "in (0, 1440]",
    )
    cmd.add_argument(
        "--tokens",
        type=int,
        default=DEFAULT_TOKENS,
        help=f"answer tokens the target generates for training (default {DEFAULT_TOKENS}), "
        "100..10000000",
    )
    cmd.add_argument("--seed", type=int, default=0, help="the data's and the head's seed")
    cmd.add_argument(
        "--steps",
        type=int,
        default=None,
        help="stop after this many training steps in all (a resumed run's included), or at "
        "the budget's end, whichever comes first (default: the budget's end)",
    )
    cmd.add_argument(
        "--pair", default=None, help="registered pair name (default: the offline pair)"
    )
    cmd.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    cmd.add_argument(
        "--fresh",
        action="store_true",
        help="start the training over (the checkpoint and the head are dropped; answers "
        "already generated with the same seed and tokens are kept: they would be the same)",
    )
    cmd.set_defaults(func=cmd_train_head)


def cmd_train_head(args: argparse.Namespace) -> int:
    started = time.monotonic()
    minutes = args.budget_minutes
    if not (math.isfinite(minutes) and 0 < minutes <= 1440):
        raise ValueError(f"budget-minutes must be in (0, 1440], got {minutes}")
    if args.steps is not None and not 1 <= args.steps <= 10_000_000:
        raise ValueError(f"steps must be in 1..10000000, got {args.steps}")
    from specviz.head_train import settings_with

    settings = settings_with(seed=args.seed, tokens=args.tokens)
    from specviz.models import load_pair, resolve_pair

    resolve_pair(args.pair, None, None)  # an unknown pair fails here, before any load
    from specviz.head_prompts import HELD_OUT, TRAIN
    from specviz.head_train import train_head
    from specviz.threads import machine_lines, policy

    threads = policy()  # the thread count follows the machine's load between model calls
    with threads.watch() as load:
        pair = load_pair(args.pair, device=args.device)
        record = train_head(
            pair.target.model,
            [pair.encode_prompt(p) for p in TRAIN],
            [pair.encode_prompt(p) for p in HELD_OUT],
            vocab=pair.vocab_size,
            eos_ids=pair.eos_ids,
            settings=settings,
            budget_s=minutes * 60,
            started=started,
            fresh=args.fresh,
            max_steps=args.steps,
            pace=threads.pace,
            machine=load.to_dict,
        )
    held = record["held_out"]
    print(f"head: {record['head']}")
    print(
        f"trained on {record['training_tokens']} answer positions in {record['steps']} steps "
        f"({record['data']['answer_tokens']} answer tokens of {record['data']['answers']} "
        f"answers), {record['seconds']['command']:.0f} s on {record['machine']['threads']} "
        f"({record['machine']['cpu']})"
    )
    data = record["data"]
    if not data["complete"]:
        print(
            f"the answers stopped at {data['answer_tokens']} of the {args.tokens} tokens asked "
            "for, at the budget's share for them: a rerun continues them (and the training)"
        )
    busy = machine_lines(record["machine"])[1]
    if busy:
        print(busy)
    print("training tokens  held-out alpha  top-1")
    for point in record["curve"]:
        print(f"{point['tokens']:15d}  {point['alpha']:14.3f}  {point['top1']:.3f}")
    print(
        f"held-out alpha {held['alpha']:.3f} (expected acceptance sum_x min(p, q) of the "
        "head's next-token distribution against the target's at temperature 1, one step "
        f"from the target's features, over {held['positions']} positions of "
        f"{held['answers']} held-out answers); greedy top-1 agreement {held['top1']:.3f}"
    )
    return 0
