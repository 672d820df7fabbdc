"""A recorded lesson without a browser, on a tiny pair: "Record the lesson" carries out all
seven steps and keeps them as one body in the store of shared runs; its link plays every
step (statement, run, decision, sweep, checks, the dealt round) and walks each Run step's
rounds with no model call; each speed figure says when and on which machine it was
measured; a malformed link, a shared run's id and a corrupt lesson are one line each."""

from __future__ import annotations

import json
import re

import pytest

from specviz.config import Limits
from specviz.lesson import STEPS
from specviz.lesson_record import KINDS, Machine, RecordedLesson
from specviz.modelthread import MODEL_THREAD
from specviz.sharestore import SharedRuns
from specviz.ui import lesson_replay
from specviz.ui.context import AppContext
from specviz.ui.lesson_recorder import record_updates
from specviz.ui.live import step_update
from specviz.ui.state import Form, Session, new_session

LIMITS = Limits(max_new_tokens=24)  # short runs: the tiny models hold 128 positions
VIEWS = {"status", "tokens", "rounds", "speed", "speedline", "sweep_plot", "check_plot"}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, one_thread):
    """A lesson recorded on a close tiny pair: the store, its id, the recording's frames."""
    from tests.tiny import close_pair

    pair = close_pair(sharpness=0.5)
    store = SharedRuns(tmp_path_factory.mktemp("lessons"), max_runs=5)
    ctx = AppContext(lambda p, d: pair, LIMITS, shared=store)
    form = Form(prompt="1 2 3", pair="tiny")
    frames = list(record_updates(new_session(), form, ctx, store, "http://host:7860/?x=1", VIEWS))
    link = frames[-1]["record_link"]
    assert "http://host:7860/?lesson=" in link
    lesson_id = link.split('data-lesson="')[1][:16]
    return store, lesson_id, frames


def test_the_recording_keeps_all_seven_steps(recorded) -> None:
    store, lesson_id, frames = recorded
    assert all(set(f) <= VIEWS | {"record_link"} for f in frames)  # no control, no panel
    assert "recording the lesson: step 7 of 7" in frames[-2]["status"]
    lesson = RecordedLesson.from_dict(store.load_body(lesson_id, "lesson"))
    assert [s.title for s in lesson.steps] == [s.title for s in STEPS]
    assert [s.kind for s in lesson.steps] == [
        "run",
        "run",
        "decision",
        "run",
        "sweep",
        "check",
        "play",
    ]
    assert all(s.said and s.kind in KINDS for s in lesson.steps)
    assert set(lesson.steps[4].drawn) == {"sweep_plot", "sweep_table"}
    assert set(lesson.steps[5].drawn) == {"check_plot", "check_summary"}
    assert lesson.steps[6].deal is not None and lesson.steps[6].run is not None
    assert lesson.machine.cpu and "thread" in lesson.machine.threads
    # each run once: step 3 opens its rejection in a run kept for an earlier step or its own
    assert len(lesson.runs) == len({id(r) for r in lesson.runs}) <= 5
    again = RecordedLesson.from_dict(json.loads(json.dumps(lesson.to_dict())))
    assert again.to_dict() == lesson.to_dict()


def test_the_link_plays_every_step_and_walks_the_rounds_with_no_model_call(recorded) -> None:
    store, lesson_id, _ = recorded
    lesson = RecordedLesson.from_dict(store.load_body(lesson_id, "lesson"))
    ctx = AppContext(loader=lambda *a: pytest.fail("a model was loaded"), shared=store)
    session, form = Session(), Form()
    calls = MODEL_THREAD.calls
    out = lesson_replay.open_lesson(store, session, form, lesson_id)
    seen: dict[int, dict] = {}
    walked: dict[int, list[str]] = {}  # the rounds each step's Steps showed, in order
    for _ in range(80):  # every step, every round of the Run steps, and back to step 1
        number = int(out["recorded"].split('data-step="')[1].split('"')[0])
        if len(seen) == 7 and number == 1:
            break
        seen.setdefault(number, {}).update(out)
        walked.setdefault(number, []).extend(re.findall(r"round (\d+) of \d+", out["status"]))
        out = step_update(session, form, ctx)
    assert sorted(seen) == list(range(1, 8))
    for number, shown in seen.items():
        step = lesson.steps[number - 1]
        machine = lesson.measured(step.measured_at, lesson.run_of(step))
        assert f"step {number} of 7: {step.title}" in shown["recorded"]
        assert step.said in shown["recorded"] and machine in shown["recorded"]
    for number in (1, 2, 4):  # a Run step: its rounds, one per Step, then every view
        run = lesson.runs[lesson.steps[number - 1].run]
        assert walked[number] == [str(i) for i in range(1, len(run.spec.rounds) + 1)]
        machine = lesson.measured(lesson.steps[number - 1].measured_at, run)
        assert run.ar.machine["cpu"] in machine
        assert f"round {len(run.spec.rounds)} of {len(run.spec.rounds)}" in seen[number]["status"]
        assert machine in seen[number]["speedline"]
        assert machine in seen[number]["speed"].layout.title.text
    assert "decision" in seen[3] and seen[3]["tabs"].selected == "insp"
    machine = lesson.measured(lesson.steps[4].measured_at)
    assert machine in seen[5]["sweep_plot"].layout.title.text and seen[5]["sweep_table"]
    assert seen[6]["check_plot"].data and "PASS" in seen[6]["check_summary"] + "FAIL"
    assert seen[7]["play_state"].index == lesson.steps[6].deal
    assert MODEL_THREAD.calls == calls, "playing a recorded lesson asked the model thread"
    # a change of control ends the walk: Step then belongs to the visitor's own run
    assert not lesson_replay.walks(session, Form(gamma=3))
    jumped = lesson_replay.jump_changes(session, form, -1)
    assert 'data-step="7"' in jumped["recorded"]


def test_bad_links_are_one_line(recorded, tmp_path) -> None:
    store, lesson_id, _ = recorded
    for bad, said in (
        ("nope", "not a recorded lesson&#x27;s link: lesson="),
        ("0123456789abcdef", "is no longer kept"),
    ):
        out = lesson_replay.open_lesson(store, Session(), Form(), bad)
        assert said in out["status"] and "\n" not in out["status"]
    body = store.load_body(lesson_id, "lesson")
    # a shared run's id is not a lesson, and a lesson whose step shows a run it lacks is read
    # as no lesson: one line each, and the page serves on
    lesson = RecordedLesson.from_dict(body)
    run_id = store.save(lesson.runs[0].spec, lesson.runs[0].ar, imported=False)
    broken = json.loads(json.dumps(body))
    broken["steps"][0]["run"] = 99
    other = SharedRuns(tmp_path)
    broken_id = other.save_body(broken, "lesson")
    for where, link, said in (
        (store, run_id, "it is not a lesson"),
        (other, broken_id, "a step shows run 99"),
    ):
        out = lesson_replay.open_lesson(where, Session(), Form(), link)
        assert said in out["status"] and "recorded lesson" in out["status"]


def test_the_machine_line() -> None:
    m = Machine.of("Intel(R) Xeon(R) CPU @ 2.20GHz", "2 threads of 2 cores")
    assert m.words() == "Intel(R) Xeon(R) CPU @ 2.20GHz, 2 threads of 2 cores"
    assert Machine.from_dict(m.to_dict()) == m
    with pytest.raises(ValueError, match="machine threads is not text"):
        Machine.from_dict({"cpu": "x", "threads": 2})
