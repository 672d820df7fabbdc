"""Where a round's time goes, and the speedup predicted from it.

Leviathan's formula prices a round at gamma draft steps plus one target step. On real
hardware the verify call reads gamma + 1 positions and costs more than one step, and the
engine spends time outside the models (warping rows, the verification's decision, draws,
cache crops). This
module measures each part on the current machine:

- the target's one-token step, and its verify call at each width gamma + 1;
- the draft's one-token step (c = draft step / target step), and its two-token call, which
  opens a round after a full accept (the last draft and the bonus; c2);
- the engine's time per round outside model calls, at each gamma, and the baseline's time
  per token outside its model call;

and predicts the speedup from them (specviz.metrics.refined_speedup):

    E(alpha, gamma) * (1 + o_ar) / (gamma * c + alpha^gamma (c2 - c) + v(gamma + 1) + o(gamma))

in units of one target step. The roofline puts each measured call beside its floor: the
bytes the call must read (the weights in the dtype they are stored in, and the KV cache),
over the memory's bandwidth, measured once per process (:func:`bandwidth`). A decode step at
batch 1 is memory-bound at best, so measured / floor says how far the call is from the
machine's limit. Where no gamma is predicted to beat plain decoding,
:func:`holdback` decides which term keeps the prediction below 1 (the one whose ideal
value, c = 0, alpha = 1 or a verify call of one step, alone lifts it most) and
:func:`guard_sentence` says so. Model calls are timed by the caches themselves (``busy_s`` of
specviz.lm.CachedLM and specviz.backend.StaticLM); a call of width w is repeated on the same
cached context, the cache cropped back each time, so that only the call itself is timed.
"""

from __future__ import annotations

import functools
import statistics
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from specviz import metrics
from specviz.clock import clock
from specviz.config import DEFAULT_GAMMAS, DEFAULT_PROMPT, Settings
from specviz.threads import policy

if TYPE_CHECKING:
    from specviz.pair import ModelPair
    from specviz.trace import Trace

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


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
        return interleaved_medians({"": (self, widths)}, reps, warmup)[""]


def interleaved_order(items: Sequence[T], rep: int, reps: int) -> list[T]:
    """Repetition rep (of reps) of an interleaved measurement: every item once, the line-up
    rotated by rep * n // reps (starts spread over it) and reversed when rep is odd:
    interleaved_calls' order."""
    k = rep * len(items) // reps
    order = [*items[k:], *items[:k]]
    return order[::-1] if rep % 2 else order


def interleaved_medians(
    plan: dict[str, tuple[Timer, Iterable[int]]], reps: int, warmup: int = 2
) -> dict[str, dict[int, float]]:
    """Median ms of each timer's calls at each of its widths, all timed together
    (interleaved_times)."""
    times = interleaved_times(plan, reps, warmup)
    return {name: {w: statistics.median(t) for w, t in ws.items()} for name, ws in times.items()}


def interleaved_calls(
    calls: Mapping[K, Callable[[], float]], reps: int, warmup: int = 2
) -> dict[K, list[float]]:
    """The one timing loop: every call's ms (each call times itself and returns its ms),
    reps times, after warmup untimed rounds, in an order rotated as the repetitions go on
    and reversed in every other one (interleaved_order), so that a spell of other work on
    the machine falls on every call alike: timed one after another, the call measured
    during the spell would take all of it, and a ratio of two calls with it. The costs
    here, the GPU check (specviz.gpucheck.measure), the draft choice and the bench's
    contenders (specviz.bench.running) time through it."""
    keys = list(calls)
    for _ in range(warmup):
        for k in keys:
            calls[k]()
    times: dict[K, list[float]] = {k: [] for k in keys}
    for rep in range(reps):
        for k in interleaved_order(keys, rep, reps):
            times[k].append(calls[k]())
    return times


