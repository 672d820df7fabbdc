"""Metrics as pure functions of traces, and Leviathan et al.'s formulas.

Definitions (printed next to the numbers wherever they are shown):
- acceptance rate = accepted drafts / verified drafts. A verified draft is one the verification
  tested (accepted or rejected); drafts after a rejection are discarded, never tested.
- alpha = mean over verified positions of sum_x min(p(x), q(x)): the expected acceptance
  probability of one draft under the rejection rule (Leviathan's beta, averaged).
- sum p q = mean over verified positions of sum_x p(x) q(x): the same under exact match,
  which accepts a draft x iff the target's own sample y ~ p equals it. Never above alpha.
- kept mass = mean over verified positions of sum_x q(x) a(x), a the verification's own keep
  probability: its expected acceptance (alpha for the rejection rule, sum p q for exact match).
- out TV = TV(out, p) at a verified position, out the verification's computed output
  distribution there (specviz.verify): 0 up to float error for the lossless
  verifications, the distortion a lossy one adds. Mean and max over verified positions.
- mean accepted per round, with or without the added (resampled or bonus) token.
- tokens per target call = new tokens / target forwards while decoding.
- c = time of one draft step / time of one target step.
- speedup = the baseline's seconds to make as many tokens as the speculative run made, over
  the speculative run's seconds (same prompt, settings, seed, process; equal lengths), with
  the middle 90 % of a bootstrap over the runs' stretches (:func:`paired_speedup`).

The engine builds each trace's Stats with :func:`summarize`, so pandas is imported by
:func:`rounds_frame` alone: the engine runs without it.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specviz.config import Limits
from specviz.trace import Stats, Trace, round_number, verified
from specviz.verify import verification_for

if TYPE_CHECKING:
    import pandas as pd

# The gammas that theory ranges over: every gamma a user can set. The command line and the
# app both search this one range for the best gamma, so they always agree.
GAMMAS = range(1, Limits.max_gamma + 1)

DEFINITIONS = {
    "acceptance rate": "accepted drafts / verified drafts (discarded drafts are not tested)",
    "alpha": "mean of sum_x min(p(x), q(x)) over verified draft positions",
    "sum p q": "mean of sum_x p(x) q(x) over verified draft positions",
    "kept mass": "mean of sum_x q(x) a(x) over verified draft positions, a the keep probability",
    "out TV": (
        "TV(out, p) per verified position, out the verification's computed output distribution"
    ),
    "tokens per call": "new tokens / target forward passes while decoding",
    "c": "ms per draft step / ms per target step",
    "speedup": (
        "AR seconds / speculative seconds for the same tokens, same prompt, settings and seed"
    ),
}


def acceptance_rate(trace: Trace) -> float:
    """Accepted drafts / verified drafts."""
    decisions = verified(trace)
    return sum(d.status == "accepted" for d in decisions) / len(decisions) if decisions else 0.0


def _mean(values: list[float | None]) -> float | None:
    if not values or None in values:
        return None
    return sum(values) / len(values)  # type: ignore[arg-type]


def alpha(trace: Trace) -> float | None:
    """Mean overlap sum_x min(p, q) over verified positions; None when not measured (a
    "minimal" trace records no overlaps) or when no draft was verified."""
    return _mean([d.overlap for d in verified(trace)])


def match_alpha(trace: Trace) -> float | None:
    """Exact match's expected acceptance: mean of sum_x p(x) q(x) over verified positions;
    None as for alpha (and for traces written before it was recorded)."""
    return _mean([d.match_prob for d in verified(trace)])


def mean_out_tv(trace: Trace) -> float | None:
    """Mean TV(out, p) over verified positions; None when not measured."""
    return _mean([d.out_tv for d in verified(trace)])


def max_out_tv(trace: Trace) -> float | None:
    """The largest TV(out, p) over verified positions; None when not measured."""
    values = [d.out_tv for d in verified(trace)]
    return None if not values or None in values else max(values)  # type: ignore[type-var]


def kept_mass(trace: Trace) -> float | None:
    """Mean sum_x q(x) a(x) over verified positions: the expected acceptance under the
    trace's own verification; None when not measured."""
    return _mean([d.kept_mass for d in verified(trace)])


