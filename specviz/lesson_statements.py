"""The lesson's statements: each takes what a run left (traces, sweep rows, check results)
and returns one short HTML paragraph from that run's own numbers; every token text in it
goes through markup.esc. Pure: no gradio, no torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from specviz import costs, metrics
from specviz.config import Settings
from specviz.trace import Drafted, Round, Trace, round_number, target_dtype
from specviz.verify import verification_for
from specviz.verify.words import pq, source_text
from specviz.views import markup
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
    c: float | None = None  # draft step / target step (None: no baseline, or too short)
    draft_step_ms: float | None = None  # ms per draft step, the first round left out
    target_step_ms: float | None = None  # the baseline's ms per token, its first left out

    @classmethod
    def of(cls, spec: Trace, ar: Trace | None) -> RunNumbers:
        compared = ar is not None and bool(ar.token_ids)
        c = metrics.cost_ratio(spec, ar) if compared else 0.0  # type: ignore[arg-type]
        return cls(
            tokens=len(spec.token_ids),
            target_calls=metrics.target_calls(spec),
            tokens_per_call=metrics.tokens_per_call(spec),
            acceptance=metrics.acceptance_rate(spec),
            speedup=metrics.speedup(ar, spec) if compared else None,  # type: ignore[arg-type]
            counts=status_counts(spec),
            key=run_key(spec),
            c=c or None,
            draft_step_ms=draft_step_ms(spec),
            target_step_ms=target_step_ms(ar) if compared else None,  # type: ignore[arg-type]
        )


def target_step_ms(ar: Trace) -> float | None:
    """The baseline's ms per token, its first step left out as metrics.cost_ratio leaves it
    out (it also reads the prompt); None with fewer than two steps."""
    t = ar.timeline
    return (t[-1][0] - t[0][0]) * 1e3 / (len(t) - 1) if len(t) > 1 else None


def draft_step_ms(spec: Trace) -> float | None:
    """ms per draft step, the first round left out as metrics.cost_ratio leaves it out (it
    also reads the prompt); None when the later rounds drafted nothing."""
    later = spec.rounds[1:]
    drafted = sum(len(r.drafted) for r in later)
    return sum(r.draft_ms for r in later) / drafted if drafted else None


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


# Step 2 says a figure moved when it changed by more than this share of its first value: run
# to run on a shared machine, c alone varies by about this much.
MOVED = 0.15


def moved(before: float, after: float) -> bool:
    """Whether a figure changed by more than MOVED of its first value."""
    return abs(after - before) > MOVED * abs(before)


def _side_by_side(before: RunNumbers, now: RunNumbers) -> str:
    """Step 1's run and this one in two columns: tokens per call and c first."""

    def cell(x: float | None, fmt: Callable[[float], str]) -> str:
        return "not measured" if x is None else fmt(x)

    def ms(x: float) -> str:
        return f"{x:.1f} ms"

    rows = [
        ("tokens per target call", before.tokens_per_call, now.tokens_per_call, _fmt2),
        ("c (draft step / target step)", before.c, now.c, _fmt2),
        ("draft step", before.draft_step_ms, now.draft_step_ms, ms),
        ("target step (the baseline's)", before.target_step_ms, now.target_step_ms, ms),
        ("acceptance", before.acceptance, now.acceptance, _fmt2),
        ("speedup", before.speedup, now.speedup, _x),
    ]
    cells = [[name, cell(a, fmt), cell(b, fmt)] for name, a, b, fmt in rows]
    return markup.grid_html(["", "step 1's run", "this run"], cells, "sv-table sv-lesson-runs")


