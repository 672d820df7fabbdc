"""The distribution check: speculative sampling must draw from exactly the target's p.

For one prompt and one set of settings, draw N short continuations with speculative
sampling and N with plain autoregressive sampling, both through the engine, and compare
each empirical distribution with the target's probabilities:

- the first token, whose distribution p is enumerated from one target forward after the
  warp (temperature, top-k, top-p) that the engine applies;
- the whole continuation of ``length`` tokens, whose frequent outcomes are enumerated
  exactly by expanding the tree of continuations (a prefix whose probability is below the
  binning threshold cannot have a frequent child, so the expansion is complete and bounded).

Outcomes whose expected count is at least ``MIN_EXPECTED`` get a bin each, the rest share
an "other" bin (specviz.analysis.binning). Each comparison reports the total-variation distance
over those bins and a chi-square goodness-of-fit p-value against p (plus a two-sample test
speculative against autoregressive). The check passes when every speculative p-value is at
least the significance level divided by the number of comparisons (Bonferroni). The target's p comes
from a cache of its own (eager, whatever path the runs take), so that it does not share a
fault with the runs it judges; the autoregressive samples are the control.

Each sample is one run of the engine (specviz.engine.Run: its drafter, its verification and
its decision code on the models' own rows), stopped after the round in which its output
reaches ``length`` tokens; the outcome is that output's first ``length`` tokens (fewer when
one is EOS). The runs' token budget is ``length`` plus the largest draft a round may make
(``Limits.max_gamma``), so no round before the stop has its draft cut by the budget: every
round drafts to its full depth (gamma, or whatever the settings draft), the deeper
positions included. So the test compares the right distribution:

- Run the same rounds with no budget at all: the output is an endless stream Y1, Y2, ...
  (or one ending at EOS), and by the theorem of both papers its first ``length`` tokens
  are distributed as the target's autoregressive continuation, whatever the draft does.
- With the check's budget, a round that starts with m < ``length`` tokens out may draft
  min(gamma, budget - m - 1) = gamma tokens: up to the stop, the budgeted run takes the
  same rounds as the unbounded one, on the same random numbers. Its first ``length``
  tokens are Y1..Y_length.
- Stopping after round tau, the first round that reaches ``length`` tokens, selects
  nothing: whether tau = t is decided by the first t rounds, and by round tau the first
  ``length`` tokens are all out, so the outcome read is always Y1..Y_length itself; the
  tokens the stopping round emits beyond them are dropped, never chosen.

The samples share their work (specviz.analysis.prompt_cache): both models read the prompt
once, each run starts from caches cropped back to it, and a row already computed after the
same tokens (the prompt-end p and q of every first token, or a draft an earlier sample
took) is not computed again. Speculative run i uses seed settings.seed + 2i and the
autoregressive one settings.seed + 2i + 1, so the two samples are independent and
reproducible.

The deliberately wrong rules of ``Settings.rule`` ("resample-from-p", "accept-without-draw")
show the same check catching a broken algorithm. They are variants of the rejection rule;
every ``Settings.verification`` is checked as it is. Nothing here imports gradio: the app
calls :func:`iter_check` or :func:`run_check`, and specviz.views.check_figure draws the
result.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from specviz.analysis.binning import MIN_EXPECTED, Comparison, compare_outcomes
from specviz.analysis.prompt_cache import PromptCache
from specviz.config import (
    RULES,
    Settings,
    Warp,
)
from specviz.drafters import entry as drafter_entry
from specviz.engine import Run
from specviz.lm import CachedLM, ModelCache
from specviz.pair import LoadedModel, ModelPair
from specviz.sampling import warp
from specviz.trace import Trace
from specviz.tree import root_children
from specviz.verify import verification_for
from specviz.verify.base import normalised, total_variation

MIN_N = 200
MAX_N = 100_000
MAX_LENGTH = 3
SIGNIFICANCE = 0.01

Outcome = tuple[int, ...]


# --- the target's probabilities ------------------------------------------------------------


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
    comparisons: list[Comparison]
    spec_acceptance: float  # accepted / verified drafts over all speculative samples
    predicted_tv: float | None  # TV(first-token distribution under this rule, p); model drafter
    elapsed_s: float
    spec_samples: list[list[int]] = field(repr=False, default_factory=list)
    ar_samples: list[list[int]] = field(repr=False, default_factory=list)
    # What the samples cost the models (Sampler.work): forwards, positions fed, rows reused
    work: dict[str, int] = field(default_factory=dict)

    @property
    def verifier(self) -> str:
        """What verified the drafts: "the rejection rule" (or a broken rule), "exact match", or a
        lossy verification by its label ("typical (lossy)")."""
        return verification_for(self.settings).called

    @property
    def threshold(self) -> float:
        """Per-comparison significance level (Bonferroni over the comparisons)."""
        return self.significance / max(1, len(self.comparisons))

    @property
    def passed(self) -> bool:
        """True when no comparison rejects 'speculative samples follow p'."""
        return all(comp.spec_test.p_value >= self.threshold for comp in self.comparisons)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"], d["threshold"] = self.passed, self.threshold
        return json_safe(d)

    def summary(self) -> str:
        """A few lines: the verdict and each comparison's numbers."""
        verdict = "PASS" if self.passed else "FAIL"
        lines = [
            f"{verdict}: {self.verifier}, N = {self.n} speculative and {self.n} "
            f"autoregressive samples of {self.length} token(s); a comparison fails below "
            f"p-value {self.threshold:.3g}"
        ]
        for comp in self.comparisons:
            lines.append(
                f"  {comp.name}: TV(spec, p) = {comp.tv_spec:.3f}, TV(AR, p) = {comp.tv_ar:.3f}; "
                f"chi-square p-value spec {comp.spec_test.p_text}, AR {comp.ar_test.p_text}, "
                f"spec vs AR {comp.two_sample.p_text} ({len(comp.labels)} bins)"
            )
        lines.append(f"  speculative acceptance rate: {self.spec_acceptance:.3f}")
        if self.predicted_tv is not None:
            measured = (
                f"; measured TV(spec, p) = {self.comparisons[0].tv_spec:.3f}"
                if self.comparisons
                else ""
            )
            lines.append(
                f"  {self.verifier} moves the first token's distribution by TV = "
                f"{self.predicted_tv:.3f} (computed from p and the draft's q){measured}"
            )
        return "\n".join(lines)


