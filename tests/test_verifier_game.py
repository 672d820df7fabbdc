"""Play the verifier: the game's state on hand-built rounds with known p, q and u (the
reveals, the verdicts, what replaced a rejected draft, the score), the keep probability of
each verification against the decision the engine's own verification functions make when
run many times, and the handlers of specviz.ui.verifier_tab on the tiny pair."""

from __future__ import annotations

import html
import math

import gradio as gr
import pytest
import torch

from specviz import lesson
from specviz.config import Limits
from specviz.lesson import STEPS, Lesson, PlayAction
from specviz.sampling import draw
from specviz.trace import Added, Drafted, Round, Stats, Trace
from specviz.ui import lesson_panel, verifier_tab
from specviz.ui.context import AppContext
from specviz.ui.errors import user_errors
from specviz.ui.state import Form, new_session
from specviz.verify.exact_match import ExactMatch
from specviz.verify.rejection import Rejection
from specviz.views import verifier_game as vg
from tests.tiny import close_pair

# --- hand-built rounds ---------------------------------------------------------------


def drafted(text: str, status: str, p: float, q: float, u: float | None, **kw) -> Drafted:
    return Drafted(
        id=kw.pop("id", len(text)),
        text=text,
        p=p,
        q=q,
        accept_prob=kw.pop("accept_prob", min(1.0, p / q)),
        u=u,
        status=status,
        overlap=0.7,
        top=[],
        **kw,
    )


def a_round(index: int, start: int, drafts: list[Drafted], added: Added | None) -> Round:
    return Round(index, start, len(drafts), drafts, added, 1.0, 2.0, 0.1 * (index + 1))


def trace_of(rounds: list[Round], settings: dict | None = None) -> Trace:
    texts = [t for r in rounds for t in [d.text for d in r.verified if d.status == "accepted"]]
    return Trace(
        method="spec",
        prompt="Once upon a time",
        prompt_ids=[1, 2, 3],
        settings={"temperature": 0.7, "verification": "rejection", **(settings or {})},
        models={},
        token_texts=["tok"] * sum(r.emitted for r in rounds),
        text="".join(texts),
        rounds=rounds,
        stats=Stats(),
    )


def rejection_trace() -> Trace:
    """Round 1: a bonus after both drafts kept. Round 2: <b> kept (a = 1, u 0.70), "&"
    kept (a = 0.6, u 0.20), "z" rejected (a = 0.25, u 0.90), "w" discarded; the residual
    gave "<i>"."""
    bonus = Added(9, "end", "bonus", 0.4, 0.4, [])
    first = a_round(
        0,
        0,
        [drafted("A", "accepted", 0.5, 0.5, 0.3), drafted("B", "accepted", 0.2, 0.1, 0.9)],
        bonus,
    )
    second = a_round(
        1,
        3,
        [
            drafted("<b>", "accepted", 0.6, 0.4, 0.7),
            drafted("&", "accepted", 0.3, 0.5, 0.2),
            drafted("z", "rejected", 0.1, 0.4, 0.9),
            drafted("w", "discarded", 0.2, 0.3, None),
        ],
        Added(7, "<i>", "resampled", 0.3, 0.5, []),
    )
    return trace_of([first, second])


def test_a_round_played_through_reveals_in_order_and_scores() -> None:
    game = vg.deal(rejection_trace(), None)
    assert game.index == 1  # the first round with a rejection
    assert [d.text for d in game.drafts] == ["<b>", "&", "z"]  # the discarded is not played
    board = vg.board_html(game)
    # before a prediction: p and q shown, u, a(x) and the verdict hidden
    assert 'data-phase="guess"' in board and "0.60" in board and "0.40" in board
    assert "u = " not in board and "Kept" not in board and "sv-play-zone" not in board
    assert "&lt;b&gt;" in board and "<b><b>" not in board  # the token text is escaped

    nudged = game.advance()  # Next before a prediction only says what to do
    assert nudged.phase == "guess" and "First your prediction" in vg.board_html(nudged)

    game = game.say(0.95)  # a(x) = min(1, 0.6/0.4) = 1: within 0.1
    board = html.unescape(vg.board_html(game))
    assert game.phase == "drawn" and "u = 0.700" in board
    assert "a(x) = min(1, p/q) = min(1, 1.50) = 1.00" in board and "Kept" not in board
    assert game.say(0.1).guesses == game.guesses  # the prediction is locked
    game = game.advance()
    board = html.unescape(vg.board_html(game))
    assert game.phase == "verdict" and "Kept: u < a(x)." in board and "Score 1 of 1" in board

    game = game.advance().call(True)  # "&": a = 0.6, u 0.2: kept, the call is right
    assert "a(x) = min(1, p/q) = min(1, 0.60) = 0.60" in html.unescape(vg.board_html(game))
    game = game.advance().advance()
    assert game.at == 2 and game.phase == "guess"

    game = game.say(0.5)  # "z": a = 0.25, u 0.9: rejected; 0.5 is off by 0.25
    game = game.advance()
    board = html.unescape(vg.board_html(game))
    assert "Rejected: u ≥ a(x)." in board
    assert "the round emits '<i>', drawn from the residual norm(max(0, p − q))" in board
    assert "probability 0.50 there" in board and "1 later draft(s) are discarded" in board
    score = game.score()
    assert (score.points, score.played, score.numbers, score.close) == (2, 3, 2, 1)
    assert (score.calls, score.calls_right) == (1, 1)
    assert math.isclose(score.best_calls, 0.6)  # max(0.6, 0.4) for the one call
    line = score.line()
    assert "Score 2 of 3: 1 of 2 numbers within 0.1 of a(x)" in line
    assert "1 of 1 calls matched the verdict" in line and "0.60 right on average" in line

    game = game.advance()
    board = html.unescape(vg.board_html(game))
    assert game.phase == "done" and "sv-play-final" in board
    assert "2 of 3 tested draft(s) kept, then the resampled token '<i>'" in board
    assert board.count("<tr>") == 4  # the header and one row per played draft
    assert "✓" in board and "✗" in board
    nxt = game.advance()  # once done, Next deals the next round (after the last: the first)
    assert nxt.index == 0 and nxt.phase == "guess" and nxt.guesses == ()


