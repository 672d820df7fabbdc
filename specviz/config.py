"""Validated settings for one generation.

Everything a user can set lives in :class:`Settings`, a frozen dataclass that checks itself
on construction and raises ``ValueError`` with a one-line message. No torch here, so the
CLI, the app and the tests can validate input before any model is touched.

Deployment limits (the largest gamma, max_new_tokens and prompt length a public app
accepts) and the app's deployment settings (:class:`Deployment`: queue size, concurrency,
which model ids may load) come from environment variables, read when they are built, never
at import time.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

METHODS = ("spec", "ar")
DRAFTERS = ("model", "ngram")
# "exact" is the rule of both papers. The others are deliberately wrong, kept so that the
# distribution check (tests, CLI, app) can show that it catches a broken algorithm.
RULES = ("exact", "resample-from-p", "accept-without-draw")
# How a round verifies its drafts; both are lossless. "rejection" is the papers' rule (accept
# x_i iff u_i < p(x_i)/q(x_i), resample from norm(max(0, p - q)) at the first rejection);
# "exact-match" samples the target's own y_i ~ p_i and accepts x_i iff y_i == x_i, keeping
# y_i at the first mismatch. `rule` names a variant of the rejection rule only: a wrong rule
# combined with any other verification is refused. "typical" (Medusa's typical acceptance)
# and "top-k-match" are lossy: they keep more drafts, and the text is no longer distributed
# as the target's (specviz.verification). Never the default.
LOSSY_VERIFICATIONS = ("typical", "top-k-match")
VERIFICATIONS = ("rejection", "exact-match", *LOSSY_VERIFICATIONS)
TRACE_LEVELS = ("full", "minimal")
# torch.compile backends of the compiled path (specviz.compiled), and what --compile takes:
# a backend, "off" (the eager path) or "auto" (compiled on CUDA, eager elsewhere).
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
COMPILE_CHOICES = ("auto", "off", *COMPILE_BACKENDS)
# The prompt a run starts from when nobody typed one: the app's first preset, the CLI's check.
DEFAULT_PROMPT = "Explain in three sentences why the sky is blue."
# The smallest temperature above 0 (greedy). logits / T must stay finite in float32: at
# T = 1e-40 it overflows and softmax returns NaN. vLLM raises temperatures below 0.01 to
# 0.01 for the same reason; here they are refused instead, since a silent change would
# change the target distribution the user asked for. At 0.01 a logit gap of 0.1 already
# scales the odds by e^-10, so nothing between 0 and 0.01 differs visibly from greedy.
MIN_TEMPERATURE = 0.01


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


def verification_of(settings: Mapping[str, Any]) -> str:
    """The verification of settings as a trace stores them; traces written before the
    setting existed used the rejection rule."""
    return str(settings.get("verification", "rejection"))


def verification_label(name: str) -> str:
    """A verification's name as every view prints it: a lossy one says so."""
    return f"{name} (lossy)" if name in LOSSY_VERIFICATIONS else name


def is_greedy(settings: Mapping[str, Any]) -> bool:
    """Whether settings (Settings.to_dict(), as a trace stores them) decode greedily: the
    greedy switch, or temperature 0."""
    return bool(settings.get("greedy")) or settings.get("temperature") == 0


