"""What several commands share: the model and sampling argument groups, and Settings and the
model pair from parsed arguments, and small helpers for commands.

The sampling flags are derived from config.Settings (config.offered("cli")): a setting
declared there with the CLI among its front ends is a flag here, under its name with dashes.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from specviz.config import COMPILE_CHOICES, Limits, Settings, offered
from specviz.drafters import CHOICES, check_settings


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default=None, help="registered pair name (default: the offline pair)")
    p.add_argument("--draft", default=None, help="draft model id (a custom pair, with --target)")
    p.add_argument("--target", default=None, help="target model id (a custom pair, with --draft)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument(
        "--compile",
        nargs="?",
        const="inductor",
        default="auto",
        choices=COMPILE_CHOICES,
        help="the compiled path: static KV cache and compiled forwards (a torch.compile "
        "backend, or aoti: compiled ahead of time, built where missing; bare: inductor; off: "
        "eager; default auto: inductor on CUDA, on a CPU the packages the set-up step built, "
        "else eager)",
    )
    p.add_argument(
        "--eagle-head",
        default=None,
        metavar="SRC",
        help="for --drafter eagle: a published EAGLE-1 head for the target (a directory or a "
        "hub id in the EAGLE authors' layout), in place of one python -m specviz train-head "
        "saved",
    )


# A range a setting's help already states ("in (0, 1)", "in [0, 1]", "1..32", ">= 0"): the
# flag's help does not append the range again.
_STATED_RANGE = re.compile(r"\bin [(\[][^()\[\]]*[)\]]|\d\.\.\d|[<>]=? ?\d")


def add_sampling_args(p: argparse.ArgumentParser, cls: type[Settings] = Settings) -> None:
    """One flag per setting the CLI offers (config.schema): its type, default, choices and
    help, the valid range appended where the help does not state one, and for a list an
    example where the help gives none."""
    limits = Limits()
    for s in offered("cli", cls):
        help_text = s.meta.help or s.meta.label
        bounds = s.range_text(limits)
        if bounds and not _STATED_RANGE.search(help_text):
            entries = "entries " if s.kind is tuple else ""
            interval = bounds[0] in "(["
            help_text += f", {entries}in {bounds}" if interval else f" ({entries}{bounds})"
        if s.kind is bool:
            action = argparse.BooleanOptionalAction if s.default else "store_true"
            p.add_argument(s.flag, dest=s.name, action=action, default=s.default, help=help_text)
        elif s.kind is tuple:
            default = None if s.default is None else s.text(s.default)
            example = "" if "e.g." in help_text else ", e.g. 2,2,1"
            p.add_argument(s.flag, dest=s.name, default=default, help=help_text + example)
        elif choices := s.meta.choices or CHOICES.get(s.name):
            p.add_argument(s.flag, dest=s.name, default=s.default, choices=choices, help=help_text)
        else:
            p.add_argument(s.flag, dest=s.name, type=s.kind, default=s.default, help=help_text)


def add_run_args(p: argparse.ArgumentParser) -> None:
    """Both groups: the model pair and the sampling settings of a command that runs it."""
    add_model_args(p)
    add_sampling_args(p)


def settings_from_args(
    args: argparse.Namespace, method: str = "spec", cls: type[Settings] = Settings
) -> Settings:
    """Validated Settings from parsed arguments (raises ValueError), the drafter included:
    refused here, before any model loads, as the request check would refuse it."""
    sampling = {s.name: s.parse(getattr(args, s.name)) for s in offered("cli", cls)}
    settings = cls(method=method, limits=Limits.from_env(), **sampling)
    if method == "spec":
        check_settings(settings)
    return settings


def load_pair_from_args(args: argparse.Namespace, compiled: bool = True) -> Any:
    """The pair the arguments name; on the path --compile chooses if compiled, else eager."""
    from specviz.models import load_pair, resolve_pair

    resolve_pair(args.pair, args.draft, args.target)  # fail fast, before any load
    pair = load_pair(
        args.pair, draft=args.draft, target=args.target, dtype=args.dtype, device=args.device
    )
    if getattr(args, "eagle_head", None):
        from specviz.head_published import load_published

        pair.head = load_published(args.eagle_head, pair.target.model)
    backend = getattr(args, "compile", None)
    if backend == "auto" and getattr(args, "tree", None) is not None:
        backend = "off"  # trees run on the eager path only (specviz.backend.policy)
    return pair.with_compile(backend) if backend and compiled else pair


def csv_list(text: str | None, kind: type = str) -> tuple[Any, ...] | None:
    """A comma-separated argument as a tuple of kind (None stays None; raises ValueError)."""
    if text is None:
        return None
    try:
        return tuple(kind(x.strip()) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise ValueError(f"could not parse {text!r} as a comma-separated list") from exc


def require_prompt(prompt: str) -> None:
    """Refuse an empty prompt before any model loads."""
    if not prompt.strip():
        raise ValueError("prompt is empty")


def say(message: str) -> None:
    """One progress line on stderr."""
    print(message, file=sys.stderr, flush=True)