def test_a_full_accept_reveals_the_bonus_and_a_call_against_the_verdict() -> None:
    game = vg.deal(rejection_trace(), 1)
    game = game.call(False)  # "A": a = 1, kept; "likely rejected" is wrong
    game = game.advance()
    assert "Kept" in html.unescape(vg.board_html(game)) and game.score().points == 0
    game = game.advance().say(1)  # "B": p/q = 2, a = 1
    game = game.advance()
    board = html.unescape(vg.board_html(game))
    assert "Every draft kept: the same target call adds the bonus 'end', drawn from p" in board
    assert game.score().line().startswith("Score 1 of 2")


def test_exact_match_reveals_the_targets_sample_and_keeps_with_p() -> None:
    drafts = [
        drafted("a", "accepted", 0.7, 0.5, None, target_sample=3, target_text="a"),
        drafted("b", "rejected", 0.2, 0.6, None, target_sample=5, target_text="c"),
    ]
    rnd = a_round(0, 0, drafts, Added(5, "c", "resampled", 0.5, 0.5, []))
    game = vg.deal(trace_of([rnd], {"verification": "exact-match"}), None)
    game = game.say(0.7)
    board = html.unescape(vg.board_html(game))
    assert "The target sampled 'a' from p; a(x) = p(x) = 0.70." in board
    game = game.advance().advance().say(0.3)  # a = p = 0.2: within 0.1
    game = game.advance()
    board = html.unescape(vg.board_html(game))
    assert "Rejected: the sample is not x." in board
    assert "the round emits 'c', drawn from the target's own sample y ~ p" in board
    assert game.score().points == 2


def test_dealing_refuses_what_cannot_be_played() -> None:
    with pytest.raises(ValueError, match="no speculative run yet"):
        vg.deal(None)
    trace = rejection_trace()
    with pytest.raises(ValueError, match="round 5 does not exist: this run has rounds 1 to 2"):
        vg.deal(trace, 5)
    empty = a_round(0, 0, [], Added(1, "x", "bonus", 0.5, 0.5, []))
    with pytest.raises(ValueError, match="round 1 verified no draft"):
        vg.deal(trace_of([empty, *trace.rounds]), 1)
    with pytest.raises(ValueError, match="this run verified no draft"):
        vg.deal(trace_of([empty]))
    with pytest.raises(ValueError, match="verification must be one of .*got 'ouija'"):
        vg.deal(trace_of(trace.rounds, {"verification": "ouija"}))
    game = vg.deal(trace)
    for bad, message in ((None, "type a keep probability"), (1.5, "from 0 to 1, got 1.5")):
        with pytest.raises(ValueError, match=message):
            game.say(bad)
    with pytest.raises(ValueError, match="must be a number"):
        game.say("lots")


# --- the keep probability against the engine's own decisions ---------------------------

P = torch.tensor([0.05, 0.5, 0.15, 0.3])  # the target's row
Q = torch.tensor([0.4, 0.3, 0.2, 0.1])  # the draft's row
N = 3000  # decisions simulated per token


def frequency(kept: torch.Tensor) -> float:
    return float(kept.double().mean())


