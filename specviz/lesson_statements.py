"""The lesson's statements: each takes what a run left (traces, sweep rows, check results)
and returns one short HTML paragraph from that run's own numbers; every token text in it
goes through markup.esc. Pure: no gradio, no torch.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specviz import costs, metrics
from specviz.config import Settings
from specviz.trace import Drafted, Round, Trace, round_number, target_dtype
from specviz.verify import verification_for
from specviz.verify.words import source_text
from specviz.views.markup import esc, num, sampling_text, warped_apart

STATUSES = ("accepted", "rejected", "resampled", "bonus")

# --- what a run left -------------------------------------------------------------------


def status_counts(trace: Trace) -> dict[str, int]:
    """How many tokens of each status a speculative trace shows (discarded drafts are not
    shown and not counted)."""
    counts: Counter[str] = Counter()
    for r in trace.rounds:
        counts.update(d.status for d in r.drafted if d.status != "discarded")
        if r.added is not None:
            counts[r.added.status] += 1
    return {s: counts[s] for s in STATUSES}


@dataclass(frozen=True)
class RunNumbers:
    """The figures of one compared run that a later step states against."""

    tokens: int
    target_calls: int
    tokens_per_call: float
    acceptance: float
    speedup: float | None
    counts: dict[str, int]
    key: tuple[Any, ...] = ()  # prompt and models: a later run compares only with the same

    @classmethod
    def of(cls, spec: Trace, ar: Trace | None) -> RunNumbers:
        return cls(
            tokens=len(spec.token_ids),
            target_calls=metrics.target_calls(spec),
            tokens_per_call=metrics.tokens_per_call(spec),
            acceptance=metrics.acceptance_rate(spec),
            speedup=metrics.speedup(ar, spec) if ar is not None and ar.token_ids else None,
            counts=status_counts(spec),
            key=run_key(spec),
        )


def run_key(trace: Trace) -> tuple[Any, ...]:
    """What must agree for two runs' figures to be compared: the prompt and the models."""
    return (trace.prompt, tuple(sorted((k, str(value)) for k, value in trace.models.items())))


def _x(speedup: float) -> str:
    return f"{speedup:.2f}x"


def _need_spec(spec: Trace | None) -> Trace:
    if spec is None or not spec.rounds:
        raise ValueError("no speculative rounds to describe: the run produced none")
    return spec


def _speed_clause(spec: Trace, ar: Trace | None) -> str:
    """The speedup, and when it prints below 1.00x what keeps it there: at this run's c,
    expected acceptance (alpha, or sum p q under exact match) and verify cost, the term that
    specviz.costs.holdback finds at the run's gamma. Nothing is said of causes at 1.00x and
    above, nor when the run did not measure c and the acceptance."""
    if ar is None or not ar.token_ids:
        return "No baseline ran (Compare off), so there is no speedup."
    s = metrics.speedup(ar, spec)
    head = (
        f"Speedup {_x(s)} ({ar.stats.ms_per_token:.1f} ms per token autoregressive against "
        f"{spec.stats.ms_per_token:.1f} speculative"
    )
    if not costs.printed_below_one(s):
        return head + ")."
    return f"{head}; below 1: {_below_one(spec, ar)})."


def _below_one(spec: Trace, ar: Trace) -> str:
    """Why a run's speedup is below 1, as far as its own measurements tell."""
    c = metrics.cost_ratio(spec, ar)
    name, accept = metrics.expected_acceptance(spec)
    missing = [
        *([f"{name} (not recorded in this trace)"] if accept is None else []),
        *(["c (it needs two rounds and two baseline tokens)"] if c <= 0 else []),
    ]
    if accept is None or c <= 0:
        return f"this run did not measure {' or '.join(missing)}, so it names no cause"
    gamma = spec.settings.gamma
    verify = metrics.verify_steps(spec, ar)
    h = costs.holdback(accept, c, verify, [gamma])
    said = f"at c = {c:.2f}, {name} = {accept:.2f}" + (
        f" and a verify call of {verify[gamma + 1]:.2f} target steps" if verify else ""
    )
    if h is None:
        _, pred = costs.best_prediction(accept, c, verify, [gamma])
        return (
            f"{said} the prediction is {pred:.2f}x at gamma {gamma}, so these terms do not "
            "explain the loss"
        )
    return f"{said} the prediction is {h.prediction:.2f}x at gamma {gamma}; {h.because(name)}"


