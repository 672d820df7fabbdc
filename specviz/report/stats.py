"""The report's statistics: pure functions of the records (no model, no clock).

Everything that depends only on the traces' decisions (acceptance, tokens per call, the
conditional acceptance by draft position, the accepted-length histogram, acceptance by
kind of token, the costliest decisions, the paired differences of --compare-with in
acceptance and tokens per call) goes into the report's "deterministic" part: a resumed, a
sharded and an uninterrupted run over the same prompts, settings and seeds give it equal,
key for key. Everything measured with a clock (ms per token, speedup, the refined
prediction at the measured costs, the best gamma at the measured c, the paired speedup
differences) goes into its "timing" part.

Definitions (also in DEFINITIONS, printed in the report):

- acceptance = accepted drafts / verified drafts, pooled over the category's rounds
  (specviz.metrics' definition, over many traces). Two 95% intervals beside it: Wilson's
  score interval, which treats every draft as an independent trial (drafts of one prompt
  are not: they share its text and its rounds, so this interval is too narrow where
  prompts differ), and a percentile bootstrap over prompts (:func:`prompt_bootstrap`:
  whole prompts resampled, their drafts kept together), which makes no such assumption.
- tokens per call = new tokens / target calls, pooled.
- conditional acceptance at draft position k = accepted at k / verified at k. A draft at
  position k is verified only when drafts 1..k-1 of its round were accepted, so this is
  P(accept k | accepted 1..k-1). Intervals: Wilson's (drafts independent) and the
  bootstrap over prompts, as for acceptance.
- the accepted-length histogram counts rounds by drafts accepted (0..gamma).
- a decision's cost: at a rejected draft x, p(x), the target's own probability of the token
  the verification threw away (what the text would have kept with that probability had the target
  sampled it itself). The 20 costliest are the rejected drafts of largest p(x) (ties: by
  prompt, round, position). Greedy p is one-hot, so a greedy rejection costs 0 and none is
  listed. Each also records the probability that the verification rejects at that
  position at all, as the verification that decided computed it when the run recorded the
  decision (trace.Drafted.reject_prob, specviz.verify): 1 - sum_x min(p, q) for the rejection
  rule on a chain, 1 - sum_x p q for exact match, 1 - the kept mass for a lossy rule; at a
  tree's node of b children, that all b are rejected, each tried against the updated p'.
- kind of token: the drafted token's text alone (TOKEN_KINDS, :func:`token_kind`).
"""

from __future__ import annotations

import math
import statistics
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from specviz import metrics
from specviz.report.prompts import CATEGORIES
from specviz.report.records import Record
from specviz.trace import Drafted, Round, Trace, round_number

Z95 = 1.959963984540054  # the normal quantile of 0.975
BOOTSTRAP_SEED = 0  # fixed: a report's intervals are reproducible
BOOTSTRAP_RESAMPLES = 2000
COSTLIEST = 20
CONTEXT = 12  # output tokens shown before a costly decision
OVERALL = "overall"

TOKEN_KINDS = (
    "whitespace",
    "punctuation",
    "digits",
    "word start",
    "word piece",
    "code symbol",
    "other",
)
# Characters that mark a token as code rather than prose punctuation.
CODE_CHARS = frozenset("{}[]<>=+*/\\|&^%$#@~`_")