@pytest.mark.parametrize("x", range(4))
def test_the_rejection_rules_keep_probability_is_how_often_verify_keeps(x: int) -> None:
    u = torch.rand(N, generator=torch.Generator().manual_seed(x))
    rows, drafts = P[None].repeat(2, 1), torch.tensor([x])
    rule = Rejection()
    kept = torch.tensor(
        [rule.decide(rows, Q[None], drafts, u[i : i + 1]).n_accepted for i in range(N)]
    )
    d = drafted("x", "accepted", float(P[x]), float(Q[x]), 0.5)
    a = vg.keep_probability(d, {"verification": "rejection"})
    assert a == pytest.approx(min(1.0, float(P[x] / Q[x])))
    # the rule's decision over N uniforms keeps x that often (4 standard errors)
    assert abs(frequency(kept) - a) <= 4 * math.sqrt(a * (1 - a) / N) + 1e-9


@pytest.mark.parametrize("x", range(4))
def test_exact_matchs_keep_probability_is_how_often_the_targets_sample_is_x(x: int) -> None:
    gen = torch.Generator().manual_seed(10 + x)
    samples = torch.stack([draw(P, gen, False) for _ in range(N)]).reshape(-1)
    rows, drafts = P[None].repeat(2, 1), torch.tensor([x])
    kept = torch.tensor(
        [
            ExactMatch().decide(rows, Q[None], drafts, torch.stack([s, s])).n_accepted
            for s in samples
        ]
    )
    d = drafted("x", "accepted", float(P[x]), float(Q[x]), None, target_sample=x)
    a = vg.keep_probability(d, {"verification": "exact-match"})
    assert a == pytest.approx(float(P[x]))
    assert abs(frequency(kept) - a) <= 4 * math.sqrt(a * (1 - a) / N) + 1e-9


def test_greedy_keeps_with_probability_one_or_zero() -> None:
    kept = drafted("x", "accepted", 1.0, 1.0, None)
    lost = drafted("y", "rejected", 0.0, 1.0, None)
    assert vg.keep_probability(kept, {"greedy": True}) == 1.0
    assert vg.keep_probability(lost, {"greedy": True}) == 0.0


def typical_keeps(p: torch.Tensor, x: int, threshold: float = 0.09, alpha: float = 0.3) -> bool:
    """Typical acceptance computed from the whole row: p(x) > min(threshold, alpha e^-H)."""
    h = float(-(p * torch.log(p + 1e-5)).sum())
    return float(p[x]) > min(threshold, alpha * math.exp(-h))


@pytest.mark.parametrize(("verification", "field"), [("typical", "0.09"), ("top-k-match", "10")])
def test_lossy_rules_keep_by_their_threshold(verification: str, field: str) -> None:
    row = torch.tensor([0.9, 0.06, 0.04])
    for x in range(3):
        decided = typical_keeps(row, x) if verification == "typical" else True
        d = drafted("x", "accepted" if decided else "rejected", float(row[x]), 0.3, None)
        d.accept_prob = 1.0 if decided else 0.0  # what a threshold rule records
        assert vg.keep_probability(d, {"verification": verification}) == float(decided)
    rule = vg.keep_test({"verification": verification})
    assert rule.lossy and rule.draw is None and "(lossy)" in rule.label
    assert field in rule.sentence({"verification": verification})
    top3 = {"verification": "top-k-match", "match_top_k": 3}
    assert "3 most likely" in vg.keep_test(top3).sentence(top3)
    assert not any(vg.keep_test({"verification": n}).lossy for n in ("rejection", "exact-match"))


# --- the handlers, on the tiny pair --------------------------------------------------

LIMITS = Limits(max_new_tokens=64)


@pytest.fixture()
def ctx(tiny):
    return AppContext(lambda pair, dtype: tiny, LIMITS)


def run(ctx, session, **changes) -> None:
    from specviz.ui.live import run_updates

    base = {"prompt": "1 2 3", "pair": "tiny", "max_new_tokens": 24, "gamma": 3}
    list(run_updates(session, Form(**{**base, **changes}), ctx))