# The short name of each acceptance measure (a verification's ``measure`` key).
MEASURE_NAMES = {"alpha": "alpha", "match_alpha": "sum p q", "kept_mass": "kept mass"}


def expected_acceptance(trace: Trace) -> tuple[str, float | None]:
    """The expected acceptance of one draft under the trace's own verification, and its
    name: the verification object's measure ("alpha" for the rejection rule, "sum p q" for
    exact match, "kept mass" where the keep test is not min(1, p/q)). Leviathan's formulas
    take it where they say alpha."""
    key = verification_for(trace.settings).measure[1]
    value = kept_mass(trace) if key == "kept_mass" else getattr(trace.stats, key)
    return MEASURE_NAMES[key], value


def out_tv_row(trace: Trace) -> tuple[str, str]:
    """The summary row of the distortion per verified position: mean and max TV(out, p)."""
    s = trace.stats
    if s.mean_out_tv is None or s.max_out_tv is None:
        return "TV(out, p)", "not measured"
    verification = verification_for(trace.settings)
    what = (
        "lossless: float error only"
        if verification.lossless
        else "deliberately wrong: the distortion per decision"
        if verification.entry.wrong
        else "lossy: the distortion per decision"
    )
    return (
        "TV(out, p)",
        f"mean {s.mean_out_tv:.3g}, max {s.max_out_tv:.3g} per verified position  ({what}; "
        f"{DEFINITIONS['out TV']})",
    )


def alpha_text(value: float | None) -> str:
    """alpha for a summary: three decimals, or "not measured" (never a misleading 0)."""
    return "not measured" if value is None else f"{value:.3f}"


def acceptance_rows(trace: Trace) -> list[tuple[str, str]]:
    """Summary rows: the verification, the observed acceptance rate, and beside it the
    expectation of the verification used, then the other one's (what it would have
    accepted of the same drafts)."""
    s, d = trace.stats, DEFINITIONS
    verification = verification_for(trace.settings)
    alpha_row = (
        "alpha",
        f"{alpha_text(s.alpha)}  (expected acceptance under the rejection rule: {d['alpha']})",
    )
    match = (
        "sum p q",
        f"{alpha_text(s.match_alpha)}  (expected acceptance under exact match: {d['sum p q']})",
    )
    rows = [
        ("verification", f"{verification.label}  ({verification.statement()})"),
        ("acceptance rate", f"{s.acceptance_rate:.3f}  ({d['acceptance rate']})"),
    ]
    if verification.measure[1] == "kept_mass":
        kept = (
            "kept mass",
            f"{alpha_text(kept_mass(trace))}  (expected acceptance under {verification.label}: "
            f"{d['kept mass']})",
        )
        rows.append(kept)
    rows += [match, alpha_row] if verification.measure[1] == "match_alpha" else [alpha_row, match]
    return rows


@dataclass(frozen=True)
class Divergence:
    """Where two greedy texts part, and the target's top-2 logit gap there in each run
    (None where a trace did not record it)."""

    pos: int
    spec_gap: float | None
    ar_gap: float | None