DEFINITIONS = {
    "acceptance": metrics.DEFINITIONS["acceptance rate"] + ", pooled over the prompts",
    "tokens per call": metrics.DEFINITIONS["tokens per call"] + ", pooled over the prompts",
    "conditional acceptance": "P(accept k | accepted 1..k-1) = accepted at draft position k / "
    "verified at k (a draft at k is verified only after 1..k-1 were accepted); "
    "95% intervals as for acceptance",
    "intervals": "Wilson 95% score interval: every draft an independent trial (drafts of "
    "one prompt are not, so it is too narrow where prompts differ); beside it the 95% "
    f"percentile bootstrap over prompts ({BOOTSTRAP_RESAMPLES} resamples of whole prompts, "
    f"seed {BOOTSTRAP_SEED}), which keeps each prompt's drafts together",
    "histogram": "rounds by the number of drafts they accepted",
    "cost": "p(x) of a rejected draft x: the target's probability of the token the verification "
    "threw away; P(reject) is the probability that the verification rejects at that position, "
    "from its own decision: 1 - sum_x min(p, q) under the rejection rule on a chain, "
    "1 - sum_x p q under exact match, 1 - the kept mass under a lossy rule, and at a tree's "
    "node that every child is rejected, each tried against the updated p'",
    "token kind": "the drafted token's text: whitespace only; punctuation only; digits "
    "(after optional leading space); code symbols (any of " + "".join(sorted(CODE_CHARS)) + ", "
    "no letters or digits); word start (leading space, then a letter); word piece (a "
    "letter first, no leading space); other",
    "speedup": "AR ms/token / speculative ms/token, total time over total tokens of the "
    "category's prompts (same prompts, settings, seeds, process)",
    "predicted": "metrics.refined_speedup at the category's pooled acceptance measure, with "
    "the medians over its prompts of c and of the verify call's cost in target steps",
    "best gamma": "metrics.best_gamma (Leviathan's formula) at the category's pooled "
    "acceptance measure and median c",
    "paired difference": "mean over prompts of (B - A) per prompt; 95% percentile bootstrap "
    f"interval over prompts ({BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}); an "
    "interval containing 0 is 'no measured difference'",
}


# --- small pieces ------------------------------------------------------------------------


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for k successes in n trials ((0, 1) when n is 0)."""
    if n == 0:
        return 0.0, 1.0
    phat = k / n
    denom = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def prompt_bootstrap(
    counts: list[tuple[int, int]], seed: int = BOOTSTRAP_SEED
) -> list[float] | None:
    """The 95% percentile bootstrap interval of a pooled rate sum k / sum n over prompts:
    counts holds each prompt's (k, n); a resample draws as many prompts as there are, with
    replacement, and pools their counts, so one prompt's drafts move together. Resamples
    with no trial are left out; None where no prompt has one. The counts are taken in
    sorted order, so the interval depends on the prompts' counts, not on their order."""
    import numpy as np

    if sum(n for _, n in counts) == 0:
        return None
    kn = np.asarray(sorted(counts), dtype=np.float64)  # [P, 2]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(kn), size=(BOOTSTRAP_RESAMPLES, len(kn)))  # [R, P]
    k, n = kn[picks, 0].sum(axis=1), kn[picks, 1].sum(axis=1)  # [R]
    rates = k[n > 0] / n[n > 0]
    return [float(value) for value in np.percentile(rates, [2.5, 97.5])]


def rate(k: int, n: int, per_prompt: list[tuple[int, int]] | None = None) -> dict[str, Any]:
    """k of n, the rate, its Wilson interval (lo, hi) and, given each prompt's counts, the
    bootstrap interval over prompts (prompts_lo, prompts_hi; None without a trial)."""
    lo, hi = wilson(k, n)
    boot = prompt_bootstrap(per_prompt) if per_prompt is not None else None
    return {
        "accepted": k,
        "verified": n,
        "rate": k / n if n else None,
        "lo": lo,
        "hi": hi,
        "prompts_lo": None if boot is None else boot[0],
        "prompts_hi": None if boot is None else boot[1],
    }


def token_kind(text: str) -> str:
    """The kind of a drafted token, from its text alone (see DEFINITIONS['token kind'])."""
    if not text or text.isspace():
        return "whitespace"
    body = text.lstrip()
    if body.isdigit():
        return "digits"
    if not any(ch.isalnum() for ch in body):
        if any(ch in CODE_CHARS for ch in body):
            return "code symbol"
        if all(unicodedata.category(ch)[0] in "PS" or ch.isspace() for ch in body):
            return "punctuation"
        return "other"
    if body[0].isalpha():
        return "word start" if body is not text else "word piece"
    return "other"


def categories_of(records: list[Record]) -> list[str]:
    """The categories present: the built-in ones in their order, then others as they come."""
    present = list(dict.fromkeys(r.prompt.category for r in records))
    return [cat for cat in CATEGORIES if cat in present] + [
        cat for cat in present if cat not in CATEGORIES
    ]


