"""The guided lesson: each step's statement from hand-built traces, sweep rows and check
results with known numbers (specviz.lesson), and each step's effect through its handler on
the tiny pair (specviz.ui.lesson_panel), without a browser."""

from __future__ import annotations

import html
import re

import pytest

from specviz import lesson
from specviz.analysis.binning import compare_outcomes
from specviz.analysis.distribution_check import CheckResult
from specviz.config import Limits
from specviz.lesson import STEPS, Lesson
from specviz.trace import Added, Drafted, Round, Stats, Trace
from specviz.ui import lesson_panel
from specviz.ui.context import AppContext
from specviz.ui.state import Form, new_session

# --- hand-built traces with known numbers ----------------------------------------------


def drafted(text: str, status: str, p: float, q: float, u: float | None, **kw) -> Drafted:
    return Drafted(
        id=len(text),
        text=text,
        p=p,
        q=q,
        accept_prob=min(1.0, p / q),
        u=u,
        status=status,
        overlap=kw.pop("overlap", 0.8),
        top=[],
        **kw,
    )


def spec_trace(settings: dict | None = None) -> Trace:
    """Two rounds, five tokens: A, then <img> rejected and & resampled (round 1); D, E
    accepted and F bonus (round 2). 3 of 4 verified drafts accepted, 10 ms per token."""
    r1 = Round(
        0,
        0,
        3,
        [
            drafted("A", "accepted", 0.5, 0.4, 0.1),
            drafted("<img>", "rejected", 0.1, 0.4, 0.625, overlap=0.7),
            drafted("x", "discarded", 0.1, 0.2, None),
        ],
        Added(3, "&", "resampled", 0.3, 0.6, []),
        1.0,
        2.0,
        0.01,
    )
    r2 = Round(
        1,
        2,
        2,
        [drafted("D", "accepted", 0.9, 0.8, 0.5), drafted("E", "accepted", 0.7, 0.6, 0.2)],
        Added(6, "F", "bonus", 0.4, 0.4, []),
        1.0,
        2.0,
        0.05,
    )
    s = {"temperature": 0.7, "top_p": 0.9, "top_k": 0, "gamma": 3, **(settings or {})}
    return Trace(
        method="spec",
        prompt="p",
        prompt_ids=[1],
        settings=s,
        models={"pair": "tiny", "target": "t on cpu (float32)", "draft": "d on cpu (float32)"},
        token_ids=[1, 3, 4, 5, 6],
        token_texts=["A", "&", "D", "E", "F"],
        rounds=[r1, r2],
        stats=Stats(new_tokens=5, ms_per_token=10.0),
        timeline=[[0.02, 2.0], [0.05, 5.0]],  # 10 ms a token
        stop_reason="max_new_tokens",
    )


def ar_trace(ms: float = 25.0, ids: list[int] | None = None) -> Trace:
    ids = ids if ids is not None else [1, 3, 4, 5, 6]
    return Trace(
        method="ar",
        prompt="p",
        prompt_ids=[1],
        settings={},
        models={"pair": "tiny", "target": "t on cpu (float32)", "draft": "d on cpu (float32)"},
        token_ids=ids,
        token_texts=[f"<{i}>" for i in ids],
        timeline=[[ms * (i + 1) / 1e3, float(i + 1)] for i in range(len(ids))],
        stats=Stats(new_tokens=len(ids), ms_per_token=ms),
    )


def test_counts_and_the_untouched_statement() -> None:
    spec = spec_trace()
    assert lesson.status_counts(spec) == {"accepted": 3, "rejected": 1, "resampled": 1, "bonus": 1}
    said = lesson.untouched_statement(spec, ar_trace())
    for text in (
        "5 tokens from 2 target calls",
        "2.50 tokens per call (autoregressive: 1): 3 accepted, 1 rejected, 1 resampled, 1 bonus",
        "acceptance 0.75",
        "Speedup 2.50x",
    ):
        assert text in said
    slow = lesson.untouched_statement(spec, ar_trace(ms=5.0))
    assert "Speedup 0.50x" in slow and "below 1: this run did not measure alpha" in slow
    assert "no speedup" in lesson.untouched_statement(spec, None)
    with pytest.raises(ValueError, match="no speculative rounds"):
        lesson.untouched_statement(None, None)


def numbers(tokens_per_call: float, c: float | None, speedup: float = 1.0) -> lesson.RunNumbers:
    """A compared run's figures with these tokens per call and c."""
    base = lesson.RunNumbers.of(spec_trace(), ar_trace())
    return lesson.RunNumbers(
        **{**base.__dict__, "tokens_per_call": tokens_per_call, "c": c, "speedup": speedup}
    )


