"""Where a round's time goes, and the speedup predicted from it.

Leviathan's formula prices a round at gamma draft steps plus one target step. On real
hardware the verify call reads gamma + 1 positions and costs more than one step, and the
engine spends time outside the models (warping rows, the rule, draws, cache crops). This
module measures each part on the current machine:

- the target's one-token step, and its verify call at each width gamma + 1;
- the draft's one-token step (c = draft step / target step), and its two-token call, which
  opens a round after a full accept (the last draft and the bonus; c2);
- the engine's time per round outside model calls, at each gamma, and the baseline's time
  per token outside its model call;

and predicts the speedup from them (specviz.metrics.refined_speedup):

    E(alpha, gamma) * (1 + o_ar) / (gamma * c + alpha^gamma (c2 - c) + v(gamma + 1) + o(gamma))

in units of one target step. Model calls are timed by the caches themselves (``busy_s`` of
specviz.lm.CachedLM and specviz.compiled.StaticLM); a call of width w is repeated on the same
cached context, the cache cropped back each time, so that only the call itself is timed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from specviz import metrics
from specviz.config import DEFAULT_PROMPT, Settings

if TYPE_CHECKING:
    from specviz.pair import ModelPair

# The gammas `costs` measures by default, and the range the refined prediction is judged on.
DEFAULT_GAMMAS = (1, 2, 4, 8)


class Timer:
    """Median ms of one model call on a cached context, for several widths at once.

    lm is a CachedLM or StaticLM (anything with ``logits``, ``rollback`` and ``busy_s``)."""

    def __init__(self, lm: Any, context: Sequence[int]) -> None:
        self.lm, self.context = lm, list(context)
        self.lm.logits(self.context)  # the prefill, not timed

    def once(self, width: int) -> float:
        """One call feeding `width` tokens after the context, in ms."""
        fill = (self.context * (width // max(1, len(self.context)) + 1))[:width]
        self.lm.rollback(self.context)
        before = self.lm.busy_s
        self.lm.logits(self.context + fill, keep=width)
        return (self.lm.busy_s - before) * 1e3

    def medians(self, widths: Iterable[int], reps: int, warmup: int = 2) -> dict[int, float]:
        """Median ms per width; repetitions interleave the widths so drift hits all alike."""
        ws = sorted(set(widths))
        for w in ws:
            for _ in range(warmup):
                self.once(w)
        times: dict[int, list[float]] = {w: [] for w in ws}
        for rep in range(reps):
            for w in ws if rep % 2 == 0 else ws[::-1]:
                times[w].append(self.once(w))
        self.lm.rollback(self.context)
        return {w: statistics.median(t) for w, t in times.items()}


@dataclass(frozen=True)
class VerifyCost:
    """The target's call at one width: ms, and ms / target_step_ms (steps)."""

    width: int
    ms: float
    steps: float


