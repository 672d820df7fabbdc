"""The verifications that keep a draft by a deterministic test on p alone (typical
acceptance, top-k match) and emit the target's own sample from p where the test fails.
Lossy: q is not consulted, so out = q a + (1 - sum q a) p differs from p.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from specviz.trace import Added, Drafted
from specviz.verify.base import Verification
from specviz.verify.words import num


class KeptByTest(Verification):
    """A verification that keeps a draft by a deterministic test on p and emits the
    target's own sample from p where it does not."""

    draws: ClassVar[str | None] = None
    fallback_source: ClassVar[str] = "p"
    measure: ClassVar[tuple[str, str]] = ("kept mass = sum_x q(x) a(x)", "kept_mass")

    def fallback(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return p  # the target's own sample from p where the test fails

    def kept(self, p_x, q_x, a, drawn):
        # no draw: a draft passes iff its test does (a(x) is 1 or 0); at the first miss the
        # round adds the target's own sample from p (fallback), after a full accept the bonus
        return a > 0

    def shown_keep(self, d: Drafted) -> float:
        return 1.0 if d.accept_prob >= 0.5 else 0.0  # the test's outcome, as recorded

    def draw_text(self, d: Drafted, a: float) -> str:
        return f"No draw: {self.label} keeps by its test {self.test_text}, so a(x) = {num(a)}."

    def promise_text(self) -> str:
        return (
            "which keeps drafts by a test on p alone and does not correct for q, so out "
            "differs from p"
        )

    def keep_title(self, d: Drafted) -> str:
        return f"{self.label}: keep probability a(x), a test on p alone"

    def keep_label(self, d: Drafted) -> str:
        return "a(x)"

    @property
    def test_text(self) -> str:
        raise NotImplementedError

    def keep_text(self, d: Drafted) -> str:
        if d.status == "accepted":
            return (
                f"kept by {self.label}: p = {num(d.p)} passes {self.test_text}; q is not consulted"
            )
        return (
            f"not kept by {self.label}: p = {num(d.p)} fails {self.test_text}; the round emits "
            "the target's own sample from p instead"
        )

    def replace_text(self, a: Added, drafts: int | None = None) -> str:
        if a.status == "bonus":
            return super().replace_text(a, drafts)
        return (
            f"resampled: {self.label} did not keep the draft, so the round emits the target's "
            f"own sample {a.text!r}, drawn from p (p = {num(a.p)})"
        )

    def statement(self) -> str:
        return (
            f"keep the draft x when {self.test_text}; at a miss emit the target's own sample from p"
        )