@pytest.mark.parametrize(
    ("before", "now", "said"),
    [
        (
            (4.7, 0.30),
            (2.1, 0.31),
            "Tokens per call fell from 4.70 to 2.10 while c stayed near 0.31 (0.30 before).",
        ),
        (
            (4.7, 0.41),
            (2.1, 1.49),
            "Tokens per call fell from 4.70 to 2.10, the step's effect; c rose from 0.41 "
            "to 1.49 with the machine, not with the step: a draft step took",
        ),
        (
            (2.0, 0.41),
            (2.1, 1.49),
            "Tokens per call stayed near 2.10 (2.00 before) while c rose "
            "from 0.41 to 1.49 with the machine, not with the step: a draft step took",
        ),
        ((2.0, 0.41), (2.1, 0.40), "Neither moved by more than 15 %"),
        ((4.7, None), (2.1, 0.3), "Tokens per call fell from 4.70 to 2.10; c was not measured"),
    ],
)
def test_step_two_says_which_of_tokens_per_call_and_c_moved(before, now, said) -> None:
    assert said in lesson.which_moved(numbers(*before), numbers(*now))


def test_the_hotter_draft_puts_both_runs_side_by_side() -> None:
    before = lesson.RunNumbers.of(spec_trace(), ar_trace(ms=40.0))  # 4x
    hot = spec_trace({"draft_temperature": 1.5})
    now = lesson.RunNumbers.of(hot, ar_trace(ms=25.0))
    said = lesson.temperature_statement(hot, ar_trace(ms=25.0), before)
    assert "draft temperature 1.5" in said and "1 rejections and 1 resamples" in said
    assert f"Against step 1's run: {lesson.which_moved(before, now)}" in said
    # both runs in two columns, tokens per call and c first
    assert "<th></th><th>step 1&#x27;s run</th><th>this run</th>" in said
    assert "<td>tokens per target call</td><td>2.50</td><td>2.50</td>" in said
    c = f"<td>{before.c:.2f}</td><td>{now.c:.2f}</td>"
    assert f"<td>c (draft step / target step)</td>{c}" in said
    assert "<td>speedup</td><td>4.00x</td><td>2.50x</td>" in said
    assert "distributed as the target's at temperature 0.7 and top-p 0.9" in said
    alone = lesson.temperature_statement(hot, ar_trace(), None)
    assert "Against step 1" not in alone and "Acceptance 0.75" in alone and "2.50x" in alone
    other_prompt = lesson.RunNumbers(**{**before.__dict__, "key": ("other",)})
    assert "Against step 1" not in lesson.temperature_statement(hot, None, other_prompt)


def test_the_rejection_statement_reads_the_trace_and_escapes_tokens() -> None:
    said = lesson.rejection_statement(spec_trace())
    assert "Round 1, position 1" in said
    assert "q = 0.40" in said and "p = 0.10" in said
    assert "u = 0.625" in said and "min(1, p/q) = 0.250" in said
    assert "residual" in said and "probability 0.60" in said and "p = 0.30 under" in said
    assert "<img>" not in said and "&lt;img&gt;" in said and "&amp;" in said
    greedy = spec_trace({"greedy": True})
    for d in greedy.rounds[0].drafted:
        d.u = None
    assert lesson.first_rejection(greedy) is None
    with pytest.raises(ValueError, match="no rejection"):
        lesson.rejection_statement(greedy)


def with_residual(trace: Trace, accept: float, residual: list[float]) -> Trace:
    """The trace with its first round's rejected draft at keep probability `accept` and
    its resampled token drawn from a distribution with these top probabilities."""
    d = trace.rounds[0].drafted[1]
    d.accept_prob = accept
    d.p = accept * d.q
    trace.rounds[0].added.top = [
        {"id": i, "text": f"t{i}", "p": 0.1, "residual": r} for i, r in enumerate(residual)
    ]
    return trace


@pytest.mark.parametrize(
    ("accept", "residual", "teaches"),
    [
        (0.25, [0.6, 0.3, 0.1], True),
        (0.0, [0.6, 0.3, 0.1], False),  # p = 0: u plays no role
        (0.95, [0.6, 0.3, 0.1], False),  # kept but for the rarest u
        (0.25, [1.0], False),  # the replacement was certain
        (0.25, [0.96, 0.04], False),  # one token above 5 %
    ],
)
def test_step_three_opens_only_a_rejection_the_draw_decided(accept, residual, teaches) -> None:
    trace = with_residual(spec_trace(), accept, residual)
    found = lesson.teaching_rejection(trace)
    assert (found is not None) is teaches
    if teaches:
        r, pos, d = found
        assert (r.index, pos) == (0, 1) and lesson.residual_tokens(r) >= 2
        said = lesson.rejection_statement(trace, found)
        assert "The draw decided: a u below 0.250 (a chance of 25 %) would have kept" in said
    else:
        assert "The draw decided" not in lesson.rejection_statement(trace)
        said = lesson.no_draw_sentence(trace, [0, 1, 2])
        assert "None of the 3 runs with seeds 0, 1, 2 had a rejection where the draw" in said
        assert f"min(1, p/q) = {accept:.3f}" in said


