"""specviz.ui.blocks.Blocks sends what gradio's own Blocks sends, for frames that set some
outputs and leave the rest alone, without rebuilding a component for each one left alone;
and its queue, served, looks for work at most every QUEUE_POLL_S seconds while idle."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import gradio as gr
import plotly.graph_objects as go
import pytest
from gradio.state_holder import SessionState

from specviz import ui
from specviz.ui.blocks import QUEUE_POLL_S, SKIP, Blocks


def run_coroutine(coro):
    """The coroutine run to its end on a thread of its own: a browser test's sync API
    leaves an event loop running on this worker's main thread."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def build():
    with Blocks() as demo:
        comps = {
            "html": gr.HTML("start"),
            "number": gr.Number(1),
            "plot": gr.Plot(),
            "pick": gr.Dropdown(["a", "b"], value="a"),
            "memo": gr.State(0),
            "button": gr.Button("go"),
        }
        outputs = list(comps.values())
        comps["button"].click(lambda: None, None, outputs)
    fn = next(iter(demo.fns.values()))
    return demo, fn, comps


def figure() -> go.Figure:
    return go.Figure(go.Bar(x=[1, 2], y=[3, 4]))


FRAMES = {
    "some set": lambda c: {c["html"]: "<b>x</b>", c["number"]: 7},
    "one set": lambda c: {c["plot"]: figure()},
    "a property update": lambda c: {c["pick"]: gr.update(choices=["c"], value="c")},
    "a component as update": lambda c: {c["pick"]: gr.Dropdown(choices=["d"], value="d")},
    "state and skips": lambda c: {c["memo"]: 5, c["number"]: gr.skip()},
    "every output skipped": lambda c: gr.skip(),
    "a list": lambda c: ["y", gr.skip(), gr.skip(), gr.skip(), 3, gr.skip()],
    "nothing skipped": lambda c: ["z", 2, figure(), "b", 4, "go"],
}


@pytest.mark.parametrize("frame", list(FRAMES))
def test_a_frame_is_sent_as_gradio_sends_it(frame: str) -> None:
    demo, fn, comps = build()
    ours_state, theirs_state = SessionState(demo), SessionState(demo)
    ours = run_coroutine(demo.postprocess_data(fn, FRAMES[frame](comps), ours_state))
    theirs = run_coroutine(gr.Blocks.postprocess_data(demo, fn, FRAMES[frame](comps), theirs_state))
    # for a skipped gr.HTML gradio also echoes the update marker as a custom property,
    # {"props": {"__type__": "update"}}, which sets nothing; ours sends the bare marker
    echo = {"props": SKIP, **SKIP}
    assert ours == [SKIP if sent == echo else sent for sent in theirs]
    # the session holds the same state, and the same config for each output the frame
    # set; an output left alone keeps its config (gradio's rebuild of a skipped component
    # drops its value: a skipped Button's label becomes "Run" in the session's config)
    assert ours_state.state_data == theirs_state.state_data
    initial = SessionState(demo).config_values
    for block, sent in zip(fn.outputs, ours, strict=True):
        key = block._id
        if block.stateful:
            continue
        if sent == SKIP:
            assert ours_state.config_values[key] == initial[key], block
        else:
            assert ours_state.config_values[key] == theirs_state.config_values[key], block


def test_an_output_left_alone_builds_no_component(monkeypatch) -> None:
    demo, fn, comps = build()
    built: list[str] = []
    for cls in (gr.HTML, gr.Number, gr.Plot, gr.Dropdown, gr.Button):
        init = cls.__init__

        def counting(self, *a, _init=init, _name=cls.__name__, **k):
            built.append(_name)
            _init(self, *a, **k)

        monkeypatch.setattr(cls, "__init__", counting)
    out = run_coroutine(demo.postprocess_data(fn, {comps["number"]: 3}, SessionState(demo)))
    assert built == []  # gradio's own Blocks builds one per skipped output: four here
    assert out[0] == SKIP and out[2:] == [SKIP, SKIP, None, SKIP]
    run_coroutine(gr.Blocks.postprocess_data(demo, fn, {comps["number"]: 3}, SessionState(demo)))
    assert sorted(built) == ["Button", "Dropdown", "HTML", "Plot"]


def looks_for_work(monkeypatch, demo, seconds: float) -> float:
    """How often a second the served demo's queue looked for an event to start (its loop
    asks len(queue) once a look) over `seconds` of idling."""
    from gradio import queueing

    looks = [0]
    own = queueing.Queue.__len__

    def counted(queue) -> int:
        looks[0] += queue is demo._queue
        return own(queue)

    monkeypatch.setattr(queueing.Queue, "__len__", counted)
    time.sleep(0.3)  # the loop is running
    start, t0 = looks[0], time.perf_counter()
    time.sleep(seconds)
    return (looks[0] - start) / (time.perf_counter() - t0)


def test_an_idle_queue_looks_for_work_every_poll_not_every_millisecond(monkeypatch) -> None:
    """An idle app's queue wakes at most 1 / QUEUE_POLL_S times a second (gradio's own
    waits a millisecond between looks: the same count with its wait put back fails)."""
    with Blocks() as demo:
        gr.HTML("idle")
    assert isinstance(ui.build_app(pairs=["default"], loader=lambda *_: None), Blocks)
    demo.queue(max_size=4).launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:
        assert demo._queue.sleep_when_free == QUEUE_POLL_S
        rate = looks_for_work(monkeypatch, demo, 1.0)
        assert 0 < rate <= 1.5 / QUEUE_POLL_S
        demo._queue.sleep_when_free = 0.001  # gradio's own wait
        assert looks_for_work(monkeypatch, demo, 1.0) > 3 / QUEUE_POLL_S
    finally:
        demo.close()