@dataclass(frozen=True)
class Warp:
    """How logits become a distribution: the same transformation is applied to p and q."""

    temperature: float
    top_k: int
    top_p: float

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class Settings:
    """One generation's settings. Invalid values raise ValueError with a one-line message.

    The defaults are the CLI's and the app's untouched controls alike. Temperature 0.7 with
    top-p 0.9 keeps a small target coherent while it still samples; the output is
    distributed exactly as the target's own sampling at whatever values are chosen.
    """

    method: str = "spec"
    drafter: str = "model"
    gamma: int = 4
    adaptive_gamma: bool = False
    temperature: float = 0.7
    top_k: int = 0
    top_p: float = 0.9
    greedy: bool = False
    # Temperature of the draft's q only (None: the target's). The output stays exact: the
    # rule corrects any q, a mis-calibrated one just gets accepted less often.
    draft_temperature: float | None = None
    max_new_tokens: int = 128
    seed: int = 0
    top_n: int = 10
    ngram_size: int = 3
    rule: str = "exact"
    verification: str = "rejection"
    # The lossy verifications' parameters (vLLM's defaults for typical acceptance).
    typical_threshold: float = 0.09
    typical_alpha: float = 0.3
    match_top_k: int = 10
    trace_level: str = "full"
    limits: Limits = field(default_factory=Limits, compare=False, repr=False)

    def __post_init__(self) -> None:
        lim = self.limits
        _choice("method", self.method, METHODS)
        _choice("drafter", self.drafter, DRAFTERS)
        _choice("rule", self.rule, RULES)
        _choice("verification", self.verification, VERIFICATIONS)
        if self.verification != "rejection" and self.rule != "exact":
            raise ValueError(
                f"rule {self.rule!r} is a broken rejection rule: it cannot be combined "
                f"with {self.verification} verification"
            )
        _choice("trace_level", self.trace_level, TRACE_LEVELS)
        _int_range("gamma", self.gamma, 1, lim.max_gamma)
        _int_range("max_new_tokens", self.max_new_tokens, 1, lim.max_new_tokens)
        _int_range("top_k", self.top_k, 0, None)
        _int_range("top_n", self.top_n, 1, 100)
        _int_range("ngram_size", self.ngram_size, 1, 16)
        _int_range("seed", self.seed, 0, 2**63 - 1)
        _temperature("temperature", self.temperature)
        if self.draft_temperature is not None:
            _temperature("draft_temperature", self.draft_temperature)
        if not _is_number(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not _is_number(self.typical_threshold) or not 0.0 < self.typical_threshold <= 1.0:
            raise ValueError(f"typical_threshold must be in (0, 1], got {self.typical_threshold!r}")
        if not _is_number(self.typical_alpha) or not 0.0 < self.typical_alpha <= 1.0:
            raise ValueError(f"typical_alpha must be in (0, 1], got {self.typical_alpha!r}")
        _int_range("match_top_k", self.match_top_k, 1, 1_000_000)

    @property
    def is_greedy(self) -> bool:
        return is_greedy({"greedy": self.greedy, "temperature": self.temperature})

    def target_warp(self) -> Warp:
        """The warp that defines p (and the output distribution)."""
        temperature = 0.0 if self.is_greedy else float(self.temperature)
        return Warp(temperature, int(self.top_k), float(self.top_p))

    def draft_warp(self) -> Warp:
        """The warp that defines q: the target's, except for an optional draft temperature."""
        if self.is_greedy or self.draft_temperature is None:
            return self.target_warp()
        return Warp(float(self.draft_temperature), int(self.top_k), float(self.top_p))

    def with_(self, **changes: Any) -> Settings:
        """A validated copy with some fields changed."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain values for the trace (limits are deployment state, not a setting)."""
        d = asdict(self)
        d.pop("limits")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], limits: Limits | None = None) -> Settings:
        """Inverse of to_dict; unknown keys are an error."""
        known = {f for f in cls.__dataclass_fields__ if f != "limits"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown setting(s): {', '.join(unknown)}")
        return cls(**d, limits=limits or Limits())


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _choice(name: str, value: Any, options: tuple[str, ...]) -> None:
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(options)}; got {value!r}")


def _int_range(name: str, value: Any, lo: int, hi: int | None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be in {bound}, got {value}")


def _temperature(name: str, value: Any) -> None:
    if not _is_number(value) or value < 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    if 0 < value < MIN_TEMPERATURE:
        raise ValueError(f"{name} must be 0 (greedy) or at least {MIN_TEMPERATURE}, got {value!r}")
