"""The views across runs on the tiny pair: the experiment log and calibration that a Run
updates, reloading a logged run, the race replay, overlap shading, Step's narration and the
measured sweep. Handlers take an AppContext, as in tests/test_ui.py."""

from __future__ import annotations

import copy
import html
import io
import threading

import gradio as gr
import pandas as pd
import pytest

from specviz import ui
from specviz.analysis.runlog import LOG_COLUMNS
from specviz.config import Limits
from specviz.trace import Trace
from specviz.views.markup import esc

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


def verified_with_u(trace: Trace) -> int:
    return sum(d.status != "discarded" and d.u is not None for r in trace.rounds for d in r.drafted)


def shaded(tokens: str) -> int:
    return tokens.count("data-overlap=")


def test_each_run_adds_a_log_row_and_its_decisions_to_the_calibration(ctx) -> None:
    session = ui.new_session()
    run(session, ctx, seed=1)
    first = session.spec
    frames = run(session, ctx, seed=2, compare=False, own_draft_temperature=True)
    final = frames[-1]
    table = final["log_table"]
    assert list(table.columns) == list(LOG_COLUMNS) and list(table["run"]) == [1, 2]
    assert list(table["method"]) == ["spec + ar", "spec"]
    assert table["speedup"][0] != "" and table["speedup"][1] == ""  # run 2 had no baseline
    assert "draft_temperature=1.5" in table["changed"][1]
    assert isinstance(final["log_pick"], gr.Dropdown) and final["log_pick"].value == 2
    # the calibration counts exactly the verified drafts that drew a u, over both runs
    expected = verified_with_u(first) + verified_with_u(session.spec)
    assert expected > 0 and session.calibration.drafts.total == expected
    assert f"{expected} verified drafts with a drawn u over 2 run(s)" in final["calib_summary"]
    assert len(final["calib_plot"].data) >= 2  # the diagonal and the drafts' bins
    assert [t.name for t in final["log_chart"].data] == ["speedup (x)", "acceptance rate"]
    # a Step does not log: only Run does
    ui.step_update(session, form(), ctx)
    assert len(session.log.rows) == 2


def test_a_logged_run_loads_back_into_every_view(ctx) -> None:
    session = ui.new_session()
    first_view = run(session, ctx, seed=1)[-1]
    first = session.spec
    second_view = run(session, ctx, seed=2, prompt="4 5", temperature=2.0)[-1]
    assert second_view["tokens"] != first_view["tokens"]
    out = ui.load_run(session, 1)
    assert session.spec is first and session.ar.method == "ar"
    assert out["tokens"] == first_view["tokens"] and out["rounds"] == first_view["rounds"]
    assert "run 1 loaded" in out["status"] and "verdict" in out
    with pytest.raises(ValueError, match="run 7 is not in the log"):
        ui.load_run(session, 7)
    with pytest.raises(ValueError, match="choose a run"):
        ui.load_run(session, None)


def test_the_log_exports_as_csv_and_survives_a_session_copy(ctx) -> None:
    with pytest.raises(ValueError, match="nothing logged yet"):
        ui.log_file(ui.new_session())
    session = ui.new_session()
    run(session, ctx, seed=1, max_new_tokens=8)
    with open(ui.log_file(session), encoding="utf-8") as f:
        frame = pd.read_csv(io.StringIO(f.read()))
    assert list(frame.columns) == list(LOG_COLUMNS) and list(frame["run"]) == [1]
    assert frame["new_tokens"][0] == 8
    clone = copy.deepcopy(session)
    assert clone.log.rows == session.log.rows and clone.log.traces(1)[0] is clone.spec
    assert clone.calibration.drafts.n == session.calibration.drafts.n
    run(clone, ctx, seed=2, max_new_tokens=8)
    assert len(clone.log.rows) == 2 and len(session.log.rows) == 1


