"""A recorded lesson played from its link (``?lesson=ID``; specviz.lesson_record): every
step read from the server's store of shared runs, with no pair loaded and no model call.

A panel above the tokens shows the step played: its title and sentences, what it said
when it was recorded, and when and on which machine its speed figures were measured (the
same line sits under the speed line and in the titles of the Speed and sweep charts). The
step's run fills every view as a shared run's does (specviz.ui.share, whose load event
opens a lesson's link too): its tokens, where a
click opens any decision, its rounds, its figures; step 3 opens its rejection in the
Decision tab, step 5 shows its sweep's chart and table in the Theory tab, step 6 its checks
in the Exactness tab, step 7 deals its round to play the verifier.

Step (Space or → in presentation mode) walks the lesson: through a Run step's rounds one
at a time (the text starts empty), then to the next step, and after the last back to the
first; "← Previous step" and "Next step →" jump. Any change of a control ends the walk:
Step then starts a run of the visitor's own. The lessons read lately are kept parsed in
memory, so a class opening one link reads it once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import gradio as gr
import plotly.io

from specviz.lesson_record import RecordedLesson, RecordedStep
from specviz.sharestore import SharedRuns, check_id
from specviz.trace import round_number
from specviz.ui.frames import final_frame, inspect_changes, round_changes, sync_rounds, tree_frame
from specviz.ui.page import INTERNAL, Page
from specviz.ui.state import Changes, Form, Session
from specviz.ui.verifier_tab import deal_changes
from specviz.views import markup, recorded
from specviz.views.narration import narration_html
from specviz.views.templating import esc

LESSONS_KEPT = 4  # recorded lessons kept parsed in memory
CONCURRENCY = 4  # the jumps rendered at once (their own queue, never the model's)
TABS = {"sweep": "theory", "check": "exact", "decision": "insp", "play": "insp"}


def layout(views: dict[str, Any]) -> None:
    """The recorded lesson's panel and its two jumps, hidden until a lesson opens."""
    with gr.Column(visible=False, elem_id="sv-recorded-box") as box:
        views["recorded_box"] = box
        views["recorded"] = gr.HTML("", js_on_load=None, elem_id="sv-recorded")
        with gr.Row(elem_id="sv-recorded-buttons"):
            views["recorded_prev"] = gr.Button(
                "← Previous step", size="sm", scale=0, min_width=130, elem_id="sv-recorded-prev"
            )
            views["recorded_next"] = gr.Button(
                "Next step →", size="sm", scale=0, min_width=130, elem_id="sv-recorded-next"
            )