def untouched_statement(spec: Trace | None, ar: Trace | None) -> str:
    """Step 1: this run's tokens, target calls, tokens per call, counts per status, speedup."""
    spec = _need_spec(spec)
    n = RunNumbers.of(spec, ar)
    counts = ", ".join(f"{n.counts[s]} {s}" for s in STATUSES)
    return (
        f"<p>This run: <b>{n.tokens} tokens from {n.target_calls} target calls</b>, "
        f"{n.tokens_per_call:.2f} tokens per call (autoregressive: 1): {counts}; "
        f"acceptance {n.acceptance:.2f}. {_speed_clause(spec, ar)}</p>"
    )


def _change(name: str, before: float, after: float, fmt: Callable[[float], str]) -> str:
    verb = "fell" if after < before else "rose" if after > before else "stayed"
    if verb == "stayed":
        return f"{name} stayed at {fmt(after)}"
    return f"{name} {verb} from {fmt(before)} to {fmt(after)}"


def temperature_statement(
    spec: Trace | None, ar: Trace | None, before: RunNumbers | None = None
) -> str:
    """Step 2: rejections and resamples, acceptance and speedup (against step 1's run when
    it is given and ran on the same prompt and models), and the unchanged distribution."""
    spec = _need_spec(spec)
    now = RunNumbers.of(spec, ar)
    dt = spec.settings.draft_temperature
    head = f"draft temperature {dt:g}" if dt is not None else "the draft's own temperature"
    said = (
        f"With the {head}: {now.counts['rejected']} rejections and "
        f"{now.counts['resampled']} resamples in {now.target_calls} rounds. "
    )
    if before is not None and before.key == now.key:
        parts = [_change("acceptance", before.acceptance, now.acceptance, lambda x: f"{x:.2f}")]
        parts.append(_change("tokens per call", before.tokens_per_call, now.tokens_per_call, _fmt2))
        if before.speedup is not None and now.speedup is not None:
            parts.append(_change("speedup", before.speedup, now.speedup, _x))
        said += "Against step 1's run, " + ", ".join(parts) + ". "
    else:
        said += f"Acceptance {now.acceptance:.2f}, {now.tokens_per_call:.2f} tokens per call"
        said += f", speedup {_x(now.speedup)}. " if now.speedup is not None else ". "
    said += _distributed(spec.settings)
    return f"<p>{said}</p>"


def _distributed(settings: Settings) -> str:
    """What the text is distributed as under these settings: the target's, unless a
    deliberately wrong rule or a lossy verification decided it; and whether q was warped
    apart from p."""
    verification = verification_for(settings)
    if not verification.lossless:
        return (
            f"This run used {esc(verification.called_run)}, "
            f"{esc(verification.promise_text())}: its text "
            "does not follow the target's sampling."
        )
    why = (
        "only q changed, and the verification corrects any q"
        if warped_apart(settings)
        else "q is warped as p is here, and the verification corrects any q"
    )
    return f"The text is still distributed as the target's at {sampling_text(settings)}: {why}."


def _fmt2(x: float) -> str:
    return f"{x:.2f}"


def first_rejection(trace: Trace | None) -> tuple[Round, int, Drafted] | None:
    """The first draft the rejection rule rejected with a draw u: (round, position, draft);
    None when there is none (no run, greedy, exact match, or every draft accepted)."""
    if trace is None:
        return None
    for r in trace.rounds:
        for i, d in enumerate(r.drafted):
            if d.status == "rejected" and d.u is not None and d.target_sample is None:
                return r, r.start + i, d
    return None


def _q(text: str) -> str:
    """A token's text, quoted and escaped."""
    return f"<code>{esc(repr(text))}</code>"


def rejection_statement(trace: Trace | None) -> str:
    """Step 3: the first rejection's p, q, u, min(1, p/q), and where its replacement came
    from (the residual, and the replacement's probability there)."""
    found = first_rejection(trace)
    if found is None:
        raise ValueError("this run has no rejection to open: run step 2 first")
    r, pos, d = found
    u = d.u if d.u is not None else float("nan")
    if d.p_prime is not None:  # a later sibling: tried against the updated target p'
        against = (
            f"the siblings rejected before it left p′ = {num(d.p_prime)} of it. The draw "
            f"u = {u:.3f} is not below min(1, p′/q) = {d.accept_prob:.3f}"
        )
    else:
        against = f"the draw u = {u:.3f} is not below min(1, p/q) = {d.accept_prob:.3f}"
    said = (
        f"Round {round_number(r.index)}, position {pos}: the draft proposed {_q(d.text)} "
        f"with q = {num(d.q)}; the target gives it p = {num(d.p)}, and {against}, so it was "
        "rejected"
    )
    a = r.added
    if a is not None and a.status == "resampled":
        source = a.source or "residual"
        said += (
            f". Its replacement {_q(a.text)} was drawn from {esc(source_text(source))}, where "
            f"it has probability {num(a.prob)} (p = {num(a.p)} under the target)"
        )
        if trace is not None and verification_for(trace.settings).entry.wrong:
            said += f": the deliberately wrong rule {esc(trace.settings.rule)} decided it"
        if source == "residual" and d.overlap is not None and d.p_prime is None:
            said += f"; the residual holds the 1 − sum min(p, q) = {1 - d.overlap:.3f} of p "
            said += "that the draft under-proposes, renormalised"
    return f"<p>{said}.</p>"