def test_race_replay_of_a_compared_run(ctx) -> None:
    session = ui.new_session()
    final = run(session, ctx, seed=1)[-1]
    assert "Replay race" in final["race"]
    out = ui.race_update(session, 2.0)["race"]
    assert 'data-speed="2"' in out and "Replay of measured timings at 2x" in out
    assert f'data-method="spec" data-shown="{len(session.spec.token_ids)}"' in out
    assert f'data-method="ar" data-shown="{len(session.ar.token_ids)}"' in out
    # token texts such as "<3>" are escaped: no tag of theirs reaches the page
    assert "&lt;" in out and not any(f"<{i}>" in out for i in range(8))
    assert ui.race_update(session, 2.0)["race"] != out  # a new replay restarts
    with pytest.raises(ValueError, match="speed"):
        ui.race_update(session, 0)
    final = run(session, ctx, seed=1, compare=False)[-1]
    assert "needs a compared run" in final["race"]
    with pytest.raises(ValueError, match="needs a compared run"):
        ui.race_update(session, 1.0)


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
        assert f"<b>Round {n}</b>" in text and "One target call scored" in text
        assert f"step mode: round {n} done" in out["status"] and out["insp_round"] == n
        assert text.count("<li>") >= 3  # proposal, scoring, at least one decision or added
        for d in r.drafted:  # token texts such as "<3>" appear escaped only
            assert esc(repr(d.text)) in text and repr(d.text) not in text
    first = next(ui.run_updates(session, form(), ctx))  # Run puts the hint back
    assert "Press Step" in first["narration"]


def test_sweep_streams_its_rows_on_the_model_thread(tiny, ctx) -> None:
    threads: set[str] = set()
    hook = tiny.target.model.register_forward_pre_hook(
        lambda *_: threads.add(threading.current_thread().name)
    )
    session = ui.new_session()
    try:
        frames = list(ui.sweep_updates(session, form(max_new_tokens=6), ctx, [2, 1], "", 1))
    finally:
        hook.remove()
    assert threads == {"specviz-model"}
    assert any("<progress" in f.get("sweep_status", "") for f in frames)
    final = frames[-1]
    assert "sweep done: 3 runs, 2 cells" in final["sweep_status"]  # one baseline, two gammas
    names = [t.name for t in final["sweep_plot"].data]
    assert any("measured" in n for n in names) and any("formula" in n for n in names)
    measured = next(t for t in final["sweep_plot"].data if "measured" in t.name)
    assert list(measured.x) == [1, 2]
    assert final["sweep_table"].count("\n") == 2  # a header and one line per gamma
    assert session.spec is None and not session.log.rows  # a sweep is not a logged run


def test_sweep_stop_ends_it_after_the_run_in_progress(tiny, ctx) -> None:
    session = ui.new_session()

    def press_stop(*_) -> None:  # at the first target call, in the warm-up
        ui.stop_sweep(session)

    hook = tiny.target.model.register_forward_pre_hook(press_stop)
    try:
        frames = list(ui.sweep_updates(session, form(max_new_tokens=6), ctx, [1, 2], "", 2))
    finally:
        hook.remove()
    assert "sweep stopped after 1 of 6 runs" in frames[-1]["sweep_status"]
    assert frames[-1]["sweep_table"] == ""


@pytest.mark.parametrize(
    ("choices", "message"),
    [
        (([], "", 1), "gammas is empty"),
        (([1], "hot", 1), "temperatures: 'hot' is not a number"),
        (([1], "", 9), "repetitions must be in 1..5"),
        (([40], "", 1), "gamma must be in 1..32"),
    ],
)
def test_sweep_refuses_bad_choices_in_one_line(ctx, choices, message) -> None:
    handler = ui.user_errors(ui.sweep_updates)
    with pytest.raises(gr.Error) as err:
        list(handler(ui.new_session(), form(), ctx, *choices))
    shown = html.unescape(err.value.message)
    assert message in shown and "\n" not in shown
    with pytest.raises(gr.Error, match="adaptive gamma off"):
        list(handler(ui.new_session(), form(adaptive_gamma=True), ctx, [1], "", 1))


# --- the page's one mapping of names onto components, and the lesson clicked ahead ------


def built_page(ctx):
    """The page's components by name as the app builds them, around a context."""
    from specviz.config import Deployment
    from specviz.ui import layout

    with gr.Blocks() as demo:
        page, _ = layout.compose(ctx, ["tiny"], Deployment(limits=ctx.limits), demo)
    return page


def test_an_update_names_components_of_the_page_or_skips(ctx) -> None:
    page = built_page(ctx)
    assert page.keyed({}) == gr.skip()  # never an empty dict: gradio takes it as one value
    with pytest.raises(KeyError, match="no component named 'nowhere'"):
        page.keyed({"status": "x", "nowhere": 1})
    out = page.keyed({"status": "s", "gamma": 2, "lesson_said": "l"})
    assert list(out.values()) == ["s", 2, "l"]
    assert list(out) == [
        page.components["status"],
        page.controls["gamma"],
        page.lesson["lesson_said"],
    ]
    # a stream that yields nothing new sends gr.skip(), and is closed when gradio closes it
    closed = threading.Event()

    def handler():
        try:
            yield {}
            yield {"status": "s"}
        finally:
            closed.set()

    event = page.stream(handler)()
    assert next(event) == gr.skip()
    event.close()
    assert closed.is_set()


