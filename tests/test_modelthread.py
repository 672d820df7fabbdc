"""All of the app's model work runs on one thread."""

from __future__ import annotations

import threading
import time

import pytest

from specviz import ui
from specviz.config import Limits
from specviz.modelthread import MODEL_THREAD, ModelThread


def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_calls_from_many_threads_run_on_one_thread_in_order():
    mt = ModelThread(name="test-model")
    seen: list[tuple[str, int]] = []
    busy, release = threading.Event(), threading.Event()

    def hold() -> None:
        busy.set()
        release.wait(10)

    def work(i: int) -> int:
        seen.append((threading.current_thread().name, i))
        return i * i

    blocker = threading.Thread(target=lambda: mt.call(hold))
    blocker.start()
    assert busy.wait(10)  # the model thread is occupied: every call below queues
    results: dict[int, int] = {}
    callers = []
    for i in range(6):  # each caller queues its call before the next caller starts
        callers.append(
            threading.Thread(target=lambda i=i: results.update({i: mt.call(lambda: work(i))}))
        )
        callers[-1].start()
        _wait_for(lambda i=i: mt._jobs.qsize() == i + 1)
    release.set()
    for t in [blocker, *callers]:
        t.join()
    assert results == {i: i * i for i in range(6)}
    assert seen == [("test-model", i) for i in range(6)]  # one thread, in arrival order
    assert mt.call(lambda: mt.call(lambda: 7)) == 7  # a nested call runs inline, no deadlock


def test_errors_reach_the_caller():
    mt = ModelThread(name="test-errors")
    with pytest.raises(ValueError, match="bad"):
        mt.call(lambda: (_ for _ in ()).throw(ValueError("bad")))
    assert mt.call(lambda: "still serving") == "still serving"


def test_the_app_runs_models_on_the_model_thread(tiny):
    names: set[str] = set()
    model = tiny.target.model
    hook = model.register_forward_pre_hook(lambda *_: names.add(threading.current_thread().name))
    try:
        f = ui.Form(prompt="1 2 3", pair="tiny", max_new_tokens=8, gamma=2)
        loader = lambda p, d: tiny  # noqa: E731
        list(ui.run_updates(ui.new_session(), f, ui.AppContext(loader, Limits())))
        ui.step_update(ui.new_session(), f, ui.AppContext(loader, Limits()))
    finally:
        hook.remove()
    assert names == {MODEL_THREAD._name}


def test_a_worker_with_a_gap_yields_at_most_once_per_gap():
    """Items that tick every 10 ms are read in batches, at most one yield per gap of the
    loop's own duration (without the gap it would yield about once per item)."""
    from specviz.ui.worker import Worker

    def items():
        for i in range(60):
            time.sleep(0.01)
            yield i

    sink: list[int] = []
    worker = Worker([items()], threading.Event(), sink=sink)
    t0 = time.monotonic()
    seen = [len(sink) for _ in worker.polls(gap=0.1)]
    took = time.monotonic() - t0
    assert sink == list(range(60))  # the handler reads the rest after the loop
    assert seen == sorted(seen) and len(seen) <= took / 0.1 + 2, (seen, took)