def interleaved_times(
    plan: dict[str, tuple[Timer, Iterable[int]]], reps: int, warmup: int = 2
) -> dict[str, dict[int, list[float]]]:
    """Every ms of each timer's calls at each of its widths, all timed together
    (interleaved_calls)."""
    calls = {
        (name, w): functools.partial(plan[name][0].once, w)
        for name, (_, ws) in plan.items()
        for w in sorted(set(ws))
    }
    times = interleaved_calls(calls, reps, warmup)
    out: dict[str, dict[int, list[float]]] = {name: {} for name in plan}
    for (name, w), t in times.items():
        out[name][w] = t
    for timer, _ in plan.values():
        timer.lm.rollback(timer.context)
    return out


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
    roofline: Roofline | None = None  # each call against its memory-bound floor
    # the path each model's timed calls ran, by role: "eager", "compiled (backend)", or
    # "eager, although <backend> was asked for: <why>" (ModelPair.ran_eager)
    paths: dict[str, str] = field(default_factory=dict)
    # the CPU, the threads held and the rest of the machine's CPU use meanwhile
    # (specviz.threads.Load.to_dict); {} where not measured
    machine: dict[str, Any] = field(default_factory=dict)

    @property
    def c(self) -> float:
        return self.draft_step_ms / self.target_step_ms

    @property
    def c2(self) -> float | None:
        return None if self.draft_step2_ms is None else self.draft_step2_ms / self.target_step_ms

    def verify_steps(self, width: int) -> float:
        """v at a width, in target steps: measured, or linear between (and beyond) the
        measured widths; width 1 is one step by definition."""
        pts = sorted({1: 1.0, **{call.width: call.steps for call in self.verify}}.items())
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
        d["roofline"] = None if self.roofline is None else self.roofline.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepCosts:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known.setdefault("draft_step2_ms", None)
        known["verify"] = [VerifyCost(**call) for call in d.get("verify", [])]
        known["overhead_ms_by_gamma"] = {
            int(g): float(ms) for g, ms in d.get("overhead_ms_by_gamma", {}).items()
        }
        roof = d.get("roofline")
        known["roofline"] = None if roof is None else Roofline.from_dict(roof)
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


def printed_below_one(speedup: float) -> bool:
    """Whether a speedup printed with two decimals ("0.99x") reads below 1: 0.996 prints as
    1.00x, which is not below 1, so nothing is said of what holds it below 1."""
    return float(f"{speedup:.2f}") < 1.0


# The three terms of a round's cost, each with the value that takes it out of the way.
TERMS = ("c", "alpha", "verify")
IDEAL = {
    "c": "a free draft step (c = 0)",
    "alpha": "every draft accepted ({name} = 1)",
    "verify": "a verify call as cheap as one target step",
}
CAUSE = {"c": "the draft's cost", "alpha": "the acceptance", "verify": "the verify call's cost"}


@dataclass(frozen=True)
class Holdback:
    """Which term keeps the predicted speedup below 1, decided by computation.

    prediction is the best prediction over the gammas at the measured alpha, c and verify
    cost; lifted[t] is the same best prediction with term t alone at its ideal value
    (c -> 0; alpha -> 1; the verify call -> one target step at every width) and the other
    two as measured. The term is the one whose ideal alone lifts the prediction most (ties
    in the order of TERMS); lifts_above_one says whether that lift reaches a speedup that
    prints as 1.00x or more. A term already at its ideal lifts nothing (its lifted value is
    the prediction itself); the verify term is a candidate only when verify costs were
    measured."""

    prediction: float
    gamma: int
    term: str
    lifted: dict[str, float]

    @property
    def lifts_above_one(self) -> bool:
        return not printed_below_one(self.lifted[self.term])

    def because(self, name: str = "alpha") -> str:
        """The cause, in words, with the lift that shows it; name is what the acceptance is
        called ("alpha", or "sum p q" under exact match)."""
        t = self.term
        words = {"alpha": name, "verify": "verify cost", "c": "c"}
        rest = " and ".join(words[k] for k in TERMS if k in self.lifted and k != t)
        ideal = {k: value.format(name=name) for k, value in IDEAL.items()}
        if self.lifts_above_one:
            return (
                f"what holds it below 1 is {CAUSE[t]}: with {ideal[t]} the same {rest} "
                f"would predict {self.lifted[t]:.2f}x"
            )
        each = "; ".join(f"{ideal[k]}: {self.lifted[k]:.2f}x" for k in TERMS if k in self.lifted)
        return f"no single term lifts it to 1.00x alone ({each})"


