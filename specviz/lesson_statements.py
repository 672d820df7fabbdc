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

from specviz import metrics
from specviz.config import LOSSY_VERIFICATIONS, is_greedy, verification_label, verification_of
from specviz.trace import Drafted, Round, Trace, round_number
from specviz.views.markup import esc, num

STATUSES = ("accepted", "rejected", "resampled", "bonus")

# --- what a run left -------------------------------------------------------------------


def status_counts(trace: Trace) -> dict[str, int]:
    """How many tokens of each status a speculative trace shows (discarded drafts are not
    shown and not counted)."""
    c: Counter[str] = Counter()
    for r in trace.rounds:
        c.update(d.status for d in r.drafted if d.status != "discarded")
        if r.added is not None:
            c[r.added.status] += 1
    return {s: c[s] for s in STATUSES}


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
    return (trace.prompt, tuple(sorted((k, str(v)) for k, v in trace.models.items())))


def _x(speedup: float) -> str:
    return f"{speedup:.2f}x"


def _need_spec(spec: Trace | None) -> Trace:
    if spec is None or not spec.rounds:
        raise ValueError("no speculative rounds to describe: the run produced none")
    return spec


def _speed_clause(spec: Trace, ar: Trace | None) -> str:
    """The speedup, and what it is made of when it is below 1."""
    if ar is None or not ar.token_ids:
        return "No baseline ran (Compare off), so there is no speedup."
    s = metrics.speedup(ar, spec)
    why = ""
    if s < 1:
        c = metrics.cost_ratio(spec, ar)
        why = f"; below 1 because a draft step costs c = {c:.2f} of a target step here"
    return (
        f"Speedup {_x(s)} ({ar.stats.ms_per_token:.1f} ms per token autoregressive against "
        f"{spec.stats.ms_per_token:.1f} speculative{why})."
    )


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


def target_sampling(settings: dict[str, Any]) -> str:
    """The target's sampling as a trace's settings give it: what the text is distributed as."""
    if is_greedy(settings):
        return "greedy decoding"
    parts = [f"temperature {settings.get('temperature'):g}"]
    top_p = settings.get("top_p", 1.0)
    parts.append(f"top-p {top_p:g}" if top_p < 1 else "no top-p")
    if settings.get("top_k"):
        parts.append(f"top-k {settings['top_k']}")
    return " and ".join(parts) if len(parts) == 2 else ", ".join(parts)


def temperature_statement(
    spec: Trace | None, ar: Trace | None, before: RunNumbers | None = None
) -> str:
    """Step 2: rejections and resamples, acceptance and speedup (against step 1's run when
    it is given and ran on the same prompt and models), and the unchanged distribution."""
    spec = _need_spec(spec)
    now = RunNumbers.of(spec, ar)
    dt = spec.settings.get("draft_temperature")
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
    used = verification_of(spec.settings)
    if used in LOSSY_VERIFICATIONS:
        said += (
            f"This run used {verification_label(used)} verification, which does not correct "
            "for q: its text does not follow the target's sampling."
        )
    else:
        said += (
            "The text is still distributed as the target's at "
            f"{target_sampling(spec.settings)}: only q changed, and the rule corrects any q."
        )
    return f"<p>{said}</p>"


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
    bar = min(1.0, d.p / d.q) if d.q > 0 else 1.0
    u = d.u if d.u is not None else float("nan")
    said = (
        f"Round {round_number(r.index)}, position {pos}: the draft proposed {_q(d.text)} "
        f"with q = {num(d.q)}; the target gives it p = {num(d.p)}. The draw "
        f"u = {u:.3f} is not below min(1, p/q) = {bar:.3f}, so it was rejected"
    )
    a = r.added
    if a is not None and a.status == "resampled":
        said += (
            f". Its replacement {_q(a.text)} was drawn from the residual "
            f"norm(max(0, p − q)), where it has probability {num(a.prob)} "
            f"(p = {num(a.p)} under the target)"
        )
        if d.overlap is not None:
            said += f"; the residual holds the 1 − sum min(p, q) = {1 - d.overlap:.3f} of p "
            said += "that the draft under-proposes, renormalised"
    return f"<p>{said}.</p>"