def json_safe(x: Any) -> Any:
    """JSON-safe copy: infinities become None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(value) for k, value in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(value) for value in x]
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


def run_budget(pair: ModelPair, prompt_ids: list[int], settings: Settings, length: int) -> int:
    """max_new_tokens of the check's runs: ``length`` tokens, and room beyond them for the
    largest draft a round may make (Limits.max_gamma), within the deployment's limit and
    the model's context (past those, a round drafts what fits: still exact, less deep)."""
    lim = settings.limits
    room = min(length + lim.max_gamma, lim.max_new_tokens, pair.context_len - len(prompt_ids))
    return max(length, room)


class _SharedRun(Run):
    """A Run whose models' caches are the check's PromptCaches, opened by the first run."""

    def __init__(
        self,
        pair: ModelPair,
        prompt: str,
        settings: Settings,
        raw: bool,
        shared: dict[str, PromptCache],
        reuse_rows: bool,
    ) -> None:
        super().__init__(pair, prompt, settings, raw=raw)
        self._shared, self._reuse_rows = shared, reuse_rows

    def open_lm(self, m: LoadedModel, widths: tuple[int, ...]) -> ModelCache:
        role = "target" if m is self.pair.target else "draft"
        s = self.settings
        if role == "target" and s.method != "ar" and drafter_entry(s.drafter).reads_hidden:
            # a drafter that reads the target's features needs them at every position its
            # calls read, which stored rows do not carry: this run's own cache
            return super().open_lm(m, widths)
        cache = self._shared.get(role)
        if cache is None:  # the first run opens it as the engine would, for its widths
            cache = PromptCache(super().open_lm(m, widths), self.prompt_ids, self._reuse_rows)
            self._shared[role] = cache
        if cache.prompt != self.prompt_ids:
            raise RuntimeError("a check's runs must share one prompt")
        return cache


