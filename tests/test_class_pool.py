"""The class plays the verifier together, without a browser: twenty visitors of one shared
run's link each call the draft the lecturer shows, through the game's own handlers; their
answers are pooled on the server per link and shown on the lecturer's board, before the
draw as a count and after it as the split against the true a(x) and then the verdict. No
model call; a page opened without a link pools nothing; the pool is bounded per link and in
links; a visitor answering again replaces their answer."""

from __future__ import annotations

import re

import pytest

from specviz.classpool import ClassPool
from specviz.config import Settings
from specviz.engine import generate
from specviz.modelthread import MODEL_THREAD
from specviz.sharestore import SharedRuns
from specviz.ui import share, verifier_tab
from specviz.ui.state import Form, Session


@pytest.fixture(scope="module")
def run_id(tiny, one_thread, tmp_path_factory):
    """A shared run of the tiny pair with a rejection a draw decided."""
    settings = Settings(max_new_tokens=16, gamma=3, seed=3, temperature=1.0)
    spec = generate(tiny, "1 2 3", settings)
    ar = generate(tiny, "1 2 3", settings.with_(method="ar"))
    store = SharedRuns(tmp_path_factory.mktemp("class"))
    return store, store.save(spec, ar, imported=False)


def opened(store: SharedRuns, run: str) -> tuple[Session, object]:
    """A visitor's page opened on the link, a round dealt (the first with a rejection)."""
    session = Session()
    share.open_page(store, session, Form(), run)
    return session, verifier_tab.deal_changes(session, 0)["play_state"]


def numbers(html: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r'data-(answers|kept|rejected)="(\d+)"', html)}


def test_twenty_answers_on_one_link_are_pooled_and_shown(run_id) -> None:
    store, run = run_id
    calls = MODEL_THREAD.calls
    lecturer, board = opened(store, run)
    first = verifier_tab.class_changes(board, lecturer)
    assert first["play_class_show"].visible and numbers(first["play_class"])["answers"] == 0
    said = [i % 4 != 0 for i in range(20)]  # 15 kept, 5 rejected
    for kept in said:
        student, game = opened(store, run)
        out = verifier_tab.call_changes(game, kept, student)
        assert out["play_state"].phase == "drawn"  # the student sees the draw, and the class
    again, game = opened(store, run)
    shown = verifier_tab.shown_class_changes(board, lecturer)["play_class"]
    assert numbers(shown)["answers"] == 20 and "so far" in shown  # no split before the draw
    assert "kept," not in shown
    out = verifier_tab.call_changes(board, True, lecturer)  # the lecturer's own call: 21
    revealed = out["play_class"]
    assert numbers(revealed) == {"answers": 21, "kept": 16, "rejected": 5}
    a = board.keep(board.at)
    assert f"{a:.3f}" in revealed and "16 called it kept, 5 rejected (76% kept)" in revealed
    verdict = verifier_tab.next_changes(out["play_state"], lecturer)["play_class"]
    outcome = "kept" if board.kept(board.at) else "rejected"
    assert f"The draw {outcome} it." in verdict
    assert MODEL_THREAD.calls == calls


def test_a_page_without_a_link_pools_nothing_and_an_answer_again_replaces(run_id) -> None:
    store, run = run_id
    spec, ar = store.load(run).spec, store.load(run).ar
    own = Session(spec=spec, ar=ar)
    game = verifier_tab.deal_changes(own, 0)["play_state"]
    out = verifier_tab.call_changes(game, True, own)
    assert out["play_class"] == "" and not out["play_class_show"].visible
    student, game = opened(store, run)
    key = verifier_tab.draft_key(game)
    before = verifier_tab.POOL.tally(run, key).answers
    verifier_tab.call_changes(game, True, student)
    redealt = verifier_tab.deal_changes(student, 0)["play_state"]
    verifier_tab.call_changes(redealt, False, student)  # the same visitor, the same draft
    after = verifier_tab.POOL.tally(run, key)
    assert after.answers == before + 1
    verifier_tab.say_changes(verifier_tab.deal_changes(student, 0)["play_state"], 0.25, student)
    assert verifier_tab.POOL.tally(run, key).mean_number == pytest.approx(0.25)


def test_the_pool_is_bounded() -> None:
    pool = ClassPool(max_links=2, max_answers=3)
    draft = ("run", 0, 0)
    for voter in "abc":
        pool.answer("one", draft, voter, True)
    pool.answer("one", draft, "a", False)  # an answer again is no new answer
    with pytest.raises(ValueError, match="3 answers, as many as this server pools per link"):
        pool.answer("one", draft, "d", True)
    assert pool.tally("one", draft).kept == 2 and pool.tally("one", draft).rejected == 1
    pool.answer("two", draft, "a", True)
    pool.answer("three", draft, "a", True)  # the least recently answered link goes
    assert pool.links() == 2 and pool.tally("one", draft).answers == 0
    with pytest.raises(ValueError, match="from 0 to 1"):
        pool.answer("two", draft, "b", 1.5)