def which_moved(before: RunNumbers, now: RunNumbers) -> str:
    """Which of tokens per target call and c moved from step 1's run to this one (by more
    than MOVED), in one sentence from the two runs' numbers."""
    t0, t1 = before.tokens_per_call, now.tokens_per_call
    tpc = _change("tokens per call", t0, t1, _fmt2)
    if before.c is None or now.c is None:
        return (
            f"{tpc[0].upper()}{tpc[1:]}; c was not measured in both runs (it needs the "
            "baseline and two rounds), so this cannot tell whether the draft's cost moved too."
        )
    c0, c1 = before.c, now.c
    tpc_moved, c_moved = moved(t0, t1), moved(c0, c1)
    share = f"{100 * MOVED:.0f} %"
    if tpc_moved and not c_moved:
        return f"{tpc[0].upper()}{tpc[1:]} while c stayed near {c1:.2f} ({c0:.2f} before)."
    c_said = f"{_change('c', c0, c1, _fmt2)} with the machine, not with the step"
    why = _machine(before, now)
    if tpc_moved:
        return (
            f"{tpc[0].upper()}{tpc[1:]}, the step's effect; {c_said}: {why}. The speedups "
            "compare only as far as the machine held still."
        )
    if c_moved:
        return f"Tokens per call stayed near {t1:.2f} ({t0:.2f} before) while {c_said}: {why}."
    return (
        f"Neither moved by more than {share}: tokens per call {t0:.2f} and {t1:.2f}, c "
        f"{c0:.2f} and {c1:.2f}."
    )


def _machine(before: RunNumbers, now: RunNumbers) -> str:
    """Why c moving between step 1's run and step 2's is the machine's doing: the two runs'
    step times, where measured, and what a draft temperature changes."""
    said = "a draft temperature changes neither model's work per step"
    ms = (before.draft_step_ms, now.draft_step_ms, before.target_step_ms, now.target_step_ms)
    if any(x is None for x in ms):
        return said
    d0, d1, a0, a1 = ms
    return (
        f"a draft step took {d0:.1f} ms, then {d1:.1f} ms, and a target step {a0:.1f} ms, "
        f"then {a1:.1f} ms (two runs at different times), and {said}"
    )


def temperature_statement(
    spec: Trace | None, ar: Trace | None, before: RunNumbers | None = None
) -> str:
    """Step 2: rejections and resamples; against step 1's run (when it is given and ran on
    the same prompt and models) tokens per target call and c side by side, and which of the
    two moved; and the unchanged distribution."""
    spec = _need_spec(spec)
    now = RunNumbers.of(spec, ar)
    dt = spec.settings.draft_temperature
    head = f"draft temperature {dt:g}" if dt is not None else "the draft's own temperature"
    said = (
        f"With the {head}: {now.counts['rejected']} rejections and "
        f"{now.counts['resampled']} resamples in {now.target_calls} rounds. "
    )
    table = ""
    if before is not None and before.key == now.key:
        said += f"Against step 1's run: {which_moved(before, now)} "
        table = _side_by_side(before, now)
    else:
        said += f"Acceptance {now.acceptance:.2f}, {now.tokens_per_call:.2f} tokens per call"
        said += f", c {now.c:.2f}" if now.c is not None else ""
        said += f", speedup {_x(now.speedup)}. " if now.speedup is not None else ". "
    said += _distributed(spec.settings)
    return f"<p>{said}</p>{table}"


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
    return next(_rejections(trace), None)


def _rejections(trace: Trace | None) -> Iterator[tuple[Round, int, Drafted]]:
    """Every draft the rejection rule rejected with a draw u, in order."""
    for r in trace.rounds if trace is not None else ():
        for i, d in enumerate(r.drafted):
            if d.status == "rejected" and d.u is not None and d.target_sample is None:
                yield r, r.start + i, d


# Step 3's example: a rejection where the draw decided. Its keep probability min(1, p/q) lies
# well inside (0, 1), so that u could have gone either way, and the distribution its
# replacement was drawn from holds at least RESIDUAL_TOKENS tokens above RESIDUAL_SHARE, so
# that the replacement was a draw too.
KEEP_RANGE = (0.1, 0.9)
RESIDUAL_SHARE = 0.05
RESIDUAL_TOKENS = 2
DREW = (
    f"a rejection where the draw decided ({KEEP_RANGE[0]:g} < min(1, p/q) < "
    f"{KEEP_RANGE[1]:g}, and at least {RESIDUAL_TOKENS} tokens above "
    f"{100 * RESIDUAL_SHARE:g} % where its replacement was drawn from)"
)