def test_the_handlers_play_a_round_of_the_sessions_run(ctx, one_thread) -> None:
    session = new_session()
    with pytest.raises(ValueError, match="no speculative run yet"):
        verifier_tab.deal_changes(session, None)
    run(ctx, session, own_draft_temperature=True, draft_temperature=3.0, compare=False)
    out = verifier_tab.deal_changes(session, 0)  # the empty box sends 0
    game = out["play_state"]
    assert game.trace is session.spec and out["play_round"] == game.index + 1
    assert out["play_view"].visible is True and out["insp_view"].visible is False
    assert out["play_mode"] == verifier_tab.PLAY and out["play_guess"] is None
    assert out["play_kept"].interactive and 'data-phase="guess"' in out["play_board"]
    veiled = [verifier_tab.VEIL_CLASS]  # the token view, while a draft is decided
    assert out["token_row"].elem_classes == veiled
    for i, d in enumerate(game.drafts):
        a = vg.keep_probability(d, session.spec.settings)
        out = (
            verifier_tab.say_changes(out["play_state"], a)
            if i % 2
            else verifier_tab.call_changes(out["play_state"], a >= 0.5)
        )
        assert out["play_next"].value == "Show the verdict (N)" and not out["play_kept"].interactive
        assert out["token_row"].elem_classes == veiled
        assert f"u = {d.u:.3f}" in html.unescape(out["play_board"])
        out = verifier_tab.next_changes(out["play_state"])
        verdict = "Kept" if d.status == "accepted" else "Rejected"
        assert out["play_state"].phase == "verdict" and verdict in out["play_board"]
        last = i == len(game.drafts) - 1
        assert out["play_next"].value == ("Finish the round (N)" if last else "Next draft (N)")
        out = verifier_tab.next_changes(out["play_state"])
    game = out["play_state"]
    assert game.phase == "done" and out["play_next"].value == "Next round (N)"
    assert out["token_row"].elem_classes == []  # the round decided: the colours are shown
    numbers = len(game.drafts) // 2
    assert game.score().numbers == numbers and game.score().close == numbers  # exact answers
    assert f'data-played="{len(game.drafts)}"' in out["play_board"]
    chosen = verifier_tab.deal_changes(session, vg.playable_rounds(session.spec)[-1] + 1)
    assert chosen["play_state"].index == vg.playable_rounds(session.spec)[-1]
    mode = verifier_tab.mode_changes(verifier_tab.INSPECT, chosen["play_state"])
    assert mode["insp_view"].visible and not mode["play_view"].visible
    assert chosen["token_row"].elem_classes == veiled and mode["token_row"].elem_classes == []
    back = verifier_tab.mode_changes(verifier_tab.PLAY, chosen["play_state"])
    assert back["token_row"].elem_classes == veiled  # the game on the board, shown again
    assert verifier_tab.mode_changes(verifier_tab.PLAY, game)["token_row"].elem_classes == []


def test_the_handlers_refuse_in_one_line(ctx, one_thread) -> None:
    say = user_errors(verifier_tab.say_changes)
    with pytest.raises(gr.Error, match="deal a round first"):
        say(None, 0.5)
    session = new_session()
    run(ctx, session, compare=False)
    game = verifier_tab.deal_changes(session, None)["play_state"]
    with pytest.raises(gr.Error) as err:
        say(game, 2)
    assert "from 0 to 1" in err.value.message and "\n" not in err.value.message
    with pytest.raises(gr.Error, match="does not exist"):
        user_errors(verifier_tab.deal_changes)(session, 999)


def test_the_lesson_step_deals_a_round_of_the_sessions_run(one_thread) -> None:
    # flat enough that at the lesson's temperature 0.7 and top-p 0.9 some p(x)/q(x) lies
    # strictly between 0 and 1: there a draw decides
    smooth = close_pair(sharpness=0.5)
    ctx = AppContext(lambda pair, dtype: smooth, LIMITS)
    session, state = new_session(), Lesson()
    state.index = next(i for i, s in enumerate(STEPS) if isinstance(s.action, PlayAction))
    form = Form(prompt="1 2 3", pair="tiny")
    frames = list(lesson_panel.lesson_updates(session, state, form, ctx))
    assert session.spec is not None and session.spec.settings.draft_temperature == 1.5
    dealt = next((f for f in frames if "play_state" in f), None)
    assert dealt is not None, frames[-1].get("lesson_said")
    assert dealt["tabs"].selected == "insp" and dealt["play_view"].visible
    game = dealt["play_state"]
    assert any(vg.draw_decided(d, game.trace.settings) for d in game.round.verified)
    assert "on the board in the Decision tab" in frames[-1]["lesson_said"]
    spec = session.spec  # a second press plays the stored run: no model call
    frames = list(lesson_panel.lesson_updates(session, state, form, ctx))
    assert session.spec is spec and len(frames) == 1


def test_the_lesson_step_says_so_when_no_draw_decides(ctx, one_thread) -> None:
    """The sharp tiny pair at the lesson's top-p: p is one-hot, every a(x) is 0 or 1, so no
    round has anything to guess. The step runs a bounded number of seeds, then says so."""
    session, state = new_session(), Lesson()
    state.index = next(i for i, s in enumerate(STEPS) if isinstance(s.action, PlayAction))
    frames = list(lesson_panel.lesson_updates(session, state, Form(prompt="1 2 3"), ctx))
    said = frames[-1]["lesson_said"]
    seeds = ", ".join(map(str, range(lesson.TRIES)))
    assert f"None of the runs with seeds {seeds} had a round where a draw decided" in said
    assert len(session.log.rows) == lesson.TRIES and not any("play_state" in f for f in frames)