def _prediction(
    alpha: float, c: float, verify: Callable[[int], float] | None, gammas: Iterable[int]
) -> tuple[int, float]:
    """(gamma, best prediction): the refined formula with the verify call priced by verify
    (width -> target steps), or Leviathan's (a verify call of one step) without it."""
    preds = {
        g: metrics.refined_speedup(alpha, g, c, verify(g + 1))
        if verify is not None
        else metrics.expected_speedup(alpha, g, c)
        for g in gammas
    }
    g = max(preds, key=preds.__getitem__)
    return g, preds[g]


def _verify_price(verify_steps: dict[int, float] | None) -> Callable[[int], float] | None:
    """The verify call's cost at a width, in target steps (at least one step), linear
    between and beyond the measured widths; None when nothing was measured."""
    if not verify_steps:
        return None
    pts = sorted({1: 1.0, **verify_steps}.items())
    return lambda width: max(1.0, _linear(pts, width))


def best_prediction(
    alpha: float,
    c: float,
    verify_steps: dict[int, float] | None = None,
    gammas: Iterable[int] = metrics.GAMMAS,
) -> tuple[int, float]:
    """(gamma, prediction) at the gamma with the largest prediction: the refined formula
    with the verify call priced from verify_steps, or Leviathan's without them."""
    return _prediction(alpha, c, _verify_price(verify_steps), list(gammas))


def holdback(
    alpha: float | None,
    c: float,
    verify_steps: dict[int, float] | None = None,
    gammas: Iterable[int] = metrics.GAMMAS,
) -> Holdback | None:
    """What keeps the best prediction over gammas below 1 (see Holdback); None when alpha
    or c was not measured or when the prediction does not print below 1.00x."""
    if alpha is None or c <= 0:
        return None
    gs = list(gammas)
    verify = _verify_price(verify_steps)
    g, pred = _prediction(alpha, c, verify, gs)
    if not printed_below_one(pred):
        return None
    lifted = {"c": _prediction(alpha, 0.0, verify, gs)[1]}
    lifted["alpha"] = _prediction(1.0, c, verify, gs)[1]
    if verify is not None:
        lifted["verify"] = _prediction(alpha, c, None, gs)[1]
    term = max(TERMS, key=lambda t: (lifted.get(t, -1.0), -TERMS.index(t)))
    return Holdback(pred, g, term, lifted)


def guard_sentence(
    alpha: float | None,
    c: float,
    verify_steps: dict[int, float] | None = None,
    name: str = "alpha",
) -> str | None:
    """One sentence when no gamma is predicted to beat plain decoding at the measured c and
    alpha (the best prediction prints below 1.00x); None otherwise. verify_steps (width ->
    target steps, measured at one width or more) price the verify call at every gamma,
    linearly between and beyond the measured widths; without them, Leviathan's formula (a
    verify call of one step) is the prediction, an upper bound, since a verify call costs at
    least one target step. The sentence names what holds the prediction below 1 as
    :func:`holdback` decides it. name is what the acceptance is called: "alpha", or "sum p
    q" when the runs verified by exact match (specviz.metrics.expected_acceptance)."""
    h = holdback(alpha, c, verify_steps)
    if h is None or alpha is None:
        return None
    how = "Leviathan's formula predicts"
    if verify_steps:
        how = "the measured step and verify costs predict"
    return (
        f"On this machine a draft step costs c = {c:.2f} target steps, and at {name} = "
        f"{alpha:.2f} {how} at best {h.prediction:.2f}x (gamma {h.gamma}): speculative "
        f"decoding cannot beat plain decoding here; {h.because(name)}."
    )


