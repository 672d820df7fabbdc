"""Builds some of the offline pair's packages in a process of its own, beside the set-up
step's (specviz.models.prepare_offline_packages starts it): two builds at once on two cores.

    python -m specviz.compiled.prepare_worker DEVICE LENGTH ROLE/WIDTH ...

Prints one JSON object on stdout, the seconds of each package it built by "role/width"; a
build that fails is left to the set-up step's process, which builds what is missing.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    from specviz.compiled import packages
    from specviz.models import load_pair

    device, length, wanted = argv[0], int(argv[1]), argv[2:]
    pair = load_pair(None, device=device)
    models = {"target": pair.target.model, "draft": pair.draft.model}
    took = {}
    for item in wanted:
        role, _, width = item.partition("/")
        t0 = time.perf_counter()
        try:
            packages.build(models[role], int(width), length)
        except Exception as exc:  # the set-up step's process builds it instead
            packages.say(
                f"specviz: building the {role}'s {width}-position call failed here "
                f"({type(exc).__name__}); the set-up step builds it"
            )
            continue
        took[item] = time.perf_counter() - t0
        packages.say(
            f"specviz: compiled the {role}'s {width}-position call ahead of time in "
            f"{took[item]:.0f} s (in a second process)"
        )
    print(json.dumps(took), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