def test_step_seven_deals_only_rounds_a_draw_decided() -> None:
    from specviz.views.verifier_game import drawn_rounds

    sampled = spec_trace()
    assert drawn_rounds(sampled) == [0]  # round 2 keeps D and E whatever u: p > q
    sampled.rounds[1].drafted[0].p = 0.4  # now u decides D: min(1, p/q) = 0.5
    sampled.rounds[1].drafted[0].accept_prob = 0.5
    assert drawn_rounds(sampled) == [0, 1]  # the round with a rejection first
    for d in sampled.rounds[0].verified:
        d.accept_prob, d.p = 1.0, d.q
    assert drawn_rounds(sampled) == [1]
    greedy = spec_trace({"greedy": True})
    for r in greedy.rounds:
        for d in r.drafted:
            d.u = None
    assert drawn_rounds(greedy) == []


def test_the_greedy_statement_says_equal_or_where_they_part() -> None:
    spec = spec_trace({"greedy": True})
    same = lesson.greedy_statement(spec, ar_trace())
    assert "Equal" in same and "all 5 tokens" in same and "target: float32" in same
    parted = lesson.greedy_statement(spec, ar_trace(ids=[1, 3, 9, 5, 6]))
    assert "part at token 2" in parted and "the first 2 are equal" in parted
    assert "&#x27;D&#x27;" in parted and "&lt;9&gt;" in parted  # escaped token texts
    shorter = lesson.greedy_statement(spec, ar_trace(ids=[1, 3, 4]))
    assert "first 3 tokens are equal" in shorter


def row(
    gamma: int,
    measured: float,
    expected: float,
    predicted: float | None,
    spread: float = 0.05,
    alpha: float = 0.8,
    c: float = 0.1,
) -> dict:
    return {
        "gamma": gamma,
        "temperature": 0.7,
        "alpha": alpha,
        "match_alpha": 0.6,
        "c": c,
        "tokens_per_call": 2.0,
        "measured_speedup": measured,
        "measured_low": measured - spread,
        "measured_high": measured + spread,
        "expected_speedup": expected,
        "predicted_speedup": predicted,
    }


def test_the_sweep_statement() -> None:
    from specviz import metrics

    rows = [
        row(8, 1.1, 2.0, 1.2, 0.04),
        row(1, 1.3, 1.6, 1.4, 0.04),
        row(2, 1.5, 1.9, 1.6, 0.04),
        row(4, 1.4, 2.2, 1.5, 0.04),
    ]
    said = lesson.sweep_statement(rows, reps=3)
    assert "(3 repetitions, every gamma interleaved with the baseline" in said
    assert "gamma 1: 1.30x (1.26–1.34), gamma 2: 1.50x (1.46–1.54)" in said
    assert "gamma 8: 1.10x (1.06–1.14)" in said and "best gamma 2</b>" in said
    assert "cannot tell" not in said
    best = metrics.best_gamma(0.8, 0.1)  # Leviathan at alpha 0.8, c 0.1, over 1..32
    assert f"best gamma at <b>{best}</b>" in said and "alpha 0.800 and c 0.10" in said
    lev = ", ".join(f"{metrics.expected_speedup(0.8, g, 0.1):.2f}x" for g in (1, 2, 4, 8))
    assert f"expects {lev}" in said
    assert "refined prediction" in said and "1.40x, 1.60x, 1.50x, 1.20x" in said
    assert "(best of these: gamma 2)" in said
    assert "Past gamma 2 more drafts stopped paying: gamma 8 measured 1.10x against 1.50x" in said
    no_refined = lesson.sweep_statement([row(1, 1.3, 1.6, None)])
    assert "refined" not in no_refined and "Too many drafts stop paying" in no_refined
    with pytest.raises(ValueError, match="no cell"):
        lesson.sweep_statement([])


def test_the_sweep_statement_says_what_the_spreads_cannot_tell() -> None:
    # gamma 8 measured highest but within gamma 4's spread: no ranking is claimed
    rows = [row(1, 1.0, 1, None), row(2, 1.2, 1, None), row(4, 1.4, 1, None, 0.2)]
    said = lesson.sweep_statement([*rows, row(8, 1.5, 1, None, 0.2)])
    assert "best gamma 8</b>, though the timing cannot tell it from gamma 4" in said
    assert "Whether more drafts stop paying here, the timing cannot tell (gamma 4's" in said
    # measured best at the largest gamma, told apart from every other
    said = lesson.sweep_statement([*rows, row(8, 2.0, 1, None, 0.05)])
    assert "Here more drafts kept paying up to gamma 8: at alpha 0.800" in said
    # a best in the middle whose spread meets the largest gamma's
    said = lesson.sweep_statement([*rows[:2], row(4, 1.5, 1, None, 0.2), row(8, 1.4, 1, None)])
    assert "cannot tell it from gamma 8" in said and "(gamma 8's spread overlaps gamma 4's)" in said