@dataclass(frozen=True)
class SpeedStory:
    """What a compared run says about speed, machine-independent figures first: tokens per
    target call and the target calls saved (counts: the same on any machine), then the
    measured speedup with its spread (metrics.paired_speedup) and the prediction from the
    run's own measured c and verify cost at its gamma. Every view that states one of these
    reads it from here."""

    tokens: int  # the speculative run's tokens
    calls: int  # its target calls (rounds)
    measured: metrics.Speedup | None  # None without a baseline
    c: float  # measured draft step / target step (0: not measured)
    verify: float | None  # the verify call at the run's width, in target steps
    accept_name: str  # "alpha", or "sum p q" under exact match
    accept: float | None
    gamma: int
    predicted: float | None  # at the run's gamma; None for trees, adaptive gamma, no c
    holdback: Holdback | None  # what holds the best gamma's prediction below 1, if it is

    @property
    def tokens_per_call(self) -> float:
        return self.tokens / self.calls if self.calls else 0.0

    @property
    def calls_saved(self) -> int:
        """Target calls the baseline makes for the same tokens (one per token) less these."""
        return self.tokens - self.calls

    def below_one(self) -> bool:
        """Whether the measured or the predicted speedup prints below 1.00x."""
        vals = (self.measured.value if self.measured else None, self.predicted)
        return any(v is not None and printed_below_one(v) for v in vals)

    def guard(self) -> str | None:
        """One sentence whenever the measured or the predicted speedup is below 1, saying
        which and, where the best gamma's prediction is below 1 too, what holds it there;
        None otherwise."""
        if not self.below_one():
            return None
        parts, a = [], self.accept
        if self.measured is not None:
            parts.append(f"measured {self.measured.text()}")
        if self.predicted is not None:
            parts.append(
                f"predicted {self.predicted:.2f}x from c = {self.c:.2f}"
                + (f", a verify call of {self.verify:.2f} target steps" if self.verify else "")
                + ("" if a is None else f" and {self.accept_name} = {a:.2f}")
            )
        said = "Speculative decoding is slower than plain decoding here: " + " and ".join(parts)
        if self.holdback is not None:
            h = self.holdback
            return (
                f"{said}. No gamma is predicted to beat plain decoding on this machine (at best "
                f"{h.prediction:.2f}x, gamma {h.gamma}); {h.because(self.accept_name)}."
            )
        if self.predicted is not None and not printed_below_one(self.predicted):
            return f"{said}: the prediction is above 1, so the time went outside what it counts."
        return f"{said}."


def speed_story(spec: Trace, ar: Trace | None) -> SpeedStory:
    """The speed story of a speculative run and (when compared) its baseline."""
    s = spec.settings
    measured = c = verify = predicted = hb = None
    name, accept = metrics.expected_acceptance(spec)
    if ar is not None and len(ar.token_ids) >= 2 and spec.rounds:
        measured = metrics.paired_speedup(ar, spec)
        c = metrics.cost_ratio(spec, ar)
        steps = metrics.verify_steps(spec, ar)
        verify = steps.get(s.gamma + 1) if steps else None
        chain = not s.drafts_tree and not s.adaptive_gamma
        if accept is not None and c and chain:
            price = _verify_price(steps)
            predicted = _prediction(accept, c, price, [s.gamma])[1]
            hb = holdback(accept, c, steps)
    return SpeedStory(
        tokens=len(spec.token_ids),
        calls=len(spec.rounds),
        measured=measured,
        c=c or 0.0,
        verify=verify,
        accept_name=name,
        accept=accept,
        gamma=s.gamma,
        predicted=predicted,
        holdback=hb,
    )