def first_mismatch(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ; None when one is a prefix of the
    other (equal lists included)."""
    return next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), None)


def greedy_divergence(spec: Trace, ar: Trace) -> Divergence | None:
    """The first output position where two greedy runs' tokens differ, with the target's
    top-2 logit gap there in both; None when one text is a prefix of the other. A gap near
    0 is a near tie, which different numerics (bf16, another computation graph) can flip."""
    first = first_mismatch(spec.token_ids, ar.token_ids)
    if first is None:
        return None

    def gap(t: Trace) -> float | None:
        return t.logit_gaps[first] if first < len(t.logit_gaps) else None  # type: ignore[operator]

    return Divergence(first, gap(spec), gap(ar))


def mean_accepted(trace: Trace, with_added: bool = False) -> float:
    """Mean tokens accepted per round, optionally counting the resampled or bonus token."""
    if not trace.rounds:
        return 0.0
    total = sum(r.n_accepted + (with_added and r.added is not None) for r in trace.rounds)
    return total / len(trace.rounds)


def target_calls(trace: Trace) -> int:
    """Target forwards: one per round (spec) or per token (ar)."""
    return len(trace.rounds) if trace.method == "spec" else len(trace.token_ids)


def tokens_per_call(trace: Trace) -> float:
    """New tokens per target forward while decoding."""
    calls = target_calls(trace)
    return len(trace.token_ids) / calls if calls else 0.0


def ms_per_token(trace: Trace) -> float:
    return trace.stats.ms_per_token


@dataclass(frozen=True)
class Speedup:
    """A measured speedup over equal lengths, with its spread."""

    value: float  # the baseline's seconds / the speculative run's, for the same tokens
    low: float  # the middle 90 % of a bootstrap over the stretches
    high: float
    tokens: int  # the tokens both runs made, over which they are compared
    stretches: int  # the speculative rounds those tokens span
    ar_s: float  # the baseline's seconds for those tokens
    spec_s: float  # the speculative run's seconds for them

    def text(self) -> str:
        """E.g. "1.32x (1.18-1.47)"."""
        return f"{self.value:.2f}x ({self.low:.2f}\u2013{self.high:.2f})"


SPREAD_RESAMPLES = 400


def paired_speedup(ar: Trace, spec: Trace, resamples: int = SPREAD_RESAMPLES) -> Speedup | None:
    """The speedup over the tokens both runs made, stretch by stretch: each speculative round
    is a stretch, and the baseline's seconds for the same tokens are its stretch. The value
    is the sum of the baseline's stretches over the sum of the speculative run's, that is
    the baseline's seconds to the speculative run's last shared token over the speculative
    run's. The spread is the middle 90 % of that ratio over bootstrap resamples of the
    stretches (the first stretch, which also reads the prompt, is kept once in every
    resample), with a fixed generator of its own: the same traces give the same spread.

    Interleaved runs (specviz.engine.interleave) meet the same load stretch by stretch, so
    the spread is the machine's noise within a run; runs one after the other are compared
    over the tokens both made. None where the runs share no stretch."""
    return pooled_speedup([(ar, spec)], resamples)


def pooled_speedup(
    pairs: Sequence[tuple[Trace, Trace]], resamples: int = SPREAD_RESAMPLES
) -> Speedup | None:
    """:func:`paired_speedup` over several (baseline, speculative) pairs, such as the
    repetitions of one measurement: the value is the sum of every baseline stretch over the
    sum of every speculative one, and the bootstrap resamples all their stretches but each
    pair's first, which is kept once in every resample. None where no pair shares a
    stretch."""
    import numpy as np

    firsts: list[tuple[float, float]] = []
    ds: list[float] = []
    da: list[float] = []
    tokens = 0
    for ar, spec in pairs:
        s, a, n = stretches(ar, spec)
        if not s:
            continue
        firsts.append((s[0], a[0]))
        ds += s[1:]
        da += a[1:]
        tokens += n
    spec_s = sum(f[0] for f in firsts) + sum(ds)
    ar_s = sum(f[1] for f in firsts) + sum(da)
    if not firsts or spec_s <= 0:
        return None
    value = ar_s / spec_s
    low = high = value
    if len(ds) > 1 and resamples > 0:
        rng = np.random.default_rng(0)
        s0, a0 = sum(f[0] for f in firsts), sum(f[1] for f in firsts)
        rest_s, rest_a = np.array(ds), np.array(da)
        idx = rng.integers(0, len(rest_s), size=(resamples, len(rest_s)))
        ratios = (a0 + rest_a[idx].sum(1)) / (s0 + rest_s[idx].sum(1))
        low, high = (float(x) for x in np.quantile(ratios, [0.05, 0.95]))
    count = len(firsts) + len(ds)
    return Speedup(value, min(low, value), max(high, value), tokens, count, ar_s, spec_s)


def stretches(ar: Trace, spec: Trace) -> tuple[list[float], list[float], int]:
    """The speculative run's seconds per round and the baseline's seconds for the same
    tokens, over the tokens both runs made, and how many tokens that is."""
    # the baseline's clock when it first held at least n tokens, by bisection over its
    # token counts (a live frame reads this after every round of a long run)
    counts = [k for _, k in ar.timeline]

    def ar_time(n: float) -> float:
        return ar.timeline[bisect.bisect_left(counts, n)][0] if n > 0 else 0.0

    have = counts[-1] if counts else 0.0
    ds: list[float] = []
    da: list[float] = []
    prev_t, prev_n, prev_a = 0.0, 0.0, 0.0
    for t, n in spec.timeline:
        if n > have:
            break
        a = ar_time(n)
        ds.append(t - prev_t)
        da.append(a - prev_a)
        prev_t, prev_n, prev_a = t, n, a
    return ds, da, int(prev_n)


def speedup(ar: Trace, spec: Trace) -> float:
    """The measured speedup's value (:func:`paired_speedup`); 0 where the runs share no
    stretch."""
    p = paired_speedup(ar, spec, resamples=0)
    return p.value if p is not None else 0.0


def cost_ratio(spec: Trace, ar: Trace) -> float:
    """c: ms per draft step (spec) over ms per target step (ar).

    The first round and the first AR step are left out of both: they also read the prompt.
    """
    later = spec.rounds[1:]
    drafted = sum(len(r.drafted) for r in later)
    draft_ms = sum(r.draft_ms for r in later)
    t = ar.timeline
    ar_ms = (t[-1][0] - t[0][0]) * 1e3 / (len(t) - 1) if len(t) > 1 else 0.0
    return (draft_ms / drafted) / ar_ms if drafted and ar_ms else 0.0


def verify_steps(spec: Trace, ar: Trace) -> dict[int, float] | None:
    """The verify call's cost in target steps, measured by this pair of runs: {1: 1.0,
    gamma + 1: v}, v = median verify ms of the rounds that verified gamma drafts over the
    baseline's ms per target step (the verify ms include the decision's own work). The first
    round and the first AR step are left out (they also read the prompt). None when the
    runs cannot tell."""
    import statistics

    gamma = spec.settings.gamma
    full = [r.verify_ms for r in spec.rounds[1:] if len(r.drafted) == gamma]
    t = ar.timeline
    ar_ms = (t[-1][0] - t[0][0]) * 1e3 / (len(t) - 1) if len(t) > 1 else 0.0
    if not full or not ar_ms or gamma < 1:
        return None
    return {1: 1.0, gamma + 1: statistics.median(full) / ar_ms}


def acceptance_by_position(trace: Trace) -> list[float]:
    """Acceptance rate at draft position 1, 2, ... (verified drafts only)."""
    hits: Counter[int] = Counter()
    tries: Counter[int] = Counter()
    for r in trace.rounds:
        for i, d in enumerate(r.verified):
            tries[i] += 1
            hits[i] += d.status == "accepted"
    return [hits[i] / tries[i] for i in range(max(tries, default=-1) + 1)]


def accepted_histogram(trace: Trace) -> dict[int, int]:
    """How many rounds accepted 0, 1, 2, ... drafts."""
    return dict(sorted(Counter(r.n_accepted for r in trace.rounds).items()))


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """Leviathan: (1 - alpha^(gamma+1)) / (1 - alpha); gamma + 1 when alpha = 1."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, gamma: int, c: float) -> float:
    """Leviathan's expected walltime improvement: (1 - a^(g+1)) / ((1 - a)(g c + 1))."""
    return expected_tokens_per_round(alpha, gamma) / (gamma * c + 1.0)