def test_the_sweep_chart_and_statement_quote_one_alpha_and_c() -> None:
    from specviz.analysis.sweep import formula_point
    from specviz.views import across_runs

    rows = [
        row(g, 1.0 + g / 10, 1, None, alpha=a, c=c)
        for g, a, c in ((1, 0.9, 0.8), (2, 0.95, 0.9), (4, 0.85, 0.7))
    ]
    point = formula_point(rows)
    assert (point.accept, point.c) == (0.9, 0.8)  # the medians
    said = lesson.sweep_statement(rows)
    legend = across_runs.sweep_figure(rows).data[0].name
    assert f"alpha {point.accept:.3f} and c {point.c:.2f}" in said
    assert f"α = {point.accept:.3f}, c = {point.c:.2f}" in legend
    # under exact match both read sum p q
    exact = formula_point(rows, "exact-match")
    assert exact.name == "sum p q" and exact.accept == 0.6
    assert "sum p q 0.600" in lesson.sweep_statement(rows, "exact-match")
    assert "sum p q = 0.600" in across_runs.sweep_figure(rows, "exact-match").data[0].name


def check_result(rule: str, spec_counts: list[int], acceptance: float, verification: str):
    """A CheckResult over two outcomes with p = (0.5, 0.5) and the given speculative counts."""
    exact = {(0,): 0.5, (1,): 0.5}
    spec = [(0,)] * spec_counts[0] + [(1,)] * spec_counts[1]
    ar = [(0,)] * 100 + [(1,)] * 100
    view = compare_outcomes("first token", exact, spec, ar, lambda o: str(o[0]))
    return CheckResult(
        prompt="p",
        settings={"verification": verification},
        rule=rule,
        n=200,
        length=1,
        significance=0.01,
        comparisons=[view],
        spec_acceptance=acceptance,
        predicted_tv=None,
        elapsed_s=1.0,
    )


def test_the_check_statement() -> None:
    wrong = check_result("resample-from-p", [140, 60], 0.45, "rejection")
    exact = check_result("rejection", [98, 102], 0.30, "exact-match")
    assert not wrong.passed and exact.passed
    said = lesson.check_statement(wrong, exact)
    p_wrong = wrong.comparisons[0].spec_test.p_value
    assert f"resample-from-p the check <b>fails</b> (smallest p-value {p_wrong:.2g}" in said
    assert "exact-match verification it <b>passes</b>" in said
    assert "acceptance 0.45" in said and "acceptance 0.30" in said
    assert "exact match accepted less (0.30 against 0.45 under resample-from-p" in said
    slipped = lesson.check_statement(exact, check_result("rejection", [98, 102], 0.5, "typical"))
    assert "passed at N = 200" in slipped and "never accepts more" not in slipped


def test_previous_and_next_stay_within_the_steps() -> None:
    state = Lesson()
    out = lesson_panel.move_update(state, -1)
    assert state.index == 0 and "step 1 of 7: An untouched Run" in out["lesson_box"].label
    for _ in range(10):
        out = lesson_panel.move_update(state, 1)
    assert state.index == len(STEPS) - 1 and out["lesson_go"] == STEPS[-1].button
    state.said[len(STEPS) - 1] = "<p>said</p>"
    assert "said" in lesson_panel.move_update(state, 0)["lesson_said"]


# --- each step through its handler, on the tiny pair ----------------------------------

LIMITS = Limits(max_new_tokens=64)  # the tiny models hold 128 positions


@pytest.fixture(scope="module")
def close():
    """A draft close to its target: mostly accepted until it samples hotter. Flat enough
    (sharpness 0.5) that the target's nucleus often holds several tokens, so that a
    residual can spread over them (step 3's example)."""
    from tests.tiny import close_pair

    return close_pair(sharpness=0.5)


@pytest.fixture()
def ctx(close):
    return AppContext(lambda pair, dtype: close, LIMITS)


@pytest.fixture(scope="module")
def page():
    """The page as the app composes it: what each name a step's changes carry maps to."""
    import gradio as gr

    from specviz.config import Deployment
    from specviz.ui import layout
    from specviz.ui.context import app_context

    dep = Deployment(limits=LIMITS)
    app, menu = app_context(dep, lambda name, dtype: None, ["default"])
    with gr.Blocks() as demo:
        built, _ = layout.compose(app, menu, dep, demo)
    return built


BARE = re.compile(r">\s*(false|true|None)\s*<")