def compiled_gammas(
    pair: ModelPair,
    prompt: str,
    gammas: Sequence[int] = DEFAULT_GAMMAS,
    tokens: int | None = None,
    settings: Settings | None = None,
) -> list[int]:
    """Of gammas, those whose target calls (one position and gamma + 1) the pair's compiled
    path has ready here, as measure_costs would open them: all of them off the aoti path.
    A target asked for a width it has no package for runs eager at every width, so costs
    timed over such a gamma would describe the eager path."""
    from specviz.engine import Run

    s = settings or Settings()
    tokens = tokens or s.max_new_tokens
    s = s.with_(drafter="model", adaptive_gamma=False, max_new_tokens=tokens, gamma=max(gammas))
    widths = (1, *(g + 1 for g in gammas))
    run = Run(pair, prompt, s)  # as measure_costs opens its caches (nothing runs)
    widths = pair.compiled_widths(pair.target, widths, run.cache_positions(widths))
    if 1 not in widths:
        return []
    return [g for g in gammas if g + 1 in widths]


def measure_costs(
    pair: ModelPair,
    settings: Settings | None = None,
    gammas: Sequence[int] = DEFAULT_GAMMAS,
    prompt: str = DEFAULT_PROMPT,
    reps: int = 9,
    tokens: int | None = None,
    say: Callable[[str], None] | None = None,
    roofline: bool = False,
) -> StepCosts:
    """Measure every part of a round on this machine (see the module docstring), and with
    roofline each call against its memory-bound floor (weights and cache read / the
    bandwidth, measured once per process).

    tokens: the length of the runs that time the overhead (default: the settings'
    max_new_tokens). Steps and verify calls are timed on the prompt plus half that many
    positions: the mean context of such a run, since attention grows with it."""
    if pair.draft is None:
        raise ValueError(f"pair {pair.name!r} has no draft model: costs needs one")
    threads = policy()
    # at the count the app computes at on a quiet machine, held whatever the machine does,
    # so that every figure is of one count; what else ran meanwhile is measured beside them
    with threads.holding(), threads.watch() as load:
        sc = _measure(pair, settings, gammas, prompt, reps, tokens, say, roofline)
    sc.machine = load.to_dict()
    return sc


def _measure(
    pair: ModelPair,
    settings: Settings | None,
    gammas: Sequence[int],
    prompt: str,
    reps: int,
    tokens: int | None,
    say: Callable[[str], None] | None,
    roofline: bool,
) -> StepCosts:
    import torch

    from specviz.engine import Run, warm_up

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
    paths = {
        role: _path(pair, m, t.lm)
        for role, m, t in (("target", pair.target, target), ("draft", pair.draft, draft))
    }
    say("timing the target's calls and the draft's step")
    timed = interleaved_medians({"target": (target, widths), "draft": (draft, [1, 2])}, reps)
    t_ms, d_ms = timed["target"], timed["draft"]
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
    sc = StepCosts(
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
        paths=paths,
    )
    if roofline:
        say("measuring the memory bandwidth")
        t, d = pair.target.model, pair.draft.model
        sc.roofline = roofline_of(
            sc,
            bandwidth(pair.device.type),
            weight_bytes(t),
            weight_bytes(d),
            kv_bytes_per_position(t),
            kv_bytes_per_position(d),
            len(context),
        )
    return sc


def _path(pair: ModelPair, m: Any, lm: Any) -> str:
    """The path a model's timed calls ran (StepCosts.paths)."""
    backend = pair.compile_backend
    if backend is None:
        return "eager"
    why = pair.ran_eager(m, lm)
    return f"eager, although {backend} was asked for: {why}" if why else f"compiled ({backend})"