def greedy_statement(
    spec: Trace | None, ar: Trace | None, decode: Callable[[list[int]], str] | None = None
) -> str:
    """Step 4: the greedy speculative text against the greedy autoregressive one: equal
    (N tokens) or where they part; the target's dtype in both runs, and why they may part
    when it is not float32 or when they did part."""
    spec = _need_spec(spec)
    if ar is None:
        raise ValueError("the greedy comparison needs the baseline: tick Compare")
    a, b = spec.token_ids, ar.token_ids
    n, first = min(len(a), len(b)), metrics.first_mismatch(a, b)
    if first is None and len(a) == len(b):
        said = (
            f"<b>Equal</b>: the speculative text equals the autoregressive text token for "
            f"token, all {n} tokens."
        )
    elif first is None:
        said = (
            f"The first {n} tokens are equal; the runs stopped at different lengths "
            f"({len(a)} speculative, {len(b)} autoregressive)."
        )
    else:
        sa = decode([a[first]]) if decode else spec.token_texts[first]
        sb = decode([b[first]]) if decode else ar.token_texts[first]
        said = (
            f"They part at token {first} (the first {first} are equal): speculative "
            f"{_q(sa)}, autoregressive {_q(sb)}."
        )
    dtypes = sorted({target_dtype(spec) or "unknown", target_dtype(ar) or "unknown"})
    parted = first is not None
    said += f" This run's target: {esc(' and '.join(dtypes))}."
    if dtypes != ["float32"]:
        said += (
            " Outside float32 they may part: the two runs' different computation graphs "
            "round differently, and one flipped argmax changes all that follows (the "
            "Exactness tab's greedy check shows where)."
        )
    elif parted:
        said += (
            " Even in float32 the two runs' computation graphs differ (one verify call "
            "against one call per token), and where they round differently one flipped "
            "argmax changes all that follows."
        )
    return f"<p>{said}</p>"


def sweep_statement(rows: Sequence[dict[str, Any]], verification: str = "rejection") -> str:
    """Step 5: the measured best gamma and speedups; Leviathan's formula at each cell's own
    measured acceptance and c (alpha, or sum p q, the row's match_alpha, when the sweep
    verified by exact match), and its best gamma at their medians; the refined prediction
    beside it, and why too many drafts stop paying. Every expected figure is computed here
    from the acceptance and c it is said to use."""
    rows = [r for r in rows if r.get("measured_speedup") is not None]
    if not rows:
        raise ValueError("the sweep measured no cell")
    rows = sorted(rows, key=lambda r: r["gamma"])
    best = max(rows, key=lambda r: r["measured_speedup"])
    measured = ", ".join(f"gamma {r['gamma']}: {_x(r['measured_speedup'])}" for r in rows)
    # the acceptance the verification's own measure names, where the sweep recorded it
    measure = verification_for(Settings(verification=verification)).measure
    name, key = ("sum p q", "match_alpha") if measure[1] == "match_alpha" else ("alpha", "alpha")
    lev = ", ".join(_x(metrics.expected_speedup(r[key], r["gamma"], r["c"])) for r in rows)
    accept = statistics.median(r[key] for r in rows)
    c = statistics.median(r["c"] for r in rows)
    lev_best = metrics.best_gamma(accept, c)
    spread = (
        f"each cell's own measured {name} and c"
        if len(rows) > 1
        else f"the measured {name} {accept:.3f} and c {c:.2f}"
    )
    said = (
        f"Measured: {measured}; <b>best gamma {best['gamma']}</b> "
        f"({_x(best['measured_speedup'])}). Leviathan's formula at {spread} expects {lev}"
    )
    if len(rows) > 1:
        said += f"; at their medians, {name} {accept:.3f} and c {c:.2f}, it"
    else:
        said += " and"
    said += (
        f" puts the best gamma at <b>{lev_best}</b> "
        f"(expected {_x(metrics.expected_speedup(accept, lev_best, c))}). "
    )
    refined = [r for r in rows if r.get("predicted_speedup") is not None]
    if refined:
        rbest = max(refined, key=lambda r: r["predicted_speedup"])
        said += (
            "The refined prediction, which prices the verify call at its measured width "
            f"and the engine's own overhead, expects "
            f"{', '.join(_x(r['predicted_speedup']) for r in refined)} (best of these: gamma "
            f"{rbest['gamma']}). "
        )
    said += (
        "Too many drafts stop paying: each round pays gamma draft steps and a verify call "
        "gamma + 1 positions wide, and every draft after the first rejection is wasted."
    )
    return f"<p>{said}</p>"