class Lessons:
    """The recorded lessons read lately, parsed, by id (at most LESSONS_KEPT)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, RecordedLesson] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, store: SharedRuns, lesson_id: str) -> RecordedLesson:
        with self._lock:
            if lesson_id in self._kept:
                self._kept.move_to_end(lesson_id)
                return self._kept[lesson_id]
        body = store.load_body(lesson_id, "recorded lesson")
        try:
            lesson = RecordedLesson.from_dict(body)
        except ValueError as exc:
            raise ValueError(f"recorded lesson {lesson_id} could not be read: {exc}") from None
        with self._lock:
            self._kept[lesson_id] = lesson
            while len(self._kept) > LESSONS_KEPT:
                self._kept.popitem(last=False)
        return lesson


LESSONS = Lessons()


@dataclass
class Walk:
    """Where a visitor is in a recorded lesson: the step shown, and the rounds of its run
    shown so far by Step (0: the step just entered)."""

    lesson_id: str
    lesson: RecordedLesson
    form: Any  # the controls as the link opened them: a change ends the walk
    step: int = 0
    at: int = 0


def open_lesson(store: SharedRuns, session: Session, form: Form, lesson: Any) -> Changes:
    """The page opened on a recorded lesson's link: its first step, no pair loaded; a
    malformed id, a lesson no longer kept or a file that is not one is one line."""
    try:
        lesson_id = check_id(lesson)
        recorded_lesson = LESSONS.get(store, lesson_id)
    except ValueError as exc:
        line = str(exc).splitlines()[0]
        line = line.replace("shared-run link: run=", "recorded lesson's link: lesson=")
        return {
            "status": markup.status_html(line, "error"),
            "models": markup.status_html("no pair loaded yet: Run loads it"),
        }
    session.recorded = Walk(lesson_id, recorded_lesson, form)
    # the live lesson's panel folds: the recorded lesson's own panel shows its steps
    return {**enter(session, 0), "lesson_box": gr.Accordion(open=False)}


def walks(session: Session, form: Form) -> bool:
    """Whether a Step walks a recorded lesson: one is shown, and the controls are as its
    link opened them."""
    walk = session.recorded
    return isinstance(walk, Walk) and session.mode == "shared" and walk.form == form


def step_changes(session: Session) -> Changes:
    """Step: the next round of a Run step's run, else the next step (after the last, the
    first again). No model call."""
    walk = session.recorded
    assert isinstance(walk, Walk)
    step = walk.lesson.steps[walk.step]
    spec = session.spec
    n = len(spec.rounds) if step.walked and spec is not None else 0
    if walk.at < n:
        walk.at += 1
        out = round_changes_at(session, walk.at)
        if walk.at == n:
            out.update(_measured_figures(walk, step, out))
        nxt = "Step for the next round" if walk.at < n else "Step goes on to the next step"
        line = f"{_where(walk)}, round {walk.at} of {n} ({nxt})"
        return {**out, "recorded": _panel(walk), "status": markup.status_html(line, "info")}
    return enter(session, (walk.step + 1) % len(walk.lesson.steps))


def round_changes_at(session: Session, at: int) -> Changes:
    """The run's text up to round `at` (from 1), that round's narration and decision, and
    at the last round every view; read from the stored trace."""
    spec = session.spec
    assert spec is not None and spec.rounds
    n = len(spec.rounds)
    if at == 1:
        with session.lock:
            session.spans, session.rows = [], []
    sync_rounds(session, upto=at)
    rnd = spec.rounds[at - 1]
    out: Changes = {}
    if at == n:
        out.update(final_frame(session, spec.settings.gamma, measure=False))
    out["tokens"] = markup.tokens_html(session.spans[:at], spec.prompt)
    out["rounds"] = markup.rounds_html(session.rows[:at])
    out.update(round_changes(spec, rnd))
    out["narration"] = narration_html(rnd, spec.settings)
    out["tree_view"] = tree_frame(spec, rnd.index)
    return out


def jump_changes(session: Session, form: Form, by: int) -> Changes:
    """The previous (-1) or next (+1) step of the recorded lesson shown."""
    if not walks(session, form):
        raise ValueError("no recorded lesson is shown with these controls: open its link again")
    walk = session.recorded
    return enter(session, (walk.step + by) % len(walk.lesson.steps))


def enter(session: Session, index: int) -> Changes:
    """Step `index` of the lesson shown: its panel, its run in every view (the text empty
    for a step whose rounds Step walks), and the views it kept."""
    walk = session.recorded
    assert isinstance(walk, Walk)
    walk.step, walk.at = index, 0
    lesson, step = walk.lesson, walk.lesson.steps[index]
    out: Changes = {}
    run = lesson.run_of(step)
    if run is not None:
        session.start(run.spec, run.ar, "shared")
        session.shared_id, session.shared_form = walk.lesson_id, None
        main = run.spec or run.ar
        assert main is not None
        out.update(final_frame(session, main.settings.gamma, measure=False))
        out.update(_measured_figures(walk, step, out))
        if step.walked and run.spec is not None and run.spec.rounds:
            out["tokens"] = markup.tokens_html([], run.spec.prompt)
            out["rounds"] = markup.rounds_html([])
    if step.focus is not None and session.spec is not None:
        out.update(inspect_changes(session.spec, *step.focus))
    if step.deal is not None and session.spec is not None:
        out.update(deal_changes(session, round_number(step.deal)))
    for name, value in step.drawn.items():
        out[name] = _figure(walk, step, value) if name.endswith("_plot") else value
    if step.kind in TABS:
        out["tabs"] = gr.Tabs(selected=TABS[step.kind])
    line = f"{_where(walk)}, read from the server's store (no model call). {_hint(walk)}"
    return {
        **out,
        "recorded_box": gr.Column(visible=True),
        "recorded": _panel(walk),
        "status": markup.status_html(line, "info"),
    }


def _where(walk: Walk) -> str:
    step = walk.lesson.steps[walk.step]
    where = f"step {walk.step + 1} of {len(walk.lesson.steps)}"
    return f"recorded lesson {walk.lesson_id}: {where}, {step.title}"


def _hint(walk: Walk) -> str:
    """What Step does from here."""
    steps = walk.lesson.steps
    step = steps[walk.step]
    run = walk.lesson.run_of(step)
    last = walk.step == len(steps) - 1
    then = "starts the lesson over" if last else f"goes on to step {walk.step + 2}"
    rounds = len(run.spec.rounds) if run is not None and run.spec is not None else 0
    if step.walked and rounds and walk.at == 0:
        return f"Step walks its {rounds} rounds, then {then}."
    return f"Step {then}."


def _panel(walk: Walk) -> str:
    step = walk.lesson.steps[walk.step]
    return recorded.panel_html(
        walk.lesson_id,
        walk.step + 1,
        len(walk.lesson.steps),
        step.title,
        step.card,
        step.said,
        walk.lesson.measured(step.measured_at, walk.lesson.run_of(step)),
        _hint(walk) + " Click any token to inspect its decision.",
    )


def _measured_figures(walk: Walk, step: RecordedStep, frame: Changes) -> Changes:
    """The speed line and the Speed chart with when and where they were measured."""
    out: Changes = {}
    words = walk.lesson.measured(step.measured_at, walk.lesson.run_of(step))
    if frame.get("speedline"):
        out["speedline"] = frame["speedline"] + recorded.measured_html(words)
    if frame.get("speed") is not None and hasattr(frame["speed"], "update_layout"):
        out["speed"] = _titled(frame["speed"], words)
    return out


def _figure(walk: Walk, step: RecordedStep, value: str) -> Any:
    """A kept chart; a sweep's (a speed figure) says when and where it was measured."""
    fig = plotly.io.from_json(value)
    if step.kind == "sweep":
        fig = _titled(fig, walk.lesson.measured(step.measured_at))
    return fig


def _titled(fig: Any, words: str) -> Any:
    """The figure with a second title line (escaped)."""
    title = fig.layout.title.text or ""
    note = f"<sup>{esc(words)}</sup>"
    fig.update_layout(title={"text": f"{title}<br>{note}" if title else note})
    return fig


def wire(page: Page) -> None:
    """The two jumps between the recorded lesson's steps (off the model queue)."""
    views = page.components
    for name, by in (("recorded_prev", -1), ("recorded_next", 1)):

        def jump(session: Session, *values: Any, by: int = by) -> Changes:
            return jump_changes(session, page.form(values), by)

        views[name].click(
            page.once(jump),
            [page.session, *page.inputs],
            page.outputs,
            show_progress="hidden",
            concurrency_id="pages",
            concurrency_limit=CONCURRENCY,
            trigger_mode="multiple",  # each press moves one step, however fast they come
            **INTERNAL,
        )