@dataclass
class StepCosts:
    """Measured costs of one pair on this machine, in ms (see the module docstring)."""

    device: str
    threads: int
    draft_variant: str | None
    target_step_ms: float
    draft_step_ms: float
    verify: list[VerifyCost]
    draft_step2_ms: float | None  # the draft's two-token call (None: not measured)
    overhead_ms_per_round: float  # at the reference gamma
    overhead_ms_by_gamma: dict[int, float] = field(default_factory=dict)
    ar_overhead_ms_per_token: float = 0.0
    alpha: float | None = None  # measured in the overhead runs (None: not measured)

    @property
    def c(self) -> float:
        return self.draft_step_ms / self.target_step_ms

    @property
    def c2(self) -> float | None:
        return None if self.draft_step2_ms is None else self.draft_step2_ms / self.target_step_ms

    def verify_steps(self, width: int) -> float:
        """v at a width, in target steps: measured, or linear between (and beyond) the
        measured widths; width 1 is one step by definition."""
        pts = sorted({1: 1.0, **{v.width: v.steps for v in self.verify}}.items())
        return _linear(pts, width)

    def overhead_steps(self, gamma: int) -> float:
        """o at a gamma, in target steps: a straight line through the measured gammas."""
        by = self.overhead_ms_by_gamma or {0: self.overhead_ms_per_round}
        return max(0.0, _fit_line(sorted(by.items()), gamma)) / self.target_step_ms

    def predicted(self, alpha: float, gamma: int) -> float:
        """The refined prediction (specviz.metrics.refined_speedup) at alpha and gamma."""
        o_ar = self.ar_overhead_ms_per_token / self.target_step_ms
        v, o = self.verify_steps(gamma + 1), self.overhead_steps(gamma)
        return metrics.refined_speedup(alpha, gamma, self.c, v, o, o_ar, self.c2)

    def best(self, alpha: float, gammas: Iterable[int] = metrics.GAMMAS) -> tuple[int, float]:
        """(gamma, predicted speedup) at the gamma with the largest prediction."""
        g = max(gammas, key=lambda g: self.predicted(alpha, g))
        return g, self.predicted(alpha, g)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["c"] = self.c
        d["c2"] = self.c2
        d["overhead_ms_by_gamma"] = {str(g): ms for g, ms in self.overhead_ms_by_gamma.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepCosts:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known.setdefault("draft_step2_ms", None)
        known["verify"] = [VerifyCost(**v) for v in d.get("verify", [])]
        known["overhead_ms_by_gamma"] = {
            int(g): float(ms) for g, ms in d.get("overhead_ms_by_gamma", {}).items()
        }
        return cls(**known)


def _linear(pts: list[tuple[int, float]], x: float) -> float:
    """Piecewise-linear through pts (sorted by x), extended by the end segments."""
    if len(pts) == 1:
        return pts[0][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x <= x1 or (x1, y1) == pts[-1]:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return pts[-1][1]  # unreachable: the loop returns on its last segment


def _fit_line(pts: list[tuple[int, float]], x: float) -> float:
    """Least-squares line through pts, evaluated at x (a constant for one point)."""
    if len(pts) == 1:
        return pts[0][1]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((a - mx) ** 2 for a in xs)
    slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my + slope * (x - mx)


def guard_sentence(
    alpha: float | None, c: float, verify_steps: dict[int, float] | None = None
) -> str | None:
    """One sentence when no gamma is predicted to beat plain decoding at the measured c and
    alpha; None otherwise. verify_steps (width -> target steps, measured at one width or
    more) price the verify call at every gamma, linearly between and beyond the measured
    widths; without them, Leviathan's formula (a verify call of one step) is the
    prediction, an upper bound, since a verify call costs at least one target step."""
    if alpha is None or c <= 0:
        return None
    if verify_steps:
        pts = sorted({1: 1.0, **verify_steps}.items())
        preds = {
            g: metrics.refined_speedup(alpha, g, c, max(1.0, _linear(pts, g + 1)))
            for g in metrics.GAMMAS
        }
        how = "the measured step and verify costs predict"
    else:
        preds = {g: metrics.expected_speedup(alpha, g, c) for g in metrics.GAMMAS}
        how = "Leviathan's formula predicts"
    g = max(preds, key=preds.__getitem__)
    if preds[g] >= 1.0:
        return None
    return (
        f"On this machine a draft step costs c = {c:.2f} target steps, and at alpha = "
        f"{alpha:.2f} {how} at best {preds[g]:.2f}x (gamma {g}): speculative decoding cannot "
        "beat plain decoding here because the draft is not cheap enough next to the target, "
        "not because the method fails."
    )


def measure_costs(
    pair: ModelPair,
    settings: Settings | None = None,
    gammas: Sequence[int] = DEFAULT_GAMMAS,
    prompt: str = DEFAULT_PROMPT,
    reps: int = 9,
    tokens: int | None = None,
    say: Callable[[str], None] | None = None,
) -> StepCosts:
    """Measure every part of a round on this machine (see the module docstring).

    tokens: the length of the runs that time the overhead (default: the settings'
    max_new_tokens). Steps and verify calls are timed on the prompt plus half that many
    positions: the mean context of such a run, since attention grows with it."""
    import torch

    from specviz.engine import Run, warm_up

    if pair.draft is None:
        raise ValueError(f"pair {pair.name!r} has no draft model: costs needs one")
    say = say or (lambda _m: None)
    s = settings or Settings()
    tokens = tokens or s.max_new_tokens
    s = s.with_(drafter="model", adaptive_gamma=False, max_new_tokens=tokens)
    gs = sorted(set(gammas))
    for g in gs:
        s.with_(gamma=g)  # Settings checks the range
    warm_up(pair, prompt, s.with_(gamma=gs[-1]))
    widths = [1] + [g + 1 for g in gs]
    base = Run(pair, prompt, s.with_(gamma=gs[-1]))
    ids = base.prompt_ids
    context = ids + (ids * (tokens // (2 * len(ids)) + 1))[: tokens // 2]
    target = Timer(base.open_lm(pair.target, tuple(widths)), context)
    draft = Timer(base.open_lm(pair.draft, (1, 2)), context)
    say("timing the target's calls and the draft's step")
    t_ms = target.medians(widths, reps)
    d_ms = draft.medians([1, 2], reps)
    target.lm.close()
    draft.lm.close()
    step = t_ms[1]
    free = pair.without_eos()
    by_gamma: dict[int, float] = {}
    overlaps: list[float] = []
    for g in gs:
        say(f"timing the engine outside model calls at gamma {g}")
        run = _run(free, prompt, s.with_(gamma=g))
        model_s = run.target_lm.busy_s + run.drafter.lm.busy_s
        by_gamma[g] = (run.trace.stats.wall_s - model_s) * 1e3 / max(1, len(run.trace.rounds))
        overlaps += [
            d.overlap for r in run.trace.rounds for d in r.verified if d.overlap is not None
        ]
    ar = _run(free, prompt, s.with_(method="ar"))
    ar_over = (ar.trace.stats.wall_s - ar.target_lm.busy_s) * 1e3 / max(1, len(ar.trace.token_ids))
    ref = s.gamma if s.gamma in by_gamma else gs[len(gs) // 2]
    return StepCosts(
        device=str(pair.device),
        threads=torch.get_num_threads(),
        draft_variant=getattr(pair.draft, "variant", None),
        target_step_ms=step,
        draft_step_ms=d_ms[1],
        draft_step2_ms=d_ms[2],
        verify=[VerifyCost(w, t_ms[w], t_ms[w] / step) for w in widths[1:]],
        overhead_ms_per_round=by_gamma[ref],
        overhead_ms_by_gamma=by_gamma,
        ar_overhead_ms_per_token=max(0.0, ar_over),
        alpha=statistics.fmean(overlaps) if overlaps else None,
    )


def _run(pair: ModelPair, prompt: str, settings: Settings) -> Any:
    from specviz.engine import Run

    run = Run(pair, prompt, settings)
    for _ in run:
        pass
    return run
