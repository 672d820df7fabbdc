"""Where and how the app is served, read from environment variables when it is built
(never at import time): the input limits a public deployment lowers (:class:`Limits`), the
queue, concurrency and which model ids may load (:class:`Deployment`), and whether this
process serves a ZeroGPU Space."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def _env_int(name: str, default: int, lo: int = 1) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from exc
    if value < lo:
        raise ValueError(f"environment variable {name} must be >= {lo}, got {value}")
    return value


def on_zero_gpu() -> bool:
    """Whether SPACES_ZERO_GPU says this process serves a ZeroGPU Space (the GPU is attached
    per call there, and torch.compile is not supported)."""
    return os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "t", "true")


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"environment variable {name} must be 1 or 0, got {raw!r}")


@dataclass(frozen=True)
class Limits:
    """Upper bounds on user input; public deployments lower them by environment variables."""

    max_gamma: int = 32
    max_new_tokens: int = 2048
    max_prompt_tokens: int = 4096

    @classmethod
    def from_env(cls) -> Limits:
        """Read SPECVIZ_MAX_GAMMA, SPECVIZ_MAX_NEW_TOKENS and SPECVIZ_MAX_PROMPT_TOKENS."""
        base = cls()
        return cls(
            max_gamma=min(base.max_gamma, _env_int("SPECVIZ_MAX_GAMMA", base.max_gamma)),
            max_new_tokens=min(
                base.max_new_tokens, _env_int("SPECVIZ_MAX_NEW_TOKENS", base.max_new_tokens)
            ),
            max_prompt_tokens=_env_int("SPECVIZ_MAX_PROMPT_TOKENS", base.max_prompt_tokens),
        )


@dataclass(frozen=True)
class Deployment:
    """How a public app is served: input limits, the queue, and which model ids may load.

    ``allowed_models`` None allows any hub id; the offline pair's ids are always allowed
    (they load from an installed package, never from the network).
    """

    limits: Limits = field(default_factory=Limits)
    concurrency: int = 1
    queue_size: int = 64
    allowed_models: frozenset[str] | None = None
    custom_models: bool = True

    @classmethod
    def from_env(cls) -> Deployment:
        """Read SPECVIZ_CONCURRENCY, SPECVIZ_QUEUE_SIZE, SPECVIZ_ALLOWED_MODELS (comma
        separated ids), SPECVIZ_CUSTOM_MODELS (1 or 0) and the :class:`Limits` variables."""
        raw = os.environ.get("SPECVIZ_ALLOWED_MODELS", "").strip()
        allowed = frozenset(x.strip() for x in raw.split(",") if x.strip()) if raw else None
        return cls(
            limits=Limits.from_env(),
            concurrency=_env_int("SPECVIZ_CONCURRENCY", cls.concurrency),
            queue_size=_env_int("SPECVIZ_QUEUE_SIZE", cls.queue_size),
            allowed_models=allowed,
            custom_models=_env_bool("SPECVIZ_CUSTOM_MODELS", cls.custom_models),
        )

    def allows(self, model_id: str) -> bool:
        """Whether this deployment may load model_id."""
        if model_id.startswith("offline:") or self.allowed_models is None:
            return True
        return model_id in self.allowed_models

    def check_allowed(self, model_id: str) -> None:
        """Raise ValueError (one line) for a model id outside the allow-list."""
        if not self.allows(model_id):
            raise ValueError(f"model {model_id!r} is not allowed on this deployment")