def residual_shares(r: Round) -> list[tuple[str, float]]:
    """The tokens the round's added token's distribution (the residual, for a resampled
    token) gives more than RESIDUAL_SHARE, as its recorded top list holds them: (text,
    share), largest first."""
    if r.added is None:
        return []
    above = [(e["text"], e.get("residual", 0.0)) for e in r.added.top]
    return sorted(((t, x) for t, x in above if x > RESIDUAL_SHARE), key=lambda e: -e[1])


def residual_tokens(r: Round) -> int:
    """How many tokens the round's added token's distribution gives more than
    RESIDUAL_SHARE (:func:`residual_shares`)."""
    return len(residual_shares(r))


def shares_text(r: Round) -> str:
    """The residual's tokens above RESIDUAL_SHARE with their shares, three figures each."""
    return ", ".join(f"{_q(t)} {x:#.3g}" for t, x in residual_shares(r))


def spread(r: Round) -> float:
    """How evenly the replacement's distribution is spread: its second largest share (0
    with fewer than two tokens recorded)."""
    shares = sorted((e.get("residual", 0.0) for e in r.added.top), reverse=True) if r.added else []
    return shares[1] if len(shares) > 1 else 0.0


def drew(r: Round, d: Drafted) -> bool:
    """Whether the draw decided this rejection: its keep probability inside KEEP_RANGE and
    a replacement resampled from at least RESIDUAL_TOKENS likely tokens."""
    lo, hi = KEEP_RANGE
    resampled = r.added is not None and r.added.status == "resampled"
    return lo < d.accept_prob < hi and resampled and residual_tokens(r) >= RESIDUAL_TOKENS


def teaching_rejection(trace: Trace | None) -> tuple[Round, int, Drafted] | None:
    """Of the trace's rejections where the draw decided (:func:`drew`), the one whose
    replacement's distribution is spread most evenly (the largest second share; the first
    of equals): (round, position, draft); None when there is none."""
    found = [(r, pos, d) for r, pos, d in _rejections(trace) if drew(r, d)]
    return max(found, key=lambda f: spread(f[0]), default=None)


def no_draw_sentence(trace: Trace | None, seeds: Sequence[int]) -> str:
    """Why the runs with these seeds gave step 3 no example (each had no rejection where
    the draw decided), and what the last one's first rejection, if any, shows instead."""
    runs = (
        f"the run with seed {seeds[0]}"
        if len(seeds) == 1
        else f"the {len(seeds)} runs with seeds {', '.join(map(str, seeds))}"
    )
    said = f"None of {runs} had {esc(DREW)}. "
    found = first_rejection(trace)
    if found is None:
        return said + "The last one had no rejection at all: press the step's button again."
    r, _, d = found
    shares = shares_text(r)
    return said + (
        f"Below is the last run's first rejection instead: min(1, p/q) = {d.accept_prob:.3f} "
        f"and {residual_tokens(r)} token(s) above {100 * RESIDUAL_SHARE:g} % in the "
        f"distribution its replacement was drawn from{f' ({shares})' if shares else ''}. "
    )


def _q(text: str) -> str:
    """A token's text, quoted and escaped."""
    return f"<code>{esc(repr(text))}</code>"