def refined_speedup(
    alpha: float,
    gamma: int,
    c: float,
    v: float,
    o: float = 0.0,
    o_ar: float = 0.0,
    c2: float | None = None,
) -> float:
    """The speedup predicted from measured costs, in units of one target step:

        E(alpha, gamma) * (1 + o_ar) / (D + v + o),   D = gamma * c + alpha^gamma * (c2 - c)

    E is Leviathan's expected tokens per round, c a draft step, v the verify call at width
    gamma + 1 (not one step: it reads gamma + 1 positions), o the engine's time per round
    outside model calls, o_ar the baseline's time per token outside its model call. D is
    the round's drafting: after a full accept (probability about alpha^gamma) the draft's
    first call feeds two tokens, the last draft and the bonus, at cost c2 (c when not
    measured). Leviathan's formula is the case v = 1, o = o_ar = 0, c2 = c."""
    drafting = gamma * c + (alpha**gamma) * ((c if c2 is None else c2) - c)
    return expected_tokens_per_round(alpha, gamma) * (1.0 + o_ar) / (drafting + v + o)


def expected_curve(alpha: float, c: float) -> tuple[list[int], list[float]]:
    """Leviathan's expected walltime improvement at every gamma in GAMMAS."""
    gammas = list(GAMMAS)
    return gammas, [expected_speedup(alpha, g, c) for g in gammas]


