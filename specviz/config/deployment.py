"""Where and how the app is served, read from environment variables when it is built
(never at import time): the input limits a public deployment lowers (:class:`Limits`), the
queue, concurrency and which model ids may load (:class:`Deployment`), whether this
process serves a ZeroGPU Space or a public one, and what a server keeps of its models
(:func:`max_pairs`, :func:`model_budget_gb`, read when a pair loads)."""

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


def on_public() -> bool:
    """Whether this process serves the public: SPACE_ID is set (Hugging Face Spaces sets it
    in every Space) or SPECVIZ_PUBLIC=1. There, anything a visitor types must not decide
    what the server downloads, so the custom hub-id pair is off unless the host turns it on."""
    return bool(os.environ.get("SPACE_ID", "").strip()) or _env_bool("SPECVIZ_PUBLIC", False)


def threads_setting() -> int | None:
    """The model's compute threads asked for: SPECVIZ_THREADS ("auto", the default, or a
    count), else OMP_NUM_THREADS (a count asked of OpenMP itself is kept); None is auto
    (specviz.threads adapts the count to what else the machine runs)."""
    name = "SPECVIZ_THREADS" if os.environ.get("SPECVIZ_THREADS", "").strip() else "OMP_NUM_THREADS"
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "auto"):
        return None
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(
            f"environment variable {name} must be 'auto' or a count, got {raw!r}"
        ) from None
    if not 1 <= n <= 256:
        raise ValueError(f"environment variable {name} must be in 1..256, got {n}")
    return n


def max_pairs() -> int:
    """SPECVIZ_MAX_PAIRS (default 2): how many hub pairs a process keeps loaded; beyond it the
    least recently used is released (the offline pair is kept whatever the count)."""
    return _env_int("SPECVIZ_MAX_PAIRS", 2)


def model_budget_gb() -> float | None:
    """SPECVIZ_MODEL_BUDGET_GB: the weights in GB (1e9 bytes) a server may hold at once, or
    None where unset (specviz.hub then takes a share of the memory the models go to)."""
    raw = os.environ.get("SPECVIZ_MODEL_BUDGET_GB", "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(
            f"environment variable SPECVIZ_MODEL_BUDGET_GB must be a number of GB > 0, got {raw!r}"
        )
    return value


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
    (they load from an installed package, never from the network). ``custom_models`` is the
    custom hub-id pair: on by default for a server of one's own, off by default on a public
    one (:func:`on_public`), where only SPECVIZ_CUSTOM_MODELS=1 turns it on.
    """

    limits: Limits = field(default_factory=Limits)
    concurrency: int = 1
    queue_size: int = 64
    allowed_models: frozenset[str] | None = None
    custom_models: bool = True
    public: bool = False
    shared_runs: int = 200  # shared runs kept on disk (specviz.sharestore), the oldest go first
    shared_mb: int = 200  # and their JSON at most this many MB

    @classmethod
    def from_env(cls) -> Deployment:
        """Read SPECVIZ_CONCURRENCY, SPECVIZ_QUEUE_SIZE, SPECVIZ_ALLOWED_MODELS (comma
        separated ids), SPECVIZ_CUSTOM_MODELS (1 or 0; unset: on, except on a public
        deployment), SPACE_ID and SPECVIZ_PUBLIC (:func:`on_public`), SPECVIZ_SHARED_RUNS and
        SPECVIZ_SHARED_MB (the shared runs kept) and the :class:`Limits` variables."""
        threads_setting()  # a bad thread count stops the app here, in one line
        raw = os.environ.get("SPECVIZ_ALLOWED_MODELS", "").strip()
        allowed = frozenset(x.strip() for x in raw.split(",") if x.strip()) if raw else None
        public = on_public()
        return cls(
            limits=Limits.from_env(),
            concurrency=_env_int("SPECVIZ_CONCURRENCY", cls.concurrency),
            queue_size=_env_int("SPECVIZ_QUEUE_SIZE", cls.queue_size),
            allowed_models=allowed,
            custom_models=_env_bool("SPECVIZ_CUSTOM_MODELS", not public),
            public=public,
            shared_runs=_env_int("SPECVIZ_SHARED_RUNS", cls.shared_runs),
            shared_mb=_env_int("SPECVIZ_SHARED_MB", cls.shared_mb),
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