def rejection_statement(
    trace: Trace | None, found: tuple[Round, int, Drafted] | None = None
) -> str:
    """Step 3: a rejection's p, q, u, min(1, p/q), and where its replacement came from (the
    residual, and the replacement's probability there). found: the rejection (round,
    position, draft); None: the trace's first."""
    found = found or first_rejection(trace)
    if found is None:
        raise ValueError("this run has no rejection to open: run step 2 first")
    r, pos, d = found
    u = d.u if d.u is not None else float("nan")
    if d.p_prime is not None:  # a later sibling: tried against the updated target p'
        against = (
            f"the siblings rejected before it left p′ = {pq(d.p_prime)} of it. The draw "
            f"u = {u:.3f} is not below min(1, p′/q) = {d.accept_prob:.3f}"
        )
    else:
        against = f"the draw u = {u:.3f} is not below min(1, p/q) = {d.accept_prob:.3f}"
    said = (
        f"Round {round_number(r.index)}, position {pos}: the draft proposed {_q(d.text)} "
        f"with q = {pq(d.q)}; the target gives it p = {pq(d.p)}, and {against}, so it was "
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
    said += "."
    if drew(r, d):
        said += (
            f" The draw decided: a u below {d.accept_prob:.3f} (a chance of "
            f"{100 * d.accept_prob:.0f} %) would have kept the draft, and "
            f"{residual_tokens(r)} tokens hold more than {100 * RESIDUAL_SHARE:g} % each "
            f"where the replacement was drawn from ({shares_text(r)}), so it was a draw too."
        )
    return f"<p>{said}</p>"


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


def _spread(r: dict[str, Any]) -> str:
    """A cell's measured speedup with the middle 90 % of its bootstrap."""
    return f"{_x(r['measured_speedup'])} ({r['measured_low']:.2f}–{r['measured_high']:.2f})"


def apart(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two cells' measured speedups are told apart: their spreads do not overlap."""
    return a["measured_low"] > b["measured_high"] or b["measured_low"] > a["measured_high"]


def sweep_statement(
    rows: Sequence[dict[str, Any]], verification: str = "rejection", reps: int | None = None
) -> str:
    """Step 5: the measured speedups with their spreads and the best gamma, and which cells
    the timing cannot tell from it; Leviathan's formula at each cell's own measured
    acceptance and c, and at the sweep's formula point (analysis.sweep.formula_point, which
    the chart's curve reads too) its best gamma; the refined prediction; and whether more
    drafts stopped paying here, as far as the spreads tell."""
    from specviz.analysis.sweep import acceptance_key, formula_point

    rows = sorted(
        (r for r in rows if r.get("measured_speedup") is not None), key=lambda r: r["gamma"]
    )
    if not rows:
        raise ValueError("the sweep measured no cell")
    best = max(rows, key=lambda r: r["measured_speedup"])
    how = f" ({reps} repetition{'s' if reps != 1 else ''}, " if reps else " ("
    how += "every gamma interleaved with the baseline; the middle 90 % in brackets)"
    measured = ", ".join(f"gamma {r['gamma']}: {_spread(r)}" for r in rows)
    said = f"Measured{how}: {measured}; <b>best gamma {best['gamma']}</b>"
    ties = [r for r in rows if r is not best and not apart(r, best)]
    if ties:
        said += (
            f", though the timing cannot tell it from gamma "
            f"{', '.join(str(r['gamma']) for r in ties)} (their spreads overlap)"
        )
    name, key = acceptance_key(verification)
    point = formula_point(rows, verification)
    lev = ", ".join(_x(metrics.expected_speedup(r[key], r["gamma"], r["c"])) for r in rows)
    said += f". Leviathan's formula at each cell's own measured {name} and c expects {lev}"
    if len(rows) > 1:
        said += f"; at their medians, {name} {point.accept:.3f} and c {point.c:.2f}, it"
    else:
        said += f"; at {name} {point.accept:.3f} and c {point.c:.2f} it"
    said += (
        f" puts the best gamma at <b>{point.best_gamma}</b> "
        f"(expected {_x(point.expected(point.best_gamma))}). "
    )
    said += _table(rows, name, key) + _parted(rows, key)
    refined = [r for r in rows if r.get("predicted_speedup") is not None]
    if refined:
        rbest = max(refined, key=lambda r: r["predicted_speedup"])
        said += (
            "The refined prediction, which prices the verify call at its measured width "
            f"and the engine's own overhead, expects "
            f"{', '.join(_x(r['predicted_speedup']) for r in refined)} (best of these: gamma "
            f"{rbest['gamma']}). "
        )
    return f"<p>{said}{_more_drafts(rows, best, point)}</p>"


def _table(rows: list[dict[str, Any]], name: str, key: str) -> str:
    """The table's acceptance and tokens per call, cell by cell."""
    cells = ", ".join(
        f"gamma {r['gamma']}: {name} {r[key]:.3f}, {r['tokens_per_call']:.2f}" for r in rows
    )
    return f"The table's {name} and tokens per call: {cells}. "


def formula(r: dict[str, Any], key: str) -> float:
    """Leviathan's formula at a cell's own measured acceptance and c."""
    return metrics.expected_speedup(r[key], r["gamma"], r["c"])


def parts(r: dict[str, Any], key: str) -> bool:
    """Whether a cell's measurement and the formula part: the formula outside its spread."""
    return not r["measured_low"] <= formula(r, key) <= r["measured_high"]


def _parted(rows: list[dict[str, Any]], key: str) -> str:
    """Where the formula lies outside a cell's measured spread, why, from the cell's own
    measured round (analysis.sweep.round_costs): the formula prices a round after the
    first at gamma c + 1 target steps and counts E(alpha, gamma) tokens per call; the
    measured round's parts, its tokens per call, and the first round's share of the time."""
    apart_rows = [r for r in rows if parts(r, key)]
    if not apart_rows:
        return "Every cell's measurement holds the formula's figure within its spread. "
    gammas = ", ".join(str(r["gamma"]) for r in apart_rows)
    said = f"Measurement and formula part beyond the spread at gamma {gammas}"
    costed = [r for r in apart_rows if r.get("round_steps") is not None]
    if not costed:
        return said + ": this sweep did not record its rounds' costs, so it names no cause. "
    clauses = [_why(r, key) for r in costed]
    said += (
        ". The formula prices a round at gamma c + 1 target steps (c: a draft step) and "
        f"counts no other cost; measured, {'; '.join(clauses)}"
    )
    first = max(costed, key=lambda r: r["first_share"])
    whole, steady = first["measured_speedup"], first["steady_speedup"]
    verb = "lowers" if whole < steady else "raises" if whole > steady else "leaves"
    said += (
        f". The first round, which also reads the prompt, took {_pct(first['first_share'])} "
        f"of the speculative time at gamma {first['gamma']} against "
        f"{_pct(first['first_share_ar'])} of the baseline's, which {verb} its speedup from "
        f"{_x(steady)} over the later rounds to {_x(whole)} over the whole run: a warm-up "
        "that a short run does not spread out, and that the formula, a long run's figure, "
        "leaves out. "
    )
    return said


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _why(r: dict[str, Any], key: str) -> str:
    """One cell: the measured round against the formula's, and its largest extra cost."""
    g, c = r["gamma"], r["c"]
    priced = g * c + 1
    extra = {
        "the verify call": r["verify_steps"] - 1,
        "the rest of the round (warping, decisions, cache crops)": r["other_steps"],
        "drafting": r["draft_steps"] - g * c,
    }
    most = max(extra, key=extra.__getitem__)
    largest = (
        f"the largest extra is {most}, {extra[most]:.2f} steps"
        if extra[most] >= 0.01
        else "no part costs more than the formula prices"
    )
    expected = metrics.expected_tokens_per_round(r[key], g)
    return (
        f"at gamma {g} (formula {_x(formula(r, key))}, measured {_spread(r)}) a round after "
        f"the first took {r['round_steps']:.2f} target steps where the formula prices "
        f"{priced:.2f} (drafting {r['draft_steps']:.2f}, the verify call "
        f"{r['verify_steps']:.2f}, the rest {r['other_steps']:.2f}: {largest}) and gave "
        f"{r['steady_tokens_per_call']:.2f} tokens where it counts {expected:.2f}, "
        f"{_x(r['steady_speedup'])} over those rounds"
    )


def _more_drafts(rows: list[dict[str, Any]], best: dict[str, Any], point: Any) -> str:
    """Whether drafts beyond the measured best stopped paying, as far as the spreads tell."""
    top = rows[-1]
    why = _drafts_cost(rows)
    if len(rows) == 1:
        return f"Too many drafts stop paying: {why}."
    if best is not top and apart(top, best):
        return (
            f"Past gamma {best['gamma']} more drafts stopped paying: gamma {top['gamma']} "
            f"measured {_x(top['measured_speedup'])} against {_x(best['measured_speedup'])}, "
            f"because {why}."
        )
    if best is top and all(apart(r, top) for r in rows[:-1]):
        return (
            f"Here more drafts kept paying up to gamma {top['gamma']}: at {point.name} "
            f"{point.accept:.3f} few drafts are rejected. They stop paying further out (the "
            f"formula's best is gamma {point.best_gamma}): {why}."
        )
    other = top if best is not top else next(r for r in rows[:-1] if not apart(r, top))
    return (
        f"Whether more drafts stop paying here, the timing cannot tell (gamma "
        f"{other['gamma']}'s spread overlaps gamma {best['gamma']}'s); by the formula they "
        f"stop past gamma {point.best_gamma}: {why}."
    )


def _drafts_cost(rows: list[dict[str, Any]]) -> str:
    """What more drafts cost and bought in this sweep: each round pays gamma draft steps
    and a verify call gamma + 1 positions wide; the cells' tokens per call, and their
    rounds' measured cost where recorded."""
    bought = ", ".join(
        f"{r['tokens_per_call']:.2f} at gamma {r['gamma']}"
        + (f" for a round of {r['round_steps']:.2f}" if r.get("round_steps") is not None else "")
        for r in rows
    )
    unit = " target steps" if any(r.get("round_steps") is not None for r in rows) else ""
    return (
        "each round pays gamma draft steps and a verify call gamma + 1 positions wide, "
        f"and buys the tokens per call it emits ({bought}{unit})"
    )


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
    right_v = verification_for({**right.settings, "rule": right.rule})
    if match and wrong_v.draws == "u" and wrong_v.measure[1] == "alpha":
        said += _acceptances(right.spec_acceptance, wrong.spec_acceptance, wrong_v)
    elif same_test(wrong_v, right_v):
        said += _fallbacks(wrong, right, wrong_v, right_v)
    return f"<p>{said}</p>"


def same_test(a: Any, b: Any) -> bool:
    """Whether two verifications keep a draft by the same test (the same keep probability,
    drawn the same way) and differ only in what replaces a rejection."""
    keep = type(a).keep_prob is type(b).keep_prob and a.draws == b.draws == "u"
    return keep and a.fallback_source != b.fallback_source


def _fallbacks(wrong: Any, right: Any, wrong_v: Any, right_v: Any) -> str:
    """Two rules with one keep test: what each draws a replacement from, their measured
    acceptances, and the distance each moves the first token by, where computed."""
    a, b = wrong.spec_acceptance, right.spec_acceptance
    acc = (
        f"both accepted {a:.2f} of the drafts"
        if f"{a:.2f}" == f"{b:.2f}"
        else f"acceptance {a:.2f} and {b:.2f}"
    )
    said = (
        f"Both keep a draft with probability min(1, p/q) ({acc}); they differ only in what "
        f"replaces a rejection: {esc(right_v.called)} draws it from "
        f"{esc(source_text(right_v.fallback_source))}, {esc(wrong.rule)} from "
        f"{esc(source_text(wrong_v.fallback_source))}. "
    )
    tvs = [(r.predicted_tv, n) for r, n in ((wrong, wrong.rule), (right, right_v.called))]
    if all(tv is not None for tv, _ in tvs):
        moved = "; ".join(f"{esc(n)} TV {_tv(tv)}" for tv, n in tvs)
        said += (
            f"Computed from p and q, the distance each moves the first token's distribution "
            f"from p: {moved}."
        )
    return said


def _tv(tv: float) -> str:
    """A computed distance: 0 below TV_ZERO (float rounding), else three figures."""
    return "0 (up to float rounding)" if tv < TV_ZERO else f"{tv:.3g}"


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