def shown_as_meant(page, frames: list[dict]) -> None:
    """Every name maps to one component of the page; an HTML view gets a string with no
    bare false, true or None in it (a control's value sent to a view shows as one); a
    checkbox gets a bool."""
    import gradio as gr

    for frame in frames:
        for name, value in frame.items():
            comp = page.component(name)
            if isinstance(comp, gr.HTML):
                assert isinstance(value, str), (name, value)
                assert value.strip() not in ("false", "true", "None"), (name, value)
                assert not BARE.search(value), (name, value)
            elif isinstance(comp, gr.Checkbox):
                assert isinstance(value, bool), (name, value)


def take(ctx, session, state: Lesson, index: int, prompt: str = "1 2 3", page=None) -> list[dict]:
    state.index = index
    form = Form(prompt=prompt, pair="tiny")
    frames = list(lesson_panel.lesson_updates(session, state, form, ctx))
    if page is not None:
        shown_as_meant(page, frames)
    return frames


def test_steps_one_to_four_and_seven_on_the_tiny_pair(ctx, page, one_thread) -> None:
    session, state = new_session(), Lesson()
    frames = take(ctx, session, state, 0, page=page)
    assert frames[0]["compare"] is True and frames[0]["own_draft_temperature"] is False
    assert frames[0]["max_new_tokens"] == 64  # within the deployment's limit
    said = frames[-1]["lesson_said"]
    assert f"{len(session.spec.token_ids)} tokens from {len(session.spec.rounds)}" in said
    assert state.first is not None and "Speedup" in said
    # the run's final frame goes out with the statement: a tab opened later draws it
    assert {"theory", "projection", "acc_round", "speed"} <= set(frames[-1])
    assert frames[0]["lesson_changed_row"].visible is False  # the defaults: nothing changed

    frames = take(ctx, session, state, 1, page=page)
    assert frames[0]["draft_temperature"] == 1.5 and frames[0]["own_draft_temperature"]
    assert session.spec.settings.draft_temperature == 1.5
    assert lesson.status_counts(session.spec)["rejected"] > 0  # rejections appear
    said = frames[-1]["lesson_said"]
    now = lesson.RunNumbers.of(session.spec, session.ar)
    assert f"Against step 1's run: {html.escape(lesson.which_moved(state.first, now), False)}" in (
        said
    )
    first, second = state.first, now
    tpc = f"<td>{first.tokens_per_call:.2f}</td><td>{second.tokens_per_call:.2f}</td>"
    assert f"<td>tokens per target call</td>{tpc}" in said
    assert f"<td>c (draft step / target step)</td><td>{first.c:.2f}</td><td>{second.c:.2f}" in said
    assert "draft temperature 1.5 (default off)" in frames[0]["lesson_changed"]
    assert frames[0]["lesson_changed_row"].visible is True

    # step 3 opens a rejection where the draw decided, from step 2's run or a new one
    frames = take(ctx, session, state, 2, page=page)
    out = frames[-1]
    found = lesson.teaching_rejection(session.spec)
    assert found is not None, out["lesson_said"]
    r, pos, d = found
    assert 0.1 < d.accept_prob < 0.9 and d.u is not None and d.u >= d.accept_prob
    assert sum(e["residual"] > 0.05 for e in r.added.top) >= 2
    assert out["insp_round"] == r.index + 1 and out["insp_pos"] == pos
    assert (
        "rejected: u =" in html.unescape(out["verdict"])
        and "The draw decided" in (out["lesson_said"])
    )
    assert f"min(1, p/q) = {d.accept_prob:.3f}" in out["lesson_said"]

    frames = take(ctx, session, state, 3, page=page)
    assert frames[0]["greedy"] is True
    assert session.spec.token_ids == session.ar.token_ids
    assert "Equal" in frames[-1]["lesson_said"]

    # step 7 after the greedy run: no draw decides there, so a sampled run first
    from specviz.views.verifier_game import draw_decided

    greedy = session.spec
    frames = take(ctx, session, state, 6, page=page)
    out = frames[-1]
    game = out["play_state"]
    assert session.spec is not greedy and not session.spec.settings.is_greedy
    assert game.trace is session.spec
    assert any(draw_decided(d, game.trace.settings) for d in game.round.verified)
    assert "your last run was greedy, where no draw decides" in out["lesson_said"]
    # a sampled run with a drawn round is dealt from as it is: no model call
    frames = take(ctx, session, state, 6, page=page)
    assert len(frames) == 1 and frames[0]["play_state"].trace is session.spec


