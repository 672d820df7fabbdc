"""The distribution check: speculative sampling must draw from exactly the target's p.

For one prompt and one set of settings, draw N short continuations with speculative
sampling and N with plain autoregressive sampling, both through the engine, and compare
each empirical distribution with the exact target probabilities:

- the first token, whose distribution p is enumerated from one target forward after the
  warp (temperature, top-k, top-p) that the engine applies;
- the whole continuation of ``length`` tokens, whose frequent outcomes are enumerated
  exactly by expanding the tree of continuations (a prefix whose probability is below the
  binning threshold cannot have a frequent child, so the expansion is exact and bounded).

Outcomes whose expected count is at least ``MIN_EXPECTED`` get a bin each, the rest share
an "other" bin (specviz.analysis.binning). Each comparison reports the total-variation distance
over those bins and a chi-square goodness-of-fit p-value against p (plus a two-sample test
speculative against autoregressive). The check passes when every speculative p-value is at
least the significance level divided by the number of views (Bonferroni).

A round never drafts past the token budget, so a one-token generation never drafts at all:
the runs always generate at least two tokens and the views look at the first ``length``.

The deliberately wrong rules of ``Settings.rule`` ("resample-from-p", "accept-without-draw")
show the same check catching a broken algorithm. They are variants of the rejection rule;
exact-match verification (``Settings.verification``) is checked as it is. Nothing here
imports gradio: the app calls :func:`iter_check` or :func:`run_check`, and
specviz.views.check_figure draws the result.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from specviz.analysis.binning import MIN_EXPECTED, CheckView, make_view
from specviz.config import (
    LOSSY_VERIFICATIONS,
    RULES,
    Settings,
    Warp,
    verification_label,
    verification_of,
)
from specviz.engine import generate, prompt_ids_for
from specviz.lm import CachedLM
from specviz.pair import ModelPair
from specviz.sampling import residual, warp
from specviz.tree import root_children, sibling_first_token
from specviz.verification import normalised, rule_for, total_variation

MIN_N = 200
MAX_N = 100_000
MAX_LENGTH = 3
SIGNIFICANCE = 0.01

Outcome = tuple[int, ...]


def rule_first_token(
    p: torch.Tensor, q: torch.Tensor, rule: str, verification: str = "rejection"
) -> torch.Tensor:
    """The distribution of a round's first token when one token x ~ q is drafted: [V].

    "exact" gives p itself (the theorem); the two wrong rules give something else:
    "resample-from-p" gives min(p, q) + (1 - alpha) p, "accept-without-draw" gives
    q 1[p >= q] + (mass of q where p < q) * norm(max(0, p - q)). Exact match gives p too:
    t comes out as the accepted draft with probability q(t) p(t), and as the target's
    sample after a mismatch with probability sum_{x != t} q(x) p(t) = (1 - q(t)) p(t).
    """
    if verification == "exact-match":
        return q * p + (1.0 - q) * p
    if rule == "exact":
        accepted = torch.minimum(p, q)
        return accepted + (1.0 - accepted.sum()) * residual(p, q)
    if rule == "resample-from-p":
        accepted = torch.minimum(p, q)
        return accepted + (1.0 - accepted.sum()) * p
    if rule == "accept-without-draw":
        keep = p >= q
        return q * keep + (q * ~keep).sum() * residual(p, q)
    raise ValueError(f"rule must be one of {', '.join(RULES)}; got {rule!r}")


# --- exact target probabilities ----------------------------------------------------------


class TargetProbs:
    """Exact warped target rows p(. | prompt + prefix), memoised, through the engine's LM."""

    def __init__(self, pair: ModelPair, prompt_ids: list[int], w: Warp) -> None:
        self.lm = CachedLM(pair.target.model, pair.vocab_size)
        self.prompt_ids, self.w = list(prompt_ids), w
        self._rows: dict[Outcome, torch.Tensor] = {}

    @torch.inference_mode()
    def row(self, prefix: Outcome) -> torch.Tensor:
        """p after prompt + prefix: [V] float32 on the CPU."""
        if prefix not in self._rows:
            logits = self.lm.logits(self.prompt_ids + list(prefix))[-1]
            self._rows[prefix] = warp(logits, self.w).cpu()
        return self._rows[prefix]


def continuations(
    probs: TargetProbs, length: int, eos_ids: frozenset[int], min_prob: float
) -> tuple[dict[Outcome, float], float]:
    """Every continuation of `length` tokens (or ending at EOS) with P >= min_prob, exactly,
    and the total P of all the others: the pruned subtrees' masses summed, each one from its
    row (not 1 - sum, whose round-off would swamp a rest of 1e-7)."""
    out: dict[Outcome, float] = {}
    rest = 0.0
    stack: list[tuple[Outcome, float]] = [((), 1.0)]
    while stack:
        prefix, pp = stack.pop()
        if len(prefix) == length or (prefix and prefix[-1] in eos_ids):
            if pp >= min_prob:
                out[prefix] = pp
            else:  # its own mass fell below the bar on the way down
                rest += pp
            continue
        row = probs.row(prefix).double()
        keep = row * pp >= min_prob
        rest += pp * float(row[~keep].sum())
        for x in keep.nonzero().flatten().tolist():
            stack.append(((*prefix, x), pp * float(row[x])))
    return out, rest


