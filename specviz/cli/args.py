"""What several commands share: the model and sampling argument groups, and Settings and the
model pair from parsed arguments, and small helpers for commands."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from specviz.config import COMPILE_CHOICES, DRAFTERS, VERIFICATIONS, Settings


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
        help="the compiled path: static KV cache and torch.compile'd forwards (a backend; "
        "bare: inductor; off: eager; default auto: inductor on CUDA, eager on the CPU)",
    )


# The Settings fields add_sampling_args sets, each from the argument of the same name.
SAMPLING_FIELDS = (
    "drafter",
    "gamma",
    "adaptive_gamma",
    "temperature",
    "draft_temperature",
    "top_p",
    "top_k",
    "greedy",
    "max_new_tokens",
    "seed",
    "top_n",
    "verification",
    "typical_threshold",
    "typical_alpha",
    "match_top_k",
)


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    d = Settings()
    p.add_argument("--drafter", default=d.drafter, choices=DRAFTERS)
    p.add_argument("--gamma", type=int, default=d.gamma, help="tokens drafted per round (1..32)")
    p.add_argument("--adaptive-gamma", action="store_true", help="grow/shrink gamma per round")
    p.add_argument("--temperature", type=float, default=d.temperature)
    p.add_argument("--draft-temperature", type=float, default=None, help="changes q only")
    p.add_argument("--top-p", type=float, default=d.top_p)
    p.add_argument("--top-k", type=int, default=d.top_k, help="0 disables top-k")
    p.add_argument("--greedy", action="store_true", help="argmax decoding (one-hot p and q)")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--top-n", type=int, default=d.top_n, help="tokens listed per position")
    p.add_argument(
        "--verification",
        default=d.verification,
        choices=VERIFICATIONS,
        help="rejection: u < p/q; exact-match: the target's own sample equals the draft; "
        "typical and top-k-match are lossy (the text is no longer distributed as the target's)",
    )
    p.add_argument(
        "--typical-threshold",
        type=float,
        default=d.typical_threshold,
        help="typical (lossy): keep x iff p(x) > min(this, alpha exp(-H(p)))",
    )
    p.add_argument(
        "--typical-alpha", type=float, default=d.typical_alpha, help="typical (lossy): alpha"
    )
    p.add_argument(
        "--match-top-k",
        type=int,
        default=d.match_top_k,
        help="top-k-match (lossy): keep x iff it is among the target's k most likely tokens",
    )


def add_run_args(p: argparse.ArgumentParser) -> None:
    """Both groups: the model pair and the sampling settings of a command that runs it."""
    add_model_args(p)
    add_sampling_args(p)


def settings_from_args(args: argparse.Namespace, method: str = "spec") -> Settings:
    """Validated Settings from parsed arguments (raises ValueError)."""
    from specviz.config import Limits

    sampling = {name: getattr(args, name) for name in SAMPLING_FIELDS}
    return Settings(method=method, limits=Limits.from_env(), **sampling)


def load_pair_from_args(args: argparse.Namespace, compiled: bool = True) -> Any:
    """The pair the arguments name; on the path --compile chooses if compiled, else eager."""
    from specviz.models import load_pair, resolve_pair

    resolve_pair(args.pair, args.draft, args.target)  # fail fast, before any load
    pair = load_pair(
        args.pair, draft=args.draft, target=args.target, dtype=args.dtype, device=args.device
    )
    backend = getattr(args, "compile", None)
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