def test_step_three_runs_with_new_seeds_and_says_when_none_had_an_example(page, one_thread) -> None:
    """With two tokens a residual never spreads over two: every rejection's replacement is
    the other token. Step 3 runs at most TRIES runs, each with the next seed, then says so
    and opens the last run's first rejection."""
    from tests.tiny import tiny_pair

    pair = tiny_pair(vocab=2, target_seed=0, draft_seed=2)
    ctx = AppContext(lambda p, d: pair, LIMITS)
    session, state = new_session(), Lesson()
    frames = take(ctx, session, state, 2, "1 0 1", page)
    said = frames[-1]["lesson_said"]
    assert len(session.log.rows) == lesson.TRIES  # one run per seed, no more
    seeds = [f["seed"] for f in frames if "seed" in f]
    assert seeds[0] == 0 and seeds[-1] == lesson.TRIES - 1
    seeds_said = ", ".join(map(str, range(lesson.TRIES)))
    assert f"None of the {lesson.TRIES} runs with seeds {seeds_said} had a rejection" in said
    if lesson.first_rejection(session.spec) is not None:
        assert "Below is the last run" in said and "verdict" in frames[-1]
    last_seed = f"seed {lesson.TRIES - 1} (default 0)"  # the page shows the seed it ran
    assert any(last_seed in f.get("lesson_changed", "") for f in frames)


def test_step_five_sweeps_and_step_six_checks(ctx, page, one_thread) -> None:
    session, state = new_session(), Lesson()
    frames = take(ctx, session, state, 4, page=page)
    chosen = next(f for f in frames if "sweep_gammas" in f)  # the sweep's handler shows them
    assert chosen["sweep_gammas"] == [1, 2, 4, 8] and chosen["sweep_reps"] == lesson.SWEEP_REPS
    said = frames[-1]["lesson_said"]
    assert "interleaved with the baseline" in said and "gamma 8:" in said
    assert "Leviathan" in said and "refined prediction" in said
    # the statement quotes the chart's alpha and c
    legend = frames[-1]["sweep_plot"].data[0].name
    quoted = re.search(r"α = (\d\.\d+), c = (\d+\.\d+)", legend)
    assert f"alpha {quoted[1]} and c {quoted[2]}" in said

    from tests.tiny import tiny_pair

    pair = tiny_pair(vocab=8, target_seed=0, draft_seed=2)  # first-position overlap ~0.4
    frames = take(AppContext(lambda p, d: pair, LIMITS), session, state, 5, "1 2", page)
    said = frames[-1]["lesson_said"]
    assert "resample-from-p the check <b>fails</b>" in said, said
    assert "the rejection rule it <b>passes</b>" in said, said
    assert "Both keep a draft with probability min(1, p/q)" in said, said
    assert "FAIL" in frames[-1]["check_summary"] and "PASS" in frames[-1]["check_summary"]
    second = next(i for i, f in enumerate(frames) if i and f.get("verification") == "rejection")
    assert [f["check_rule"] for f in frames if "check_rule" in f] == [
        "resample-from-p",
        "rejection",
    ]
    assert next(i for i, f in enumerate(frames) if f.get("check_rule") == "rejection") > second
    # the tab's prompt box says that the page's prompt was checked
    assert [f["check_prompt"] for f in frames if "check_prompt" in f] == ["", ""]
    # both checks charted: the wrong rule failing, Algorithm 1's rejection rule passing
    figure = frames[-1]["check_plot"]
    titles = " ".join(a.text.replace("<br>", " ") for a in figure.layout.annotations)
    assert "resample-from-p rule FAILS: first token" in titles
    assert "rejection rule passes: first token" in titles and "bins" in titles
    assert "FAILS; rejection rule passes" in figure.layout.title.text.replace("<br>", " ")
    assert "exact match" not in figure.layout.title.text

    # the controls step 6 left, and one click back to the defaults
    line = [f["lesson_changed"] for f in frames if "lesson_changed" in f][-1]
    assert "temperature 1 (default 0.7)" in line and "draft temperature 0.7 (default off)" in line
    assert "verification" not in line  # the second check runs the default verification
    out = lesson_panel.restore_changes(state, ctx)
    assert out["lesson_changed_row"].visible is False and out["lesson_changed"] == ""
    assert {k: out[k] for k in lesson.BASE} == lesson_panel.defaults(ctx)
    assert out["temperature"] == 0.7 and out["own_draft_temperature"] is False
    assert out["max_new_tokens"] == 64  # the untouched page's, within the deployment's limit
    assert lesson_panel.edited_changes(state, {**out, "seed": 3}, ctx) == {}  # restored
    state.set_controls = True
    assert (
        "seed 3 (default 0)"
        in lesson_panel.edited_changes(state, {**out, "seed": 3.0}, ctx)["lesson_changed"]
    )
    shown_as_meant(page, [out])


def test_bad_input_is_one_line_in_the_panel(ctx) -> None:
    session, state = new_session(), Lesson()
    frames = take(ctx, session, state, 0, prompt="   ")
    said = frames[-1]["lesson_said"]
    assert "prompt is empty" in said and "sv-status-error" in said
    assert frames[-1]["status"] == said and 0 not in state.said


# --- every sentence from its own numbers (issue 62, item 2) --------------------------------