def groups(records: list[Record]) -> dict[str, list[Record]]:
    """Each category's records, in categories_of's order."""
    return {cat: [r for r in records if r.prompt.category == cat] for cat in categories_of(records)}


# --- the deterministic part --------------------------------------------------------------


def position_counts(traces: Iterable[Trace]) -> list[tuple[int, int]]:
    """(accepted, verified) at draft position 1, 2, ... pooled over traces."""
    hits: Counter[int] = Counter()
    tries: Counter[int] = Counter()
    for t in traces:
        for r in t.rounds:
            for i, d in enumerate(r.verified):
                tries[i] += 1
                hits[i] += d.status == "accepted"
    return [(hits[i], tries[i]) for i in range(max(tries, default=-1) + 1)]


def histogram(traces: Iterable[Trace]) -> dict[str, int]:
    """Rounds by drafts accepted, pooled (keys as strings: JSON object keys)."""
    total: Counter[int] = Counter()
    for t in traces:
        total.update(metrics.accepted_histogram(t))
    return {str(k): total[k] for k in sorted(total)}


def kind_counts(traces: Iterable[Trace]) -> dict[str, dict[str, Any]]:
    """Acceptance by kind of drafted token (verified drafts only)."""
    hits: Counter[str] = Counter()
    tries: Counter[str] = Counter()
    for t in traces:
        for d in (d for r in t.rounds for d in r.verified):
            kind = token_kind(d.text)
            tries[kind] += 1
            hits[kind] += d.status == "accepted"
    return {k: rate(hits[k], tries[k]) for k in TOKEN_KINDS if tries[k]}


def pooled_measure(traces: list[Trace]) -> tuple[str, float | None]:
    """The verification's expected-acceptance measure (metrics.expected_acceptance: alpha
    for the rejection rule), pooled over the traces' verified positions."""
    name, total, weight = "alpha", 0.0, 0
    for t in traces:
        name, value = metrics.expected_acceptance(t)
        n = t.stats.verified
        if n == 0:
            continue
        if value is None:
            return name, None
        total, weight = total + value * n, weight + n
    return name, (total / weight if weight else None)


def summary(traces: list[Trace]) -> dict[str, Any]:
    """A group's deterministic figures."""
    verified = sum(t.stats.verified for t in traces)
    accepted = sum(t.stats.accepted for t in traces)
    tokens = sum(len(t.token_ids) for t in traces)
    calls = sum(metrics.target_calls(t) for t in traces)
    rounds = sum(len(t.rounds) for t in traces)
    name, measure = pooled_measure(traces)
    return {
        "prompts": len(traces),
        "new_tokens": tokens,
        "target_calls": calls,
        "rounds": rounds,
        "verified": verified,
        "accepted": accepted,
        "acceptance": accepted / verified if verified else None,
        "acceptance_interval": list(wilson(accepted, verified)),
        "acceptance_interval_prompts": prompt_bootstrap(
            [(t.stats.accepted, t.stats.verified) for t in traces]
        ),
        "tokens_per_call": tokens / calls if calls else None,
        "mean_accepted_per_round": (
            sum(r.n_accepted for t in traces for r in t.rounds) / rounds if rounds else None
        ),
        "measure": name,
        "expected_acceptance": measure,
        "conditional_acceptance": conditional(traces),
        "histogram": histogram(traces),
        "token_kinds": kind_counts(traces),
    }


def conditional(traces: list[Trace]) -> list[dict[str, Any]]:
    """The conditional acceptance at each draft position, pooled, with both intervals."""
    each = [position_counts([t]) for t in traces]
    out = []
    for i, (k, n) in enumerate(position_counts(traces)):
        per_prompt = [c[i] if i < len(c) else (0, 0) for c in each]
        out.append({"position": i + 1, **rate(k, n, per_prompt)})
    return out


def trace_file(index: int, which: str = "spec") -> str:
    """Where a record's trace is written for the app's import, relative to the report."""
    return f"traces/{index:04d}-{which}.json"


