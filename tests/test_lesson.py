"""The guided lesson: each step's statement from hand-built traces, sweep rows and check
results with known numbers (specviz.lesson), and each step's effect through its handler on
the tiny pair (specviz.ui.lesson_panel), without a browser."""

from __future__ import annotations

import html

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


def test_the_hotter_draft_states_against_step_one() -> None:
    before = lesson.RunNumbers.of(spec_trace(), ar_trace(ms=40.0))  # acceptance 0.75, 4x
    hot = spec_trace({"draft_temperature": 1.5})
    said = lesson.temperature_statement(hot, ar_trace(ms=25.0), before)
    assert "draft temperature 1.5" in said and "1 rejections and 1 resamples" in said
    assert "acceptance stayed at 0.75" in said and "speedup fell from 4.00x to 2.50x" in said
    assert "distributed as the target's at temperature 0.7 and top-p 0.9" in said
    alone = lesson.temperature_statement(hot, ar_trace(), None)
    assert "Against step 1" not in alone and "Acceptance 0.75" in alone and "2.50x" in alone
    other_prompt = lesson.RunNumbers.of(spec_trace(), ar_trace())
    other_prompt = lesson.RunNumbers(**{**other_prompt.__dict__, "key": ("other",)})
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


def test_the_greedy_statement_says_equal_or_where_they_part() -> None:
    spec = spec_trace({"greedy": True})
    same = lesson.greedy_statement(spec, ar_trace())
    assert "Equal" in same and "all 5 tokens" in same and "target: float32" in same
    parted = lesson.greedy_statement(spec, ar_trace(ids=[1, 3, 9, 5, 6]))
    assert "part at token 2" in parted and "the first 2 are equal" in parted
    assert "&#x27;D&#x27;" in parted and "&lt;9&gt;" in parted  # escaped token texts
    shorter = lesson.greedy_statement(spec, ar_trace(ids=[1, 3, 4]))
    assert "first 3 tokens are equal" in shorter


def row(gamma: int, measured: float, expected: float, predicted: float | None) -> dict:
    return {
        "gamma": gamma,
        "temperature": 0.7,
        "alpha": 0.8,
        "match_alpha": 0.6,
        "c": 0.1,
        "tokens_per_call": 2.0,
        "measured_speedup": measured,
        "expected_speedup": expected,
        "predicted_speedup": predicted,
    }


def test_the_sweep_statement() -> None:
    rows = [
        row(8, 1.1, 2.0, 1.2),
        row(1, 1.3, 1.6, 1.4),
        row(2, 1.5, 1.9, 1.6),
        row(4, 1.4, 2.2, 1.5),
    ]
    said = lesson.sweep_statement(rows)
    assert "gamma 1: 1.30x, gamma 2: 1.50x, gamma 4: 1.40x, gamma 8: 1.10x" in said
    assert "best gamma 2</b> (1.50x)" in said
    # Leviathan at alpha 0.8, c 0.1: the best gamma over 1..32
    from specviz import metrics

    best = metrics.best_gamma(0.8, 0.1)
    assert f"best gamma at <b>{best}</b>" in said and "alpha 0.800 and c 0.10" in said
    lev = ", ".join(f"{metrics.expected_speedup(0.8, g, 0.1):.2f}x" for g in (1, 2, 4, 8))
    assert f"expects {lev}" in said
    assert "refined prediction" in said and "1.40x, 1.60x, 1.50x, 1.20x" in said
    assert "(best of these: gamma 2)" in said and "wasted" in said
    no_refined = lesson.sweep_statement([row(1, 1.3, 1.6, None)])
    assert "refined" not in no_refined
    with pytest.raises(ValueError, match="no cell"):
        lesson.sweep_statement([])


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
    """A draft close to its target: mostly accepted until it samples hotter."""
    from tests.tiny import close_pair

    return close_pair()


@pytest.fixture()
def ctx(close):
    return AppContext(lambda pair, dtype: close, LIMITS)