class Sampler:
    """The check's samples for one prompt and settings: engine runs on shared caches.

    settings.max_new_tokens is replaced by `budget` (default :func:`run_budget`); each run
    is stopped after the round that brings its output to ``length`` tokens (see the module
    docstring). reuse_rows: whether rows computed after the same tokens are reused beyond
    the prompt-end ones (specviz.analysis.prompt_cache)."""

    def __init__(
        self,
        pair: ModelPair,
        prompt: str,
        settings: Settings,
        length: int,
        raw: bool = False,
        budget: int | None = None,
        reuse_rows: bool = True,
    ) -> None:
        probe = Run(pair, prompt, settings.with_(max_new_tokens=length), raw=raw)  # validates
        settings = probe.settings.with_(max_new_tokens=settings.max_new_tokens)  # "auto" resolved
        if budget is None:
            budget = run_budget(pair, probe.prompt_ids, settings, length)
        self.pair, self.prompt, self.length, self.raw = pair, prompt, length, raw
        self.settings = settings.with_(max_new_tokens=budget)
        self.prompt_ids = probe.prompt_ids
        self.reuse_rows = reuse_rows
        self.caches: dict[str, PromptCache] = {}

    def run(self, method: str, seed: int) -> Trace:
        """One run of `method` ("spec" or "ar") with this seed, stopped at ``length`` tokens."""
        run = _SharedRun(
            self.pair,
            self.prompt,
            self.settings.with_(method=method, seed=seed),
            self.raw,
            self.caches,
            self.reuse_rows,
        )
        updates = iter(run)
        try:
            for update in updates:
                if update.n_tokens >= self.length:
                    break
        finally:
            updates.close()  # the run's finish: both caches back to the prompt
        return run.trace

    def draw(self, i: int) -> tuple[Outcome, Outcome, tuple[int, int]]:
        """Sample i of each method: (speculative outcome, autoregressive outcome,
        (accepted, verified) drafts of the speculative run)."""
        seed = self.settings.seed + 2 * i
        spec = self.run("spec", seed)
        ar = self.run("ar", seed + 1)
        assert spec.stats is not None
        drafts = (spec.stats.accepted, spec.stats.verified)
        return tuple(spec.token_ids[: self.length]), tuple(ar.token_ids[: self.length]), drafts

    def prompt_q(self) -> torch.Tensor | None:
        """The draft's logits after the prompt, [V], as the runs used them (None before a
        run opened the draft's cache, or with no draft model)."""
        draft = self.caches.get("draft")
        return None if draft is None else draft.prompt_row()

    def work(self) -> dict[str, int]:
        """What the models did so far: forwards and positions fed (the prompt's prefill
        included) and rows handed out again, per model."""
        out: dict[str, int] = {}
        for role, cache in sorted(self.caches.items()):
            out |= {
                f"{role}_calls": cache.calls,
                f"{role}_fed": cache.fed,
                f"{role}_reused": cache.served,
            }
        return out

    def close(self) -> None:
        """Release both models' caches (once the samples are drawn)."""
        for cache in self.caches.values():
            cache.release()
        self.caches.clear()


def draw_samples(
    pair: ModelPair, prompt: str, settings: Settings, i: int, length: int, raw: bool = False
) -> tuple[Outcome, Outcome, tuple[int, int]]:
    """Sample i of each method on its own (as the check draws it: :meth:`Sampler.draw`)."""
    sampler = Sampler(pair, prompt, settings, length, raw)
    try:
        return sampler.draw(i)
    finally:
        sampler.close()


def iter_check(
    pair: ModelPair,
    prompt: str,
    settings: Settings,
    n: int = 400,
    length: int = 2,
    rule: str | None = None,
    raw: bool = False,
    significance: float = SIGNIFICANCE,
    reuse_rows: bool = True,
) -> Iterator[Progress | CheckResult]:
    """Run the check, yielding Progress after each pair of samples and the result last
    (reuse_rows: see :class:`Sampler`)."""
    rule = settings.rule if rule is None else rule
    validate(n, length, rule)
    t0 = time.perf_counter()
    s = settings.with_(rule=rule, trace_level="minimal")
    sampler = Sampler(pair, prompt, s, length, raw, reuse_rows=reuse_rows)
    base, prompt_ids = sampler.settings, sampler.prompt_ids
    spec_s: list[Outcome] = []
    ar_s: list[Outcome] = []
    accepted = verified = 0
    try:
        yield Progress(0, 2 * n, "sampling")
        for i in range(n):
            spec, ar, (a, n_verified) = sampler.draw(i)
            spec_s.append(spec)
            ar_s.append(ar)
            accepted, verified = accepted + a, verified + n_verified
            yield Progress(2 * (i + 1), 2 * n, "sampling")
        q_logits, work = sampler.prompt_q(), sampler.work()
    finally:
        sampler.close()
    yield Progress(2 * n, 2 * n, "target probabilities")
    probs = TargetProbs(pair, prompt_ids, base.target_warp())
    yield CheckResult(
        prompt=prompt,
        settings=base.to_dict(),
        rule=rule,
        n=n,
        length=length,
        significance=significance,
        comparisons=compare(pair, probs, spec_s, ar_s, length),
        spec_acceptance=accepted / verified if verified else 0.0,
        predicted_tv=_predicted_tv(pair, prompt_ids, base, probs, rule, q_logits),
        elapsed_s=time.perf_counter() - t0,
        spec_samples=[list(s) for s in spec_s],
        ar_samples=[list(s) for s in ar_s],
        work=work,
    )