def rejection_prob(d: Drafted, r: Round) -> float | None:
    """The probability that the verification rejects at d's position, as it computed it
    (d.reject_prob). A trace written before that field: on a chain, 1 - its kept mass, which
    is the same quantity; on a tree, or without a kept mass, None (1 - overlap is the
    rejection rule's figure only, and the trace does not say which rule a tree's p' took)."""
    if d.reject_prob is not None:
        return d.reject_prob
    if r.nodes is None and d.kept_mass is not None:
        return 1.0 - d.kept_mass
    return None


def costliest(records: list[Record], n: int = COSTLIEST) -> list[dict[str, Any]]:
    """The n rejected drafts of largest p(x), over every prompt (see the module docstring)."""
    found = []
    for rec in records:
        for r in rec.spec.rounds:
            for i, d in enumerate(r.verified):
                if d.status == "rejected" and d.p > 0:
                    found.append((-d.p, rec.prompt.index, r.index, i, rec, r, d))
    found.sort(key=lambda x: x[:4])
    out = []
    for _, _, _, i, rec, r, d in found[:n]:
        added = r.added
        out.append(
            {
                "index": rec.prompt.index,
                "id": rec.prompt.id,
                "category": rec.prompt.category,
                "round": round_number(r.index),
                "draft_position": i + 1,
                "output_position": r.start + i,
                "token": d.text,
                "kind": token_kind(d.text),
                "p": d.p,
                "q": d.q,
                "accept_prob": d.accept_prob,
                "u": d.u,
                "rejection_prob": rejection_prob(d, r),
                "context": "".join(
                    rec.spec.token_texts[max(0, r.start + i - CONTEXT) : r.start + i]
                ),
                "replaced_by": None if added is None else added.text,
                "replaced_status": None if added is None else added.status,
                "top": [
                    {"id": e["id"], "text": e["text"], "p": e["p"], "q": e["q"]} for e in d.top
                ],
                "trace": trace_file(rec.prompt.index),
            }
        )
    return out


# --- the timing part ---------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    values = [value for value in values if value]
    return statistics.median(values) if values else None


def timing(
    pairs: list[tuple[Trace, Trace]], measure: float | None, gamma: int, fixed_gamma: bool
) -> dict[str, Any]:
    """A group's figures measured with a clock, from its (speculative, baseline) pairs."""
    spec_s = sum(s.stats.wall_s for s, _ in pairs)
    ar_s = sum(a.stats.wall_s for _, a in pairs)
    spec_n = sum(len(s.token_ids) for s, _ in pairs)
    ar_n = sum(len(a.token_ids) for _, a in pairs)
    spec_ms = spec_s * 1e3 / spec_n if spec_n else None
    ar_ms = ar_s * 1e3 / ar_n if ar_n else None
    c = _median([metrics.cost_ratio(s, a) for s, a in pairs])
    steps = [metrics.verify_steps(s, a) for s, a in pairs]
    v = _median([st[gamma + 1] for st in steps if st and gamma + 1 in st])
    predicted = best = None
    if measure is not None and c is not None:
        best = metrics.best_gamma(measure, c)
        if v is not None and fixed_gamma:
            predicted = metrics.refined_speedup(measure, gamma, c, v)
    return {
        "spec_ms_per_token": spec_ms,
        "ar_ms_per_token": ar_ms,
        "speedup": ar_ms / spec_ms if spec_ms and ar_ms else None,
        "predicted_speedup": predicted,
        "c": c,
        "verify_steps": v,
        "best_gamma": best,
        "per_prompt_speedup": [metrics.speedup(a, s) for s, a in pairs],
    }


# --- paired differences ------------------------------------------------------------------


def bootstrap(diffs: list[float], seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    """The mean of paired differences and its 95% percentile bootstrap interval over them."""
    import numpy as np

    if not diffs:
        return {"n": 0, "mean": None, "lo": None, "hi": None, "verdict": "no prompts"}
    x = np.asarray(diffs, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(BOOTSTRAP_RESAMPLES, len(x)))].mean(axis=1)
    lo, hi = (float(value) for value in np.percentile(means, [2.5, 97.5]))
    return {
        "n": len(diffs),
        "mean": float(x.mean()),
        "lo": lo,
        "hi": hi,
        "verdict": verdict(lo, hi),
    }