def best_gamma(alpha: float, c: float) -> int:
    """The gamma in GAMMAS with the largest expected walltime improvement."""
    return max(GAMMAS, key=lambda g: expected_speedup(alpha, g, c))


def table1_row(ar: Trace, spec: Trace) -> dict[str, float]:
    """Chen et al.'s Table 1 columns for one prompt: ms/token both ways over the tokens both
    runs made, and the speedup (their ratio, :func:`paired_speedup`)."""
    p = paired_speedup(ar, spec, resamples=0)
    if p is None or not p.tokens:
        return {
            "ar_ms_per_token": ar.stats.ms_per_token,
            "spec_ms_per_token": spec.stats.ms_per_token,
            "speedup": 0.0,
        }
    return {
        "ar_ms_per_token": p.ar_s * 1e3 / p.tokens,
        "spec_ms_per_token": p.spec_s * 1e3 / p.tokens,
        "speedup": p.value,
    }


def rounds_frame(trace: Trace) -> pd.DataFrame:
    """One row per token decision (drafted or added), for tables and CSV export.

    round is the round as the page numbers it, from 1 (the JSON trace's index + 1); pos is
    the 0-based output position; draft_pos counts a round's drafts from 1."""
    import pandas as pd  # here only: see the module docstring

    rows = []
    for r in trace.rounds:
        for i, d in enumerate(r.drafted):
            rows.append(
                {
                    "round": round_number(r.index),
                    "pos": r.start + i if d.status == "accepted" else None,
                    "draft_pos": i + 1,
                    "kind": "drafted",
                    "id": d.id,
                    "text": d.text,
                    "status": d.status,
                    "p": d.p,
                    "q": d.q,
                    "accept_prob": d.accept_prob,
                    "u": d.u,
                    "overlap": d.overlap,
                    "match_prob": d.match_prob,
                    "target_sample": d.target_sample,
                    "draft_ms": r.draft_ms,
                    "verify_ms": r.verify_ms,
                }
            )
        if r.added is not None:
            a = r.added
            rows.append(
                {
                    "round": round_number(r.index),
                    "pos": r.start + r.n_accepted,
                    "draft_pos": None,
                    "kind": "added",
                    "id": a.id,
                    "text": a.text,
                    "status": a.status,
                    "p": a.p,
                    "q": None,
                    "accept_prob": None,
                    "u": None,
                    "overlap": None,
                    "match_prob": None,
                    "target_sample": None,
                    "draft_ms": r.draft_ms,
                    "verify_ms": r.verify_ms,
                }
            )
    return pd.DataFrame(rows)


def summarize(trace: Trace, wall_s: float) -> Stats:
    """Stats of a (possibly partial) trace, by the definitions above; wall_s is its wall time."""
    n, rounds, tested = len(trace.token_ids), trace.rounds, verified(trace)
    return Stats(
        new_tokens=n,
        rounds=len(rounds),
        target_calls=target_calls(trace),
        drafted=sum(len(r.drafted) for r in rounds),
        verified=len(tested),
        accepted=sum(d.status == "accepted" for d in tested),
        acceptance_rate=acceptance_rate(trace),
        alpha=alpha(trace),
        match_alpha=match_alpha(trace),
        tokens_per_call=tokens_per_call(trace),
        mean_out_tv=mean_out_tv(trace),
        max_out_tv=max_out_tv(trace),
        first_token_ms=trace.timeline[0][0] * 1e3 if trace.timeline else 0.0,
        draft_ms=sum(r.draft_ms for r in rounds),
        verify_ms=sum(r.verify_ms for r in rounds),
        wall_s=wall_s,
        ms_per_token=wall_s * 1e3 / n if n else 0.0,
    )