def _run(pair: ModelPair, prompt: str, settings: Settings) -> Any:
    from specviz.engine import Run

    run = Run(pair, prompt, settings)
    for _ in run:
        pass
    return run


# --- the roofline: how close a call comes to the memory's limit ------------------------

# The tensor the bandwidth is measured on: far larger than any CPU's last-level cache.
BANDWIDTH_MIB = {"cpu": 256, "cuda": 1024}
BANDWIDTH_REPS = 5
BANDWIDTH_HOW = (
    "median of {reps} sums (bytes read) and of {reps} copies (bytes read and written) of a "
    "{mib} MiB float32 tensor; the larger of the two rates"
)


@dataclass(frozen=True)
class Bandwidth:
    """The memory's streaming rate on one device, measured once (see measure_bandwidth)."""

    device: str
    gb_s: float  # 1e9 bytes per second
    sum_gb_s: float
    copy_gb_s: float
    how: str

    def floor_ms(self, nbytes: int) -> float:
        """The least time reading nbytes can take here: a memory-bound call's floor."""
        return nbytes / (self.gb_s * 1e9) * 1e3


def measure_bandwidth(
    device: str = "cpu", mib: int | None = None, reps: int = BANDWIDTH_REPS
) -> Bandwidth:
    """The device memory's streaming rate: the median of `reps` sums of a `mib` MiB float32
    tensor (each reads it once) and of `reps` copies into a second one (each reads it and
    writes as much), after one of each to warm up. A sum's rate is bounded by the reads, a
    copy's by reads and writes together; a decode step mostly reads, so the larger of the
    two is the bandwidth a step can hope for. Medians, so that a spell of other work on a
    shared machine moves the figure little."""
    import torch

    dev = torch.device(device)
    mib = mib or BANDWIDTH_MIB.get(dev.type, 256)
    n = mib * 2**20 // 4
    src = torch.ones(n, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)

    def timed(fn: Callable[[], Any]) -> float:
        t0 = clock(dev)
        fn()
        return clock(dev) - t0

    with torch.inference_mode():
        timed(src.sum)
        timed(lambda: dst.copy_(src))
        sums = [timed(src.sum) for _ in range(reps)]
        copies = [timed(lambda: dst.copy_(src)) for _ in range(reps)]
    nbytes = n * 4
    sum_rate = nbytes / statistics.median(sums) / 1e9
    copy_rate = 2 * nbytes / statistics.median(copies) / 1e9
    how = BANDWIDTH_HOW.format(reps=reps, mib=mib)
    return Bandwidth(str(dev), max(sum_rate, copy_rate), sum_rate, copy_rate, how)


_bandwidths: dict[str, Bandwidth] = {}
_bandwidth_lock = threading.Lock()


def bandwidth(device: str = "cpu") -> Bandwidth:
    """This process's measurement of the device's bandwidth: measured on the first call
    (about a second), never at import, then kept."""
    key = "cuda" if str(device).startswith("cuda") else str(device)
    with _bandwidth_lock:
        if key not in _bandwidths:
            _bandwidths[key] = measure_bandwidth(key)
        return _bandwidths[key]


def known_bandwidth(device: str = "cpu") -> Bandwidth | None:
    """The bandwidth if this process has measured it (or been told it), else None."""
    key = "cuda" if str(device).startswith("cuda") else str(device)
    return _bandwidths.get(key)


def set_bandwidth(bw: Bandwidth) -> None:
    """Keep a bandwidth measured elsewhere (a ZeroGPU call measures the GPU's)."""
    key = "cuda" if bw.device.startswith("cuda") else bw.device
    with _bandwidth_lock:
        _bandwidths[key] = bw