def verdict(lo: float, hi: float) -> str:
    if lo <= 0.0 <= hi:
        return "no measured difference"
    return "B higher" if lo > 0 else "B lower"


PAIRED: dict[str, Callable[[Trace], float | None]] = {
    "acceptance": lambda t: (t.stats.accepted / t.stats.verified) if t.stats.verified else None,
    "tokens_per_call": metrics.tokens_per_call,
}


def paired(records: list[Record]) -> dict[str, Any]:
    """B - A per prompt in acceptance and tokens per call, bootstrapped."""
    out = {}
    for name, f in PAIRED.items():
        diffs = []
        for r in records:
            assert r.compare is not None
            a, b = f(r.spec), f(r.compare)
            if a is not None and b is not None:
                diffs.append(b - a)
        out[name] = bootstrap(diffs)
    return out


def paired_speedup(records: list[Record]) -> dict[str, Any]:
    diffs = []
    for r in records:
        assert r.compare is not None
        diffs.append(metrics.speedup(r.compare_baseline, r.compare) - metrics.speedup(r.ar, r.spec))
    return bootstrap(diffs)


FORMAT = "specviz-report/1"


def settings_dict(trace: Trace) -> dict[str, Any]:
    """A trace's settings as plain values, whether it holds them as a mapping or as a
    Settings object."""
    s: Any = trace.settings
    return dict(s.to_dict() if hasattr(s, "to_dict") else s)


def _group(recs: list[Record], gamma: int, fixed: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """One group's deterministic and timing figures."""
    s = summary([r.spec for r in recs])
    t = timing([(r.spec, r.ar) for r in recs], s["expected_acceptance"], gamma, fixed)
    t["wall_s"] = sum(r.wall_s for r in recs)
    return s, t


def _compare_group(
    recs: list[Record], gamma: int, fixed: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One group's figures of drafter B and the paired differences B - A."""
    b_traces = [r.compare for r in recs if r.compare is not None]
    b = summary(b_traces)
    pairs = [(r.compare, r.compare_baseline) for r in recs if r.compare is not None]
    return (
        {"b": b, "paired": paired(recs)},
        {
            "b": timing(pairs, b["expected_acceptance"], gamma, fixed),
            "paired_speedup": paired_speedup(recs),
        },
    )


# --- the whole report --------------------------------------------------------------------


def build(records: list[Record], meta: dict[str, Any]) -> dict[str, Any]:
    """report.json's two parts from the records (sorted by prompt index) and the run's
    description (meta: "deterministic" and "about" entries)."""
    records = sorted(records, key=lambda r: r.prompt.index)
    settings = settings_dict(records[0].spec) if records else {}
    gamma = int(settings.get("gamma", 4))
    fixed = not settings.get("adaptive_gamma") and settings.get("tree") is None
    fixed = fixed and settings.get("tree_budget") is None
    det: dict[str, Any] = {**meta.get("deterministic", {})}
    tim: dict[str, Any] = {}
    det["categories"], tim["categories"] = {}, {}
    for name, recs in groups(records).items():
        det["categories"][name], tim["categories"][name] = _group(recs, gamma, fixed)
    det[OVERALL], tim[OVERALL] = _group(records, gamma, fixed)
    if records and all(r.compare is not None for r in records):
        dc: dict[str, Any] = {"categories": {}}
        tc: dict[str, Any] = {"categories": {}}
        for name, recs in groups(records).items():
            dc["categories"][name], tc["categories"][name] = _compare_group(recs, gamma, fixed)
        dc[OVERALL], tc[OVERALL] = _compare_group(records, gamma, fixed)
        det["compare"], tim["compare"] = dc, tc
    det["costliest"] = costliest(records)
    det["prompts_done"] = len(records)
    tim["wall_s"] = sum(r.wall_s for r in records)
    tim["per_prompt_s"] = [{"index": r.prompt.index, "wall_s": r.wall_s} for r in records]
    return {
        "format": FORMAT,
        "deterministic": det,
        "timing": tim,
        "about": {**meta.get("about", {}), "definitions": DEFINITIONS},
    }