def take(ctx, session, state: Lesson, index: int, prompt: str = "1 2 3") -> list[dict]:
    state.index = index
    form = Form(prompt=prompt, pair="tiny")
    return list(lesson_panel.lesson_updates(session, state, form, ctx))


def test_steps_one_to_four_on_the_tiny_pair(ctx, one_thread) -> None:
    session, state = new_session(), Lesson()
    frames = take(ctx, session, state, 0)
    assert frames[0]["compare"] is True and frames[0]["own_draft_temperature"] is False
    assert frames[0]["max_new_tokens"] == 64  # within the deployment's limit
    said = frames[-1]["lesson_said"]
    assert f"{len(session.spec.token_ids)} tokens from {len(session.spec.rounds)}" in said
    assert state.first is not None and "Speedup" in said

    frames = take(ctx, session, state, 1)
    assert frames[0]["draft_temperature"] == 1.5 and frames[0]["own_draft_temperature"]
    assert session.spec.settings.draft_temperature == 1.5
    assert lesson.status_counts(session.spec)["rejected"] > 0  # rejections appear
    said = frames[-1]["lesson_said"]
    assert "Against step 1's run, acceptance fell" in said

    spec = session.spec
    frames = take(ctx, session, state, 2)
    assert session.spec is spec and len(frames) == 1  # no model call: the stored run
    out = frames[0]
    assert "rejected: u =" in html.unescape(out["verdict"]) and "u = " in out["lesson_said"]
    r, pos, _ = lesson.first_rejection(spec)
    assert out["insp_round"] == r.index + 1 and out["insp_pos"] == pos

    frames = take(ctx, session, state, 3)
    assert frames[0]["greedy"] is True
    assert session.spec.token_ids == session.ar.token_ids
    assert "Equal" in frames[-1]["lesson_said"]


def test_step_three_runs_step_two_first_without_a_rejection(ctx, one_thread) -> None:
    session, state = new_session(), Lesson()
    frames = take(ctx, session, state, 2)
    assert frames[0]["own_draft_temperature"] and frames[0]["draft_temperature"] == 1.5
    assert "Round " in frames[-1]["lesson_said"] and "verdict" in frames[-1]


def test_step_five_sweeps_and_step_six_checks(ctx, one_thread) -> None:
    session, state = new_session(), Lesson()
    frames = take(ctx, session, state, 4)
    chosen = next(f for f in frames if "sweep_gammas" in f)  # the sweep's handler shows them
    assert chosen["sweep_gammas"] == [1, 2, 4, 8] and chosen["sweep_reps"] == 1
    said = frames[-1]["lesson_said"]
    assert "Measured: gamma 1:" in said and "gamma 8:" in said and "Leviathan" in said
    assert "refined prediction" in said

    from tests.tiny import tiny_pair

    pair = tiny_pair(vocab=8, target_seed=0, draft_seed=2)  # first-position overlap ~0.4
    frames = take(AppContext(lambda p, d: pair, LIMITS), session, state, 5, prompt="1 2")
    said = frames[-1]["lesson_said"]
    assert "resample-from-p the check <b>fails</b>" in said, said
    assert "exact-match verification it <b>passes</b>" in said, said
    assert "FAIL" in frames[-1]["check_summary"] and "PASS" in frames[-1]["check_summary"]
    second = next(i for i, f in enumerate(frames) if f.get("verification") == "exact-match")
    assert [f["check_rule"] for f in frames if "check_rule" in f] == [
        "resample-from-p",
        "rejection",
    ]
    assert next(i for i, f in enumerate(frames) if f.get("check_rule") == "rejection") > second


def test_bad_input_is_one_line_in_the_panel(ctx) -> None:
    session, state = new_session(), Lesson()
    frames = take(ctx, session, state, 0, prompt="   ")
    said = frames[-1]["lesson_said"]
    assert "prompt is empty" in said and "sv-status-error" in said
    assert frames[-1]["status"] == said and 0 not in state.said