def weight_bytes(model: Any) -> int:
    """The bytes of weights one decode step reads: every parameter and buffer once, in the
    dtype it is stored in (int8 and int4 weights count as such, a packed dynamic-int8 layer
    by its packed weight), except the input embedding table, of which a step reads one row
    per token (unless the table is also the LM head's weight, which a step reads whole), and
    the buffers a module names in ``unread_buffers`` (copies kept for a recompute of a few
    rows, which a step does not read whole)."""
    import torch

    seen: set[int] = set()
    total = 0

    def count(t: Any) -> int:
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            return 0
        if t.is_quantized:
            key, size = id(t), t.numel() * t.element_size()
        else:
            key, size = t.untyped_storage().data_ptr(), t.numel() * t.element_size()
        if key in seen:
            return 0
        seen.add(key)
        return size

    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    skip: set[int] = set()
    if embed is not None:
        w = embed.weight
        head_w = getattr(head, "weight", None)
        tied = isinstance(head_w, torch.Tensor) and (
            head_w.untyped_storage().data_ptr() == w.untyped_storage().data_ptr()
        )
        if not tied:
            skip.add(w.untyped_storage().data_ptr())
            total += w.shape[-1] * w.element_size()  # one row
    seen |= skip
    for module in model.modules():
        unread = set(getattr(module, "unread_buffers", ()))  # kept aside, not read by a step
        buffers = [b for n, b in module.named_buffers(recurse=False) if n not in unread]
        for t in (*module.parameters(recurse=False), *buffers):
            total += count(t)
        packed = getattr(module, "_packed_params", None)
        if packed is not None and hasattr(module, "weight") and callable(module.weight):
            total += count(module.weight())  # a dynamic int8 Linear's packed weight
            bias = module.bias() if callable(getattr(module, "bias", None)) else None
            total += count(bias)
    return total


def kv_bytes_per_position(model: Any) -> int:
    """The bytes of keys and values one cached position holds (a step reads them all)."""
    cfg = getattr(model, "config", None)
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    try:
        layers = int(cfg.num_hidden_layers)
        heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
        dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    except (AttributeError, TypeError, ValueError):
        return 0
    p = next(iter(model.parameters()), None)
    size = p.element_size() if p is not None and p.is_floating_point() else 4
    return 2 * layers * heads * dim * size


def step_bytes(model: Any, context: int = 0) -> int:
    """The bytes one decode step reads: the weights and the KV cache at `context`."""
    return weight_bytes(model) + kv_bytes_per_position(model) * context


@dataclass(frozen=True)
class RoofCall:
    """One measured call against its memory-bound floor."""

    call: str
    ms: float
    nbytes: int
    floor_ms: float

    @property
    def ratio(self) -> float:
        return self.ms / self.floor_ms if self.floor_ms > 0 else float("inf")