def greedy_statement(
    spec: Trace | None, ar: Trace | None, decode: Callable[[list[int]], str] | None = None
) -> str:
    """Step 4: the greedy speculative text against the greedy autoregressive one: equal
    (N tokens) or where they part; and that in bf16 they may part."""
    spec = _need_spec(spec)
    if ar is None:
        raise ValueError("the greedy comparison needs the baseline: tick Compare")
    a, b = spec.token_ids, ar.token_ids
    n = min(len(a), len(b))
    first = next((i for i in range(n) if a[i] != b[i]), None)
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
    dtype = str(spec.models.get("dtype", "") or "")
    said += (
        " In bf16 they may part: the two runs' different computation graphs round "
        "differently and one flipped argmax changes all that follows (the Exactness tab's "
        "greedy check shows where)."
    )
    if dtype:
        said += f" This run: {esc(dtype)}."
    return f"<p>{said}</p>"


def sweep_statement(rows: Sequence[dict[str, Any]]) -> str:
    """Step 5: the measured best gamma and speedups, Leviathan's best gamma (at the measured
    alpha and c), the refined prediction beside Leviathan's, and why too many drafts stop
    paying."""
    rows = [r for r in rows if r.get("measured_speedup") is not None]
    if not rows:
        raise ValueError("the sweep measured no cell")
    rows = sorted(rows, key=lambda r: r["gamma"])
    best = max(rows, key=lambda r: r["measured_speedup"])
    measured = ", ".join(f"gamma {r['gamma']}: {_x(r['measured_speedup'])}" for r in rows)
    alpha = statistics.median(r["alpha"] for r in rows)
    c = statistics.median(r["c"] for r in rows)
    lev_best = metrics.best_gamma(alpha, c)
    lev = ", ".join(_x(r["expected_speedup"]) for r in rows)
    said = (
        f"Measured: {measured}; <b>best gamma {best['gamma']}</b> "
        f"({_x(best['measured_speedup'])}). Leviathan's formula at the measured alpha "
        f"{alpha:.3f} and c {c:.2f} expects {lev} and puts the best gamma at "
        f"<b>{lev_best}</b> (expected {_x(metrics.expected_speedup(alpha, lev_best, c))}). "
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
    return min(v.spec_test.p_value for v in result.views)


def _p(x: float) -> str:
    return f"{x:.2g}"


def check_statement(wrong: Any, exact: Any) -> str:
    """Step 6: the wrong rule's and exact match's verdicts, smallest p-values and acceptance
    (both are specviz.analysis.distribution_check.CheckResult)."""

    def verdict(result: Any) -> str:
        v = "<b>fails</b>" if not result.passed else "<b>passes</b>"
        return (
            f"{v} (smallest p-value {_p(_min_p(result))}, threshold "
            f"{result.threshold:.3g}; acceptance {result.spec_acceptance:.2f})"
        )

    said = (
        f"With {esc(wrong.rule)} the check {verdict(wrong)}; with exact-match verification it "
        f"{verdict(exact)}. "
    )
    if wrong.passed:
        said += (
            f"The wrong rule slipped through at N = {wrong.n}: its shift of the first "
            "token's distribution is small for this prompt; more samples would catch it. "
        )
    if exact.passed is False:
        said += "Exact match is exact: a failure at this level happens 1 time in 100 by chance. "
    a, b = exact.spec_acceptance, wrong.spec_acceptance
    if a < b:
        said += (
            f"Exact match accepts less ({a:.2f} against the rejection rule's {b:.2f}: it "
            "keeps a draft only when the target samples that very token, sum p q ≤ "
            "sum min(p, q)), yet it is just as exact."
        )
    else:
        said += (
            f"Here exact match accepted {a:.2f} against the rejection rule's {b:.2f}; in "
            "expectation it accepts less (sum p q ≤ sum min(p, q))."
        )
    return f"<p>{said}</p>"