# --- results -------------------------------------------------------------------------------


@dataclass
class CheckResult:
    """Everything the CLI prints, the app plots and the tests assert."""

    prompt: str
    settings: dict[str, Any]
    rule: str
    n: int
    length: int
    significance: float
    views: list[CheckView]
    spec_acceptance: float  # accepted / verified drafts over all speculative samples
    predicted_tv: float | None  # TV(first-token distribution under this rule, p); model drafter
    elapsed_s: float
    spec_samples: list[list[int]] = field(repr=False, default_factory=list)
    ar_samples: list[list[int]] = field(repr=False, default_factory=list)

    @property
    def verifier(self) -> str:
        """What verified the drafts: "rule exact" (or a broken rule), "exact match", or a
        lossy verification by its label ("typical (lossy)")."""
        used = verification_of(self.settings)
        if used in LOSSY_VERIFICATIONS:
            return verification_label(used)
        return "exact match" if used == "exact-match" else f"rule {self.rule}"

    @property
    def threshold(self) -> float:
        """Per-view significance level (Bonferroni over the views)."""
        return self.significance / max(1, len(self.views))

    @property
    def passed(self) -> bool:
        """True when no view rejects 'speculative samples follow p'."""
        return all(v.spec_test.p_value >= self.threshold for v in self.views)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"], d["threshold"] = self.passed, self.threshold
        return json_safe(d)

    def summary(self) -> str:
        """A few lines: the verdict and each view's numbers."""
        verdict = "PASS" if self.passed else "FAIL"
        lines = [
            f"{verdict}: {self.verifier}, N = {self.n} speculative and {self.n} "
            f"autoregressive samples of {self.length} token(s); a view fails below "
            f"p-value {self.threshold:.3g}"
        ]
        for v in self.views:
            lines.append(
                f"  {v.name}: TV(spec, p) = {v.tv_spec:.3f}, TV(AR, p) = {v.tv_ar:.3f}; "
                f"chi-square p-value spec {v.spec_test.p_text}, AR {v.ar_test.p_text}, "
                f"spec vs AR {v.two_sample.p_text} ({len(v.labels)} bins)"
            )
        lines.append(f"  speculative acceptance rate: {self.spec_acceptance:.3f}")
        if self.predicted_tv is not None:
            measured = f"; measured TV(spec, p) = {self.views[0].tv_spec:.3f}" if self.views else ""
            lines.append(
                f"  {self.verifier} moves the first token's distribution by TV = "
                f"{self.predicted_tv:.3f} (exact, from p and the draft's q){measured}"
            )
        return "\n".join(lines)