def _min_p(result: Any) -> float:
    return min(comp.spec_test.p_value for comp in result.comparisons)


def _p(x: float) -> str:
    return f"{x:.2g}"


# Below this total-variation distance a rule's first-token distribution is p up to float
# rounding: no number of samples tells the two apart.
TV_ZERO = 1e-6


# Wrong rules that accept exactly as the rejection rule does (only their fallback differs).
def check_statement(wrong: Any, right: Any) -> str:
    """Step 6: the wrong rule's and exact match's verdicts, smallest p-values and acceptance
    (both are specviz.analysis.distribution_check.CheckResult). When the wrong rule passes,
    its predicted_tv (the TV, computed, between p and the first token's distribution under it)
    says whether more samples would catch it; the chance failure rate of a correct verification is
    the results' own significance level."""

    def verdict(result: Any) -> str:
        said = "<b>fails</b>" if not result.passed else "<b>passes</b>"
        return (
            f"{said} (smallest p-value {_p(_min_p(result))}, threshold "
            f"{result.threshold:.3g}; acceptance {result.spec_acceptance:.2f})"
        )

    # exact match keeps a draft when the target's own sample is that token; the wrong rules
    # whose acceptance measure is alpha keep with min(1, p/q), as the rejection rule does
    match = verification_for(right.settings).draws == "sample"
    by = "exact-match verification" if match else esc(right.verifier)
    said = f"With {esc(wrong.rule)} the check {verdict(wrong)}; with {by} it {verdict(right)}. "
    if wrong.passed:
        said += _slipped(wrong)
    if not right.passed:
        sig = right.significance
        said += (
            f"{'Exact match' if match else 'That rule'} is exact: at significance {sig:g} a "
            f"correct verification fails this check by chance in at most about {100 * sig:g}% of "
            "checks. "
        )
    wrong_v = verification_for({**wrong.settings, "rule": wrong.rule})
    if match and wrong_v.draws == "u" and wrong_v.measure[1] == "alpha":
        said += _acceptances(right.spec_acceptance, wrong.spec_acceptance, wrong_v)
    return f"<p>{said}</p>"


def _slipped(wrong: Any) -> str:
    """Why a wrong rule passed, from the distance it moves the first token by."""
    tv = wrong.predicted_tv
    if tv is None:
        return (
            f"The wrong rule passed at N = {wrong.n}; this check did not compute how far it "
            "moves the first token's distribution (that needs the model drafter), so "
            "it cannot tell whether a larger N would catch it. "
        )
    if tv < TV_ZERO:
        return (
            f"The wrong rule passed at N = {wrong.n} because here it changes nothing on the "
            f"first token: under it the first token is distributed as p (TV {tv:.1g}, "
            "computed from p and q), so no number of samples would catch it there. "
        )
    return (
        f"The wrong rule slipped through at N = {wrong.n}: it moves the first token's "
        f"distribution by TV = {tv:.3g} (computed from p and q), a shift this many samples "
        "did not show; enough more samples would catch it. "
    )


def _acceptances(a: float, b: float, wrong: Any) -> str:
    """Exact match's measured acceptance against the rejection rule's (or a wrong rule's
    that accepts as it does), and the inequality that holds in expectation."""
    verb = "less" if a < b else "more" if a > b else "as much"
    against = (
        f"the rejection rule's {b:.2f}"
        if not wrong.entry.wrong
        else f"{b:.2f} under {esc(wrong.rule)}, which accepts as the rejection rule does"
    )
    return (
        f"Here exact match accepted {verb} ({a:.2f} against {against}). In "
        "expectation it never accepts more: it keeps a draft only when the target samples "
        "that very token, sum p q ≤ sum min(p, q), with equality where p or q puts all its "
        "mass on one token or they share none; either way it is exact."
    )
