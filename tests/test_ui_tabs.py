"""The views that live with the token view, on the tiny pair: overlap shading and Step's
round narration. Handlers take an AppContext, as in tests/test_ui.py."""

from __future__ import annotations

import pytest

from specviz import ui
from specviz.config import Limits
from specviz.render import esc

PROMPT = "1 2 3"
LIMITS = Limits()

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture()
def ctx(tiny):
    return ui.AppContext(lambda pair, dtype: tiny, LIMITS)


def form(**changes) -> ui.Form:
    base = {"prompt": PROMPT, "pair": "tiny", "max_new_tokens": 20, "gamma": 3}
    return ui.Form(**{**base, **changes})


def run(session: ui.Session, ctx, **changes) -> list[dict]:
    return list(ui.run_updates(session, form(**changes), ctx))


def shaded(tokens: str) -> int:
    return tokens.count("data-overlap=")


def test_overlap_shading_reaches_live_final_replayed_and_imported_views(
    ctx, tiny, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr("specviz.ui.io_tab.REPLAY_SECONDS", 0.0)  # replay without pauses
    session = ui.new_session()
    run(session, ctx, seed=1, compare=False)
    drafts = sum(d.status != "discarded" for r in session.spec.rounds for d in r.drafted)
    assert drafts > 0 and shaded(ui.final_frame(session, 3)["tokens"]) == 0
    out = ui.shade_update(session, True)
    assert shaded(out["tokens"]) == drafts and "sv-overlap-legend" in out["overlap_legend"]
    assert shaded(ui.final_frame(session, 3)["tokens"]) == drafts
    assert shaded(list(ui.replay_updates(session))[-1]["tokens"]) == drafts
    frames = run(session, ctx, seed=2, compare=False)  # a new run keeps the switch
    live = [f["tokens"] for f in frames[:-1] if "data-status" in f.get("tokens", "")]
    assert live and all(shaded(t) for t in live) and shaded(frames[-1]["tokens"])
    # a minimal trace recorded no overlaps: unshaded, and the legend says why
    from specviz.engine import generate

    minimal = generate(tiny, PROMPT, form().settings(LIMITS).with_(trace_level="minimal"))
    path = tmp_path / "minimal.json"
    path.write_text(minimal.to_json())
    assert shaded(list(ui.import_updates(session, str(path)))[-1]["tokens"]) == 0
    assert "recorded no overlaps" in ui.shade_update(session, True)["overlap_legend"]
    off = ui.shade_update(session, False)
    assert off["overlap_legend"] == "" and shaded(off["tokens"]) == 0


def test_step_narrates_the_round_just_taken(ctx) -> None:
    session = ui.new_session()
    f = form(own_draft_temperature=True, draft_temperature=3.0, gamma=2)
    for n in range(1, 4):
        out = ui.step_update(session, f, ctx)
        r = session.spec.rounds[-1]
        text = out["narration"]
        assert f"Round {n - 1}" in text and "One target call scored" in text
        assert text.count("<li>") >= 3  # proposal, scoring, at least one decision or added
        for d in r.drafted:  # token texts such as "<3>" appear escaped only
            assert esc(repr(d.text)) in text and repr(d.text) not in text
    first = next(ui.run_updates(session, form(), ctx))  # Run puts the hint back
    assert "Press Step" in first["narration"]
