"""What a benchmark run measures: modes, gammas, tokens, repetitions, and their checks.

``BenchOptions.make`` gives the defaults of a full or a --quick run and validates them,
raising a one-line ValueError on options the bench cannot run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from specviz.bench.prompts import KINDS, QUICK_KINDS
from specviz.config import COMPILE_BACKENDS, DEFAULT_GAMMAS

MODES = ("greedy", "sample")
SAMPLE_TEMPERATURE, SAMPLE_TOP_P = 0.8, 0.95  # Chen et al.'s HumanEval setting
FULL_GAMMAS = DEFAULT_GAMMAS
QUICK_GAMMAS = (4, 8)
FULL_TOKENS, QUICK_TOKENS = 128, 32
REPS = 3


@dataclass(frozen=True)
class BenchOptions:
    """What to run; --quick picks fewer prompts, gammas and tokens."""

    quick: bool = False
    gammas: tuple[int, ...] = FULL_GAMMAS
    max_new_tokens: int = FULL_TOKENS
    reps: int = REPS
    kinds: tuple[str, ...] = KINDS
    modes: tuple[str, ...] = MODES
    warmup_tokens: int = 8
    hf: bool = True  # run the transformers contenders
    load_probe: bool = True  # measure a cold load in a subprocess (offline pair only)
    compile: str | None = None  # also run the compiled path with this torch.compile backend
    seed: int = 0

    @classmethod
    def make(cls, quick: bool = False, **changes: Any) -> BenchOptions:
        """Defaults for a full or a quick run, then explicit changes (None means default)."""
        base = cls(quick=quick)
        if quick:
            base = dataclasses.replace(
                base, gammas=QUICK_GAMMAS, max_new_tokens=QUICK_TOKENS, kinds=QUICK_KINDS
            )
        changes = {k: value for k, value in changes.items() if value is not None}
        opts = dataclasses.replace(base, **changes)
        opts.validate()
        return opts

    def validate(self) -> None:
        """Raise ValueError on options the bench cannot run."""
        if not self.gammas or any(not 1 <= g <= 32 for g in self.gammas):
            raise ValueError(f"gammas must be in 1..32, got {self.gammas}")
        if self.reps < 3:
            raise ValueError(f"reps must be at least 3 (medians of repeated runs), got {self.reps}")
        if not 2 <= self.max_new_tokens <= 2048:
            raise ValueError(f"max_new_tokens must be in 2..2048, got {self.max_new_tokens}")
        for k in self.kinds:
            if k not in KINDS:
                raise ValueError(f"unknown prompt kind {k!r}; known: {', '.join(KINDS)}")
        for m in self.modes:
            if m not in MODES:
                raise ValueError(f"unknown mode {m!r}; known: {', '.join(MODES)}")
        if self.compile is not None and self.compile not in COMPILE_BACKENDS:
            raise ValueError(f"unknown compile backend {self.compile!r}")


def reference_gamma(gammas: tuple[int, ...]) -> int:
    """The gamma used for the single-gamma comparisons (d, n-gram): 4 when measured."""
    return 4 if 4 in gammas else max(gammas)