def test_step_two_says_c_moved_with_the_machine_from_the_runs_step_times() -> None:
    spec, ar = spec_trace(), ar_trace(ms=25.0)
    before = lesson.RunNumbers.of(spec, ar)
    # independently: the later round's draft ms over its drafts; the baseline's ms per token
    # after its first
    assert before.draft_step_ms == 1.0 / 2 and before.target_step_ms == pytest.approx(25.0)
    slow = spec_trace()
    for r in slow.rounds:
        r.draft_ms *= 3  # a loaded machine: the draft's steps three times as slow
    now = lesson.RunNumbers.of(slow, ar_trace(ms=30.0))
    assert now.c == pytest.approx(3 * 0.5 / 30.0) and before.c == pytest.approx(0.5 / 25.0)
    said = lesson.which_moved(before, now)
    assert "c rose from 0.02 to 0.05 with the machine, not with the step" in said
    assert "a draft step took 0.5 ms, then 1.5 ms, and a target step 25.0 ms, then 30.0 ms" in said
    assert "changes neither model's work per step" in said
    assert "the draft's cost moved, not the acceptance" not in said
    table = lesson.temperature_statement(slow, ar_trace(ms=30.0), before)
    assert "<td>target step (the baseline&#x27;s)</td><td>25.0 ms</td><td>30.0 ms</td>" in table


def two_rejections(first: list[float], second: list[float]) -> Trace:
    """spec_trace with a second rejection in round 2 (its second draft), each rejection's
    replacement drawn from a distribution with the given top shares."""
    trace = with_residual(spec_trace(), 0.25, first)
    r2 = trace.rounds[1]
    d = r2.drafted[1]
    d.status, d.q, d.p, d.accept_prob, d.u = "rejected", 0.6, 0.3, 0.5, 0.8
    r2.added = Added(9, "Z", "resampled", 0.2, second[0], [])
    r2.added.top = [
        {"id": 20 + i, "text": f"s{i}", "p": 0.1, "residual": r} for i, r in enumerate(second)
    ]
    return trace


def shares_said(said: str) -> list[float]:
    """The shares a statement lists after the token texts it quotes."""
    return [float(x) for x in re.findall(r"&#x27;</code> (\d\.\d+)", said)]


@pytest.mark.parametrize(
    ("first", "second", "pick"),
    [
        ([0.94, 0.0502, 0.0098], [0.5, 0.3, 0.2], 1),  # the second is spread more evenly
        ([0.4, 0.35, 0.25], [0.9, 0.1], 0),
        ([0.94, 0.0502, 0.0098], [0.96, 0.04], 0),  # the second has one token above 5 %
    ],
)
def test_step_three_opens_the_most_spread_residual_and_lists_its_shares(first, second, pick):
    trace = two_rejections(first, second)
    r, pos, d = lesson.teaching_rejection(trace)
    assert r.index == pick
    shares = first if pick == 0 else second
    said = lesson.rejection_statement(trace, (r, pos, d))
    # an independent count of the shares above 5 %, and each listed with three figures
    above = sorted((x for x in shares if x > 0.05), reverse=True)
    assert len(above) >= 2 and f"{len(above)} tokens hold more than 5 % each" in said
    listed = shares_said(html.unescape(said).replace("'</code>", "&#x27;</code>"))
    assert listed == pytest.approx(above, rel=5e-3) and all(x > 0.05 for x in listed)
    assert re.search(r"&#x27;</code> 0\.0502", said) or 0.0502 not in above


def stretch_pair(rounds: list[tuple[int, float, float, float]], ar_ms: float, first_ar: float):
    """A baseline and a speculative run with known times: each speculative round (tokens,
    draft ms, verify ms, wall ms); the baseline's first token first_ar ms, then ar_ms a token."""
    rs, timeline, t, n = [], [], 0.0, 0
    for i, (k, draft, verify, wall) in enumerate(rounds):
        drafts = [drafted("a", "accepted", 0.5, 0.5, 0.1) for _ in range(max(0, k - 1))]
        rs.append(Round(i, n, 4, drafts, Added(1, "b", "bonus", 0.5, 0.5, []), draft, verify, 0))
        t, n = t + wall / 1e3, n + k
        timeline.append([t, float(n)])
    spec = spec_trace()
    spec.rounds, spec.timeline = rs, timeline
    spec.token_ids = list(range(n))
    ar = ar_trace()
    ar.token_ids = list(range(n))
    ar.timeline = [[(first_ar + ar_ms * i) / 1e3, float(i + 1)] for i in range(n)]
    return ar, spec