def compare(
    pair: ModelPair,
    probs: TargetProbs,
    spec: Sequence[Outcome],
    ar: Sequence[Outcome],
    length: int,
) -> list[Comparison]:
    """The comparisons: the first token, and the whole continuation when length > 1."""

    def label(o: Outcome) -> str:
        return "".join(pair.token_text(t) for t in o)

    n = max(len(spec), len(ar))
    p0 = probs.row(())
    first = {(int(i),): float(p0[i]) for i in p0.nonzero().flatten().tolist()}
    comparisons = [
        compare_outcomes("first token", first, [s[:1] for s in spec], [s[:1] for s in ar], label)
    ]
    if length > 1:
        cont, rest = continuations(probs, length, pair.eos_ids, MIN_EXPECTED / n)
        comparisons.append(
            compare_outcomes(f"continuation of {length} tokens", cont, spec, ar, label, rest)
        )
    return comparisons


@torch.inference_mode()
def _predicted_tv(
    pair: ModelPair,
    prompt_ids: list[int],
    s: Settings,
    probs: TargetProbs,
    rule: str,
    q_logits: torch.Tensor | None = None,
) -> float | None:
    """TV between p and the first token's distribution under the rule or exact match
    (model drafter); q_logits: the draft's logits after the prompt, if the runs have them."""
    if s.drafter != "model" or pair.draft is None:
        return None
    if s.is_greedy:
        return 0.0
    if s.drafts_tree:  # b children at the root, tried one after another
        p, q = first_token_rows(pair, prompt_ids, s, probs, q_logits)
        b = s.tree[0] if s.tree is not None else root_children(s.tree_budget, first_depth(s))
        first = verification_for(s.with_(rule=rule)).out_siblings(p, q, b)
        return float(total_variation(first, normalised(p)))
    p, out = first_token_out(pair, prompt_ids, s.with_(rule=rule), probs, q_logits)
    return float(total_variation(out, normalised(p)))


@torch.inference_mode()
def first_token_out(
    pair: ModelPair,
    prompt_ids: list[int],
    s: Settings,
    probs: TargetProbs,
    q_logits: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """p and the computed distribution [V] (float64) of a round's first token when one draft
    x ~ q is drafted, under the verification (and rule) of s (model drafter): the rule
    object's out(p, q) (specviz.verify)."""
    p, q = first_token_rows(pair, prompt_ids, s, probs, q_logits)
    return p, verification_for(s).out(p, q)


@torch.inference_mode()
def first_token_rows(
    pair: ModelPair,
    prompt_ids: list[int],
    s: Settings,
    probs: TargetProbs,
    q_logits: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """p and q [V] at the prompt's end, as a round's first draft and verify see them;
    q_logits: the draft's logits after the prompt, if the runs have them."""
    assert pair.draft is not None
    # Both over the tokenizer's V ids, as in the engine (specviz.lm cuts padded columns).
    if q_logits is None:
        q_logits = CachedLM(pair.draft.model, pair.vocab_size).logits(prompt_ids)[-1]
    q = warp(q_logits, s.draft_warp()).cpu()  # [V]
    return probs.row(()), q  # [V], [V]


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
    """Run the whole check: iter_check's arguments (n, length, rule, raw, significance,
    reuse_rows), and progress_cb (if given) receives every Progress."""
    result = None
    for item in iter_check(pair, prompt, settings, *args, **kwargs):
        if isinstance(item, Progress):
            if progress_cb is not None:
                progress_cb(item)
        else:
            result = item
    assert result is not None
    return result
