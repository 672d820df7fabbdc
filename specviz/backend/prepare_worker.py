"""The set-up step's second process (specviz.models.prepare_offline_packages starts it):

python -m specviz.backend.prepare_worker DEVICE LENGTH ROLE/WIDTH ...
    builds some of the offline pair's packages beside the set-up step's own (two builds
    at once on two cores), and prints one JSON object on stdout: the seconds of each
    package it built by "role/width" (a role: target, draft, or a draft variant's name).
    A build that fails is left to the set-up step's process, which builds what is missing.

python -m specviz.backend.prepare_worker --check DEVICE LENGTH ROLE/WIDTH ...
    loads and probes packages just built, in a process that did not build them (so
    nothing of the build's process state can stand in for what the file holds), and
    prints one JSON object: by "role/width", "" for a package it used, else why not.
"""

from __future__ import annotations

import json
import sys
import time


def _models(device: str, wanted: list[str]) -> dict:
    """The models by role: "target" (the offline target), "draft" (the offline pair's
    draft, as its record chose it) and each variant of specviz.backend.draft_choice.VARIANTS named
    (built from the target, as the set-up step's process builds it)."""
    import torch

    from specviz.backend import draft_choice
    from specviz.models import OFFLINE_TARGET, _get_model, _lock, load_pair

    roles = {item.partition("/")[0] for item in wanted}
    if "draft" in roles:
        pair = load_pair(None, device=device)
        out = {"target": pair.target.model, "draft": pair.draft.model}
    else:
        with _lock:
            out = {"target": _get_model(OFFLINE_TARGET, torch.device(device), torch.float32).model}
    for role in roles & set(draft_choice.VARIANTS):
        out[role] = draft_choice.build(out["target"], role).to(device)
    return out


def build(device: str, length: int, wanted: list[str]) -> dict[str, float]:
    from specviz.backend import packages

    models = _models(device, wanted)
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
    return took


def check(device: str, length: int, wanted: list[str]) -> dict[str, str]:
    from specviz.backend import packages

    models = _models(device, wanted)
    verdicts = {}
    for item in wanted:
        role, _, width = item.partition("/")
        said: list[str] = []
        # load() removes a package it cannot use, with the line it reports
        fn = packages.load(models[role], int(width), length, report=said.append)
        verdicts[item] = "" if fn is not None else (said[-1] if said else "no package found")
    return verdicts


def main(argv: list[str]) -> int:
    checking = argv[:1] == ["--check"]
    if checking:
        argv = argv[1:]
    device, length, wanted = argv[0], int(argv[1]), argv[2:]
    out = (check if checking else build)(device, length, wanted)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