@dataclass(frozen=True)
class Roofline:
    """The bandwidth, each model's bytes per step and each call's distance from its floor."""

    bandwidth: Bandwidth
    target_bytes: int
    draft_bytes: int | None
    calls: list[RoofCall]

    def floor_ms(self, nbytes: int) -> float:
        return self.bandwidth.floor_ms(nbytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bandwidth_device": self.bandwidth.device,
            "bandwidth_gb_s": self.bandwidth.gb_s,
            "bandwidth_sum_gb_s": self.bandwidth.sum_gb_s,
            "bandwidth_copy_gb_s": self.bandwidth.copy_gb_s,
            "bandwidth_how": self.bandwidth.how,
            "target_bytes": self.target_bytes,
            "draft_bytes": self.draft_bytes,
            "target_floor_ms": self.floor_ms(self.target_bytes),
            "draft_floor_ms": None if self.draft_bytes is None else self.floor_ms(self.draft_bytes),
            "calls": [
                {
                    "call": call.call,
                    "ms": call.ms,
                    "bytes": call.nbytes,
                    "floor_ms": call.floor_ms,
                    "ratio": call.ratio,
                }
                for call in self.calls
            ],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Roofline:
        bw = Bandwidth(
            str(d.get("bandwidth_device", "")),
            float(d["bandwidth_gb_s"]),
            float(d.get("bandwidth_sum_gb_s", 0.0)),
            float(d.get("bandwidth_copy_gb_s", 0.0)),
            str(d.get("bandwidth_how", "")),
        )
        calls = [
            RoofCall(call["call"], call["ms"], int(call["bytes"]), call["floor_ms"])
            for call in d["calls"]
        ]
        draft = d.get("draft_bytes")
        return cls(bw, int(d["target_bytes"]), None if draft is None else int(draft), calls)


def roofline_of(
    sc: StepCosts,
    bw: Bandwidth,
    target_bytes: int,
    draft_bytes: int | None,
    kv_target: int = 0,
    kv_draft: int = 0,
    context: int = 0,
) -> Roofline:
    """The measured calls of sc against their floors: the target's step and each verify
    call (the same weights, read once, and the cache), the draft's one- and two-token
    calls."""
    tb = target_bytes + kv_target * context
    calls = [RoofCall("target step", sc.target_step_ms, tb, bw.floor_ms(tb))]
    calls += [
        RoofCall(f"verify, {call.width} positions", call.ms, tb, bw.floor_ms(tb))
        for call in sc.verify
    ]
    if draft_bytes is not None:
        db = draft_bytes + kv_draft * context
        calls.append(RoofCall("draft step", sc.draft_step_ms, db, bw.floor_ms(db)))
        if sc.draft_step2_ms is not None:
            calls.append(RoofCall("draft, 2 tokens", sc.draft_step2_ms, db, bw.floor_ms(db)))
    return Roofline(bw, target_bytes, draft_bytes, calls)


def roofline_lines(roof: Roofline) -> list[str]:
    """The roofline as `costs` prints it."""
    bw = roof.bandwidth
    out = [
        f"memory bandwidth {bw.gb_s:.1f} GB/s (sum {bw.sum_gb_s:.1f}, copy {bw.copy_gb_s:.1f}; "
        f"{bw.how})",
        f"target reads {roof.target_bytes / 1e6:.1f} MB a step: floor "
        f"{roof.floor_ms(roof.target_bytes):.2f} ms",
    ]
    if roof.draft_bytes is not None:
        out.append(
            f"draft reads  {roof.draft_bytes / 1e6:.1f} MB a step: floor "
            f"{roof.floor_ms(roof.draft_bytes):.2f} ms"
        )
    out.append("call                    measured ms  floor ms  measured / floor")
    out += [
        f"{call.call:22s}  {call.ms:11.2f}  {call.floor_ms:8.2f}  {call.ratio:8.2f}x"
        for call in roof.calls
    ]
    return out


# The bytes a step reads, per model as a trace names it (ModelPair.describe()'s strings),
# for the app's Speed tab, which has the trace only: (device type, weight bytes, KV bytes
# per position). Filled when the app opens a pair (specviz.ui.pairs.open_pair).
_step_bytes: dict[str, tuple[str, int, int]] = {}


def remember_pair(pair: ModelPair) -> None:
    """Note the bytes per step of a pair's models under the names its traces carry: the
    pair's description of each, and the model's own (which a trace carries for a model that
    ran eager beside the compiled path)."""
    from specviz.pair import RAN_EAGER

    names = pair.describe()
    for role, m in (("target", pair.target), ("draft", pair.draft)):
        if m is None or role not in names:
            continue
        keys = {names[role].split(RAN_EAGER)[0], m.describe()}
        if keys <= _step_bytes.keys():
            continue
        step = (m.device.type, weight_bytes(m.model), kv_bytes_per_position(m.model))
        for k in keys:
            _step_bytes[k] = step


def remembered(name: str) -> tuple[str, int, int] | None:
    """(device type, weight bytes, KV bytes per position) of a model as a trace names it
    (whatever path it ran: a note that it ran eager is not part of its name)."""
    from specviz.pair import RAN_EAGER

    return _step_bytes.get(name.split(RAN_EAGER)[0])