def test_round_costs_split_a_round_as_measured() -> None:
    from specviz import metrics
    from specviz.analysis.sweep import round_costs

    # first round: 1 token in 300 ms (the prompt); then 3 rounds of 4 tokens in 200 ms each
    # (drafting 60 ms, the verify call 90 ms, the rest 50 ms); the baseline 100 ms a token
    # after its first of 250 ms
    rounds = [(1, 0.0, 300.0, 300.0)] + [(4, 60.0, 90.0, 200.0)] * 3
    ar, spec = stretch_pair(rounds, 100.0, 250.0)
    got = round_costs([(ar, spec)])
    # by hand: 12 later tokens over 3 rounds; a round 200 ms = 2 baseline steps
    assert got["steady_tokens_per_call"] == pytest.approx(4.0)
    assert got["round_steps"] == pytest.approx(2.0)
    assert got["draft_steps"] == pytest.approx(0.6) and got["verify_steps"] == pytest.approx(0.9)
    assert got["other_steps"] == pytest.approx(0.5)
    assert got["steady_speedup"] == pytest.approx(1200 / 600)
    assert got["first_share"] == pytest.approx(300 / 900)
    assert got["first_share_ar"] == pytest.approx(250 / (250 + 1200))
    whole = metrics.pooled_speedup([(ar, spec)], resamples=0).value
    assert whole == pytest.approx((250 + 1200) / 900)
    # the identity the statement leans on
    assert got["steady_speedup"] == pytest.approx(
        got["steady_tokens_per_call"] / got["round_steps"]
    )
    assert round_costs([]) == dict.fromkeys(got)


def costed_row(gamma: int, measured: float, spread: float, alpha: float, c: float, **costs):
    out = row(gamma, measured, 0.0, None, spread, alpha=alpha, c=c)
    base = {
        "steady_speedup": measured * 1.2,
        "steady_tokens_per_call": 1.9,
        "round_steps": 4.4,
        "draft_steps": 0.55,
        "verify_steps": 2.1,
        "other_steps": 1.75,
        "first_share": 0.3,
        "first_share_ar": 0.1,
    }
    return {**out, **base, **costs}


def test_step_five_says_why_measurement_and_formula_part() -> None:
    from specviz import metrics

    # the walk's case: alpha 0.989, gamma 1's formula far above its measured 0.43x
    rows = [costed_row(1, 0.43, 0.04, 0.989, 0.5), costed_row(8, 1.5, 0.3, 0.989, 0.45)]
    formula = {r["gamma"]: metrics.expected_speedup(r["alpha"], r["gamma"], r["c"]) for r in rows}
    parted = [
        g for g, f in formula.items() if not 0.39 <= f <= 0.47 or g == 8 and not 1.2 <= f <= 1.8
    ]
    said = lesson.sweep_statement(rows, reps=2)
    assert "The table's alpha and tokens per call: gamma 1: alpha 0.989, 2.00" in said
    assert f"part beyond the spread at gamma {', '.join(map(str, parted))}" in said
    assert f"at gamma 1 (formula {formula[1]:.2f}x, measured 0.43x (0.39–0.47))" in said
    # the formula's round against the measured one, with its parts, and the largest extra
    assert "took 4.40 target steps where the formula prices 1.50" in said
    extras = {"the verify call": 2.1 - 1, "the rest of the round": 1.75, "drafting": 0.55 - 0.5}
    largest = max(extras, key=extras.__getitem__)
    assert f"the largest extra is {largest}" in said
    assert f"where it counts {metrics.expected_tokens_per_round(0.989, 1):.2f}" in said
    assert "lowers its speedup from 0.52x over the later rounds to 0.43x" in said
    assert "every draft after the first rejection is wasted" not in said
    # where the formula lies within every spread, nothing is explained away
    near = [costed_row(1, formula[1], 0.05, 0.989, 0.5)]
    assert "Every cell's measurement holds the formula's figure" in lesson.sweep_statement(near)
    # an old sweep without the rounds' costs names no cause
    old = [row(1, 0.43, 1.33, None, 0.04, alpha=0.989, c=0.5)]
    assert "did not record its rounds' costs, so it names no cause" in lesson.sweep_statement(old)


def test_step_six_states_the_rejection_rule_beside_the_wrong_one() -> None:
    wrong = check_result("resample-from-p", [140, 60], 0.45, "rejection")
    right = check_result("rejection", [98, 102], 0.45, "rejection")
    wrong.predicted_tv, right.predicted_tv = 0.213, 3e-9
    said = lesson.check_statement(wrong, right)
    assert "with the rejection rule it <b>passes</b>" in said
    assert (
        "Both keep a draft with probability min(1, p/q) (both accepted 0.45 of the drafts)" in said
    )
    assert "the rejection rule draws it from the residual norm(max(0, p − q))" in said
    assert "resample-from-p from p, the target&#x27;s own distribution" in said
    assert "resample-from-p TV 0.213; the rejection rule TV 0 (up to float rounding)" in said
    assert "exact match" not in said.lower()
    assert lesson.STEPS[5].action.right == {"verification": "rejection"}
    assert lesson.STEPS[5].action.right_rule == "rejection"