def json_safe(x: Any) -> Any:
    """JSON-safe copy: infinities become None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


# --- running the check -------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """How far a check has got: samples drawn out of the total."""

    done: int
    total: int
    stage: str


def validate(n: int, length: int, rule: str) -> None:
    """Raise ValueError for an N, length or rule the check does not accept."""
    if not isinstance(n, int) or isinstance(n, bool) or not MIN_N <= n <= MAX_N:
        raise ValueError(f"n must be an integer in {MIN_N}..{MAX_N}, got {n!r}")
    if not isinstance(length, int) or isinstance(length, bool) or not 1 <= length <= MAX_LENGTH:
        raise ValueError(f"length must be an integer in 1..{MAX_LENGTH}, got {length!r}")
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}; got {rule!r}")


def draw_samples(
    pair: ModelPair, prompt: str, settings: Settings, i: int, length: int, raw: bool = False
) -> tuple[Outcome, Outcome, tuple[int, int]]:
    """Sample i of each method: (speculative outcome, autoregressive outcome,
    (accepted, verified) drafts of the speculative run).

    The speculative run uses seed settings.seed + 2i and the autoregressive one
    settings.seed + 2i + 1, so the two samples are independent and reproducible.
    """
    seed = settings.seed + 2 * i
    spec = generate(pair, prompt, settings.with_(method="spec", seed=seed), raw=raw)
    ar = generate(pair, prompt, settings.with_(method="ar", seed=seed + 1), raw=raw)
    drafts = (spec.stats.accepted, spec.stats.verified)
    return tuple(spec.token_ids[:length]), tuple(ar.token_ids[:length]), drafts


def iter_check(
    pair: ModelPair,
    prompt: str,
    settings: Settings,
    n: int = 400,
    length: int = 2,
    rule: str | None = None,
    raw: bool = False,
    significance: float = SIGNIFICANCE,
) -> Iterator[Progress | CheckResult]:
    """Run the check, yielding Progress after each pair of samples and the result last."""
    rule = settings.rule if rule is None else rule
    validate(n, length, rule)
    t0 = time.perf_counter()
    base = settings.with_(max_new_tokens=max(2, length), rule=rule, trace_level="minimal")
    prompt_ids = prompt_ids_for(pair, prompt, base, raw)
    spec_s: list[Outcome] = []
    ar_s: list[Outcome] = []
    accepted = verified = 0
    yield Progress(0, 2 * n, "sampling")
    for i in range(n):
        spec, ar, (a, v) = draw_samples(pair, prompt, base, i, length, raw)
        spec_s.append(spec)
        ar_s.append(ar)
        accepted, verified = accepted + a, verified + v
        yield Progress(2 * (i + 1), 2 * n, "sampling")
    yield Progress(2 * n, 2 * n, "exact probabilities")
    probs = TargetProbs(pair, prompt_ids, base.target_warp())
    yield CheckResult(
        prompt=prompt,
        settings=base.to_dict(),
        rule=rule,
        n=n,
        length=length,
        significance=significance,
        views=compare(pair, probs, spec_s, ar_s, length),
        spec_acceptance=accepted / verified if verified else 0.0,
        predicted_tv=_predicted_tv(pair, prompt_ids, base, probs, rule),
        elapsed_s=time.perf_counter() - t0,
        spec_samples=[list(s) for s in spec_s],
        ar_samples=[list(s) for s in ar_s],
    )


def compare(
    pair: ModelPair,
    probs: TargetProbs,
    spec: Sequence[Outcome],
    ar: Sequence[Outcome],
    length: int,
) -> list[CheckView]:
    """The views: the first token, and the whole continuation when length > 1."""

    def label(o: Outcome) -> str:
        return "".join(pair.token_text(t) for t in o)

    n = max(len(spec), len(ar))
    p0 = probs.row(())
    first = {(int(i),): float(p0[i]) for i in p0.nonzero().flatten().tolist()}
    views = [make_view("first token", first, [s[:1] for s in spec], [s[:1] for s in ar], label)]
    if length > 1:
        cont, rest = continuations(probs, length, pair.eos_ids, MIN_EXPECTED / n)
        views.append(make_view(f"continuation of {length} tokens", cont, spec, ar, label, rest))
    return views


@torch.inference_mode()
def _predicted_tv(
    pair: ModelPair, prompt_ids: list[int], s: Settings, probs: TargetProbs, rule: str
) -> float | None:
    """TV between p and the first token's distribution under the rule or exact match
    (model drafter)."""
    if s.drafter != "model" or pair.draft is None:
        return None
    if s.is_greedy:
        return 0.0
    if s.drafts_tree:  # b children at the root, tried one after another
        p, q = first_token_rows(pair, prompt_ids, s, probs)
        b = s.tree[0] if s.tree is not None else root_children(s.tree_budget, first_depth(s))
        first = sibling_first_token(p, q, b, rule if s.verification == "rejection" else "")
        return float(0.5 * (first - p).abs().sum())
    p, out = first_token_out(pair, prompt_ids, s.with_(rule=rule), probs)
    return float(total_variation(out, normalised(p)))


@torch.inference_mode()
def first_token_out(
    pair: ModelPair, prompt_ids: list[int], s: Settings, probs: TargetProbs
) -> tuple[torch.Tensor, torch.Tensor]:
    """p and the exact distribution [V] (float64) of a round's first token when one draft
    x ~ q is drafted, under the verification (and rule) of s (model drafter): the rule
    object's out(p, q) (specviz.verification)."""
    p, q = first_token_rows(pair, prompt_ids, s, probs)
    return p, rule_for(s).out(p, q)


@torch.inference_mode()
def first_token_rows(
    pair: ModelPair, prompt_ids: list[int], s: Settings, probs: TargetProbs
) -> tuple[torch.Tensor, torch.Tensor]:
    """p and q [V] at the prompt's end, as a round's first draft and verify see them."""
    assert pair.draft is not None
    # Both over the tokenizer's V ids, as in the engine (specviz.lm cuts padded columns).
    lm = CachedLM(pair.draft.model, pair.vocab_size)
    q = warp(lm.logits(prompt_ids)[-1], s.draft_warp()).cpu()  # [V]
    return probs.row(()), q


def first_depth(s: Settings) -> int:
    """A dynamic tree's depth in the check's first round (the token budget cuts gamma)."""
    return max(1, min(s.gamma, s.max_new_tokens - 1))


def run_check(
    pair: ModelPair,
    prompt: str,
    settings: Settings,
    *args: Any,
    progress_cb: Callable[[Progress], None] | None = None,
    **kwargs: Any,
) -> CheckResult:
    """Run the whole check: iter_check's arguments (n, length, rule, raw, significance),
    and progress_cb (if given) receives every Progress."""
    result = None
    for item in iter_check(pair, prompt, settings, *args, **kwargs):
        if isinstance(item, Progress):
            if progress_cb is not None:
                progress_cb(item)
        else:
            result = item
    assert result is not None
    return result