def test_clicking_ahead_keeps_each_statement_on_its_own_step(tiny) -> None:
    """Step 1's button, Next while it runs, then step 2's button: every update names page
    components, step 1's statement is kept for step 1 and not shown on step 2, and step 2's
    lands on step 2."""
    from specviz.lesson import Lesson
    from specviz.ui import lesson_panel

    ctx = ui.AppContext(lambda pair, dtype: tiny, Limits(max_new_tokens=64))
    page, session, state = built_page(ctx), ui.new_session(), Lesson()
    first = lesson_panel.lesson_updates(session, state, form(), ctx)
    started = next(first)
    assert "step 1: running" in started["lesson_said"]
    lesson_panel.move_update(state, 1)  # Next, while step 1 runs
    rest = list(first)
    assert rest and all("lesson_said" not in out for out in rest)
    assert "target calls" in state.said[0] and 1 not in state.said
    second = list(lesson_panel.lesson_updates(session, state, form(), ctx))
    assert "draft temperature 1.5" in second[-1]["lesson_said"]
    assert "target calls" not in second[-1]["lesson_said"]
    for out in [started, *rest, *second]:
        page.keyed(out)  # raises on a name the page does not have
    assert lesson_panel.move_update(state, -1)["lesson_said"] == lesson_panel.said_html(state)
    assert "target calls" in lesson_panel.said_html(state)


def test_a_press_served_after_next_runs_the_step_it_was_pressed_on(tiny) -> None:
    """Step 1's button pressed while the queue is busy (the page's load), Next before the
    press is served: the press runs step 1, whose statement is kept for step 1 and not
    shown on step 2; the page sends the index shown at the press, which Next keeps."""
    from specviz.lesson import Lesson
    from specviz.ui import lesson_panel

    ctx = ui.AppContext(lambda pair, dtype: tiny, Limits(max_new_tokens=64))
    page, session, state = built_page(ctx), ui.new_session(), Lesson()
    pressed = 0  # the hidden index as the press sent it
    moved = lesson_panel.move_update(state, 1)  # Next, before the press is served
    assert moved["lesson_index"] == state.index == 1
    updates = list(lesson_panel.lesson_updates(session, state, form(), ctx, pressed))
    assert all("lesson_said" not in out for out in updates)  # step 2 is shown
    assert updates[0]["own_draft_temperature"] is False  # step 1's controls, not step 2's
    assert "target calls" in state.said[0] and 1 not in state.said and state.first is not None
    for out in updates:
        page.keyed(out)
    for bad in (-1, len(lesson_panel.STEPS), 1.5, "1", True):
        with pytest.raises(ValueError, match="no lesson step"):
            lesson_panel.pressed_step(state, bad)
    assert lesson_panel.pressed_step(state, 0.0) == 0
    assert lesson_panel.pressed_step(state, None) == state.index  # no index: the step shown


def test_the_step_button_sends_the_step_shown_at_the_press(tiny) -> None:
    demo = ui.build_app(loader=lambda pair, dtype: tiny, pairs=["tiny"])
    by_id = {fn.api_name: fn for fn in demo.fns.values()}
    index = [b for b in demo.blocks.values() if b.elem_id == "sv-lesson-index"]
    assert len(index) == 1 and not index[0].visible
    assert by_id["lesson"].inputs[2] is index[0]
    for elem_id in ("sv-lesson-prev", "sv-lesson-next"):
        (button,) = [b for b in demo.blocks.values() if b.elem_id == elem_id]
        (move,) = [fn for fn in demo.fns.values() if (button._id, "click") in fn.targets]
        assert index[0] in move.outputs  # Previous and Next keep the index in step


def test_an_opening_page_queues_one_event_at_a_time(tiny) -> None:
    """gradio's queue size counts every waiting event: the page's load events must not
    wait in it side by side, or on a loaded machine with a small SPECVIZ_QUEUE_SIZE the
    second is turned away and the page never loads its pair (the models panel shows
    "Error"). One load event is queued; the visitor's state has no load event at all (its
    session store makes it when an event first reads it: tests/test_ui.py)."""
    demo = ui.build_app(loader=lambda pair, dtype: tiny, pairs=["tiny"])
    on_load = [fn for fn in demo.fns.values() if any(t[1] == "load" for t in fn.targets)]
    assert not any(fn.fn is ui.new_session for fn in on_load)
    queued = [fn.name for fn in on_load if fn.queue]
    assert len(queued) == 1, queued
