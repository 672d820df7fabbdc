"""The guided lesson's panel, the first thing on the right (open by default): one of six
steps at a time with Previous and Next, and one button per step that sets the controls and
carries out the step's action on the current pair (specviz.lesson); after it the step states
what happened, computed from that action's own numbers.

The actions reuse the page's own handlers: Run's (live), the sweep's (sweep_tab), the
distribution check's (check_tab) and the inspector's view (frames), so a step's run is a
real run that every other view shows too; the sweep and the check return their typed
results beside their views, and the lesson states those. The visitor's place in the lesson
and what each step said live in a gr.State of their own; the traces stay in the page's
Session.

A step's statement is kept for that step. The visitor may move on while it runs, or press
the next step's button (queued behind it): each statement lands on its own step, and the
panel shows it only while that step is the one shown. A press carries out the step shown
when it was pressed, however long it waits in the queue: the page sends that step's index
with the press (a hidden number), as the Lesson's own index may have moved on by the time
the press is served. Previous and Next move that number in the browser at once
(assets/lesson-move.js) and only then ask the server to show the step: a press right after
a Next, while a busy server has not answered it yet, carries out the step moved to, and no
click of Next is lost while the server is slow.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import replace
from typing import Any

import gradio as gr

from specviz.lesson import (
    STEPS,
    Action,
    CheckAction,
    Lesson,
    PlayAction,
    RejectionAction,
    RunAction,
    Step,
    SweepAction,
    check_statement,
    first_rejection,
    rejection_statement,
    sweep_statement,
)
from specviz.ui.assets import script
from specviz.ui.check_tab import check_updates, summary_html
from specviz.ui.context import AppContext
from specviz.ui.frames import inspect_changes
from specviz.ui.live import run_updates
from specviz.ui.page import HIDDEN, INTERNAL, Page
from specviz.ui.state import Changes, Form, Session
from specviz.ui.sweep_tab import sweep_updates
from specviz.ui.verifier_tab import deal_changes
from specviz.views import markup
from specviz.views.verifier_game import lesson_line, playable_rounds

STATE = "lesson_state"  # the per-visitor Lesson's gr.State, among layout()'s components


def layout() -> dict[str, Any]:
    """The panel's components by name, and its per-visitor state (STATE)."""
    parts: dict[str, Any] = {STATE: gr.State(Lesson(), time_to_live=3600)}
    with gr.Accordion(box_label(Lesson()), open=True, elem_id="sv-lesson") as box:
        parts["lesson_box"] = box
        parts["lesson_card"] = gr.HTML(
            card_html(Lesson()), js_on_load=None, elem_id="sv-lesson-card"
        )
        with gr.Row(elem_id="sv-lesson-buttons"):
            parts["lesson_prev"] = gr.Button(
                "← Previous", size="sm", scale=0, min_width=110, elem_id="sv-lesson-prev"
            )
            parts["lesson_go"] = gr.Button(
                STEPS[0].button, variant="primary", size="sm", scale=1, elem_id="sv-lesson-go"
            )
            parts["lesson_next"] = gr.Button(
                "Next →", size="sm", scale=0, min_width=110, elem_id="sv-lesson-next"
            )
        parts["lesson_said"] = gr.HTML("", js_on_load=None, elem_id="sv-lesson-said")
        # the step shown, as the page holds it: what a press of the step's button sends
        parts["lesson_index"] = gr.Number(0, precision=0, visible=False, elem_id="sv-lesson-index")
    return parts


def box_label(state: Lesson) -> str:
    """The panel's title: the lesson, and the step shown."""
    return f"Lesson · step {state.index + 1} of {len(STEPS)}: {state.step.title}"


def card_html(state: Lesson) -> str:
    """The current step's sentences (written in specviz.lesson)."""
    return markup.lesson_card_html(state.step.text)


def said_html(state: Lesson) -> str:
    """What the current step said after its last run ("" before)."""
    return markup.lesson_said_html(state.said.get(state.index))


def move_update(state: Lesson, by: int) -> Changes:
    """Previous (-1) or Next (+1): the step shown, its button and what it said."""
    state.move(by)
    return shown_update(state)


def show_update(state: Lesson, index: Any) -> Changes:
    """The step the page has moved to (its index, set in the browser by Previous or Next):
    shown, with its button and what it said. The index itself is the browser's: it is not
    sent back, which would undo a later click still on its way."""
    state.index = pressed_step(state, index)
    out = shown_update(state)
    del out["lesson_index"]
    return out


def shown_update(state: Lesson) -> Changes:
    """The step shown, its button and what it said."""
    return {
        "lesson_index": state.index,
        "lesson_box": gr.Accordion(label=box_label(state)),
        "lesson_card": card_html(state),
        "lesson_go": state.step.button,
        "lesson_said": said_html(state),
    }


def step_controls(step: Step, ctx: AppContext) -> dict[str, Any]:
    """The control values a step sets, within the deployment's limits."""
    values = step.form_values()
    values["gamma"] = min(values["gamma"], ctx.limits.max_gamma)
    values["max_new_tokens"] = min(values["max_new_tokens"], ctx.limits.max_new_tokens)
    return values


class StepRun:
    """One press of a step's button: the lesson, the step's index (the step shown at the
    press: the visitor may move on while it waits or runs), the form with the step's
    controls set, and the app context."""

    def __init__(self, state: Lesson, index: int, form: Form, ctx: AppContext) -> None:
        self.state, self.index, self.ctx = state, index, ctx
        self.step = STEPS[index]
        self.controls = step_controls(self.step, ctx)
        self.form = replace(form, **self.controls)

    @property
    def shown(self) -> bool:
        """Whether this step is the one the panel shows now."""
        return self.state.index == self.index

    def start(self, message: str) -> Changes:
        """The first update: the controls the step sets, its tab, and a busy line."""
        tab = {"tabs": gr.Tabs(selected=self.step.tab)} if self.step.tab else {}
        return {**self.controls, **tab, **self.busy(message)}

    def busy(self, message: str) -> Changes:
        """A busy line in the panel, while this step is shown."""
        text = f"step {self.index + 1}: {message}"
        return {"lesson_said": markup.status_html(text, "busy")} if self.shown else {}

    def said(self, html: str) -> Changes:
        """Keep the step's statement; show it while this step is the one shown."""
        self.state.said[self.index] = html
        return {"lesson_said": said_html(self.state)} if self.shown else {}

    def failed(self, line: str) -> Changes:
        """A failure as one line: in the status line, and in the panel while shown."""
        self.state.said.pop(self.index, None)
        error = markup.status_html(line, "error")
        return {"status": error, **({"lesson_said": error} if self.shown else {})}


def lesson_updates(
    session: Session, state: Lesson, form: Form, ctx: AppContext, index: Any = None
) -> Iterator[Changes]:
    """Step `index` (the one shown when its button was pressed; None: the one shown now):
    set its controls, carry out its action, and state what happened. A ValueError (bad
    input, a failed load or run) ends as one line in the panel and in the status line."""
    run = StepRun(state, pressed_step(state, index), form, ctx)
    try:
        yield from act(run.step.action, session, run)
    except ValueError as exc:
        yield run.failed(str(exc).splitlines()[0] if str(exc) else "invalid input")


def pressed_step(state: Lesson, index: Any) -> int:
    """The step a press was for: the index the page sent with it (a step of the lesson), or
    without one the step shown now."""
    if index is None:
        return state.index
    if isinstance(index, float) and index.is_integer():
        index = int(index)
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(STEPS):
        raise ValueError(f"no lesson step {index!r}: the lesson has steps 1 to {len(STEPS)}")
    return index


def act(action: Action, session: Session, run: StepRun) -> Iterator[Changes]:
    """The step's action, by its kind."""
    if isinstance(action, RunAction):
        yield run.start("running ...")
        yield from run_updates(session, run.form, run.ctx)
        yield run.said(action.statement(run.state, session.spec, session.ar, session.decode))
    elif isinstance(action, RejectionAction):
        if first_rejection(session.spec) is None:
            yield run.start("running ...")
            yield from run_updates(session, run.form, run.ctx)
        yield {**open_rejection(session), **run.said(rejection_statement(session.spec))}
    elif isinstance(action, SweepAction):
        yield from sweep(action, session, run)
    elif isinstance(action, PlayAction):
        yield from play(session, run)
    else:
        yield from check(action, session, run)


def open_rejection(session: Session) -> Changes:
    """The inspector on the session's first rejection, read from the stored trace."""
    found = first_rejection(session.spec)
    if found is None:
        raise ValueError("this run had no rejection: press the step's button again")
    rnd, pos, _ = found
    return {**inspect_changes(session.spec, rnd.index, pos), "tabs": gr.Tabs(selected="insp")}


def play(session: Session, run: StepRun) -> Iterator[Changes]:
    """A round of the stored run dealt in the Decision tab (after a run when there is none
    to play), and the step's line about the game."""
    if not playable_rounds(session.spec):
        yield run.start("running, then dealing a round ...")
        yield from run_updates(session, run.form, run.ctx)
    view = deal_changes(session, None)
    yield {**view, "tabs": gr.Tabs(selected="insp"), **run.said(lesson_line(view["play_state"]))}


def sweep(action: SweepAction, session: Session, run: StepRun) -> Iterator[Changes]:
    """The sweep's own handler at the action's gammas and repetitions."""
    yield run.start("sweeping gamma ...")
    updates = sweep_updates(session, run.form, run.ctx, list(action.gammas), "", action.reps)
    rows = yield from updates
    yield run.said(sweep_statement(rows))


def check(action: CheckAction, session: Session, run: StepRun) -> Iterator[Changes]:
    """The distribution check with the wrong rule, then the right one with its controls."""
    n = action.n
    yield run.start(f"check 1 of 2, the rule {action.wrong_rule} ({n} samples) ...")
    wrong = yield from _checked(run, run.form, action.wrong_rule, action, session)
    yield {**action.right, **run.busy(f"check 2 of 2, {_right(action)} ({n} samples) ...")}
    right_form = replace(run.form, **action.right)
    right = yield from _checked(run, right_form, action.right_rule, action, session)
    yield {
        "check_summary": summary_html(wrong) + summary_html(right),
        **run.said(check_statement(wrong, right)),
    }


def _right(action: CheckAction) -> str:
    changes = ", ".join(f"{k.replace('_', ' ')} {value}" for k, value in action.right.items())
    return changes or f"the rule {action.right_rule}"


def _checked(
    run: StepRun, form: Form, rule: str, action: CheckAction, session: Session
) -> Generator[Changes, None, Any]:
    """One check through the check tab's handler (stopped by Stop, as there)."""
    updates = check_updates(run.ctx, form, action.n, action.length, rule, session.new_stop())
    result = yield from updates
    if result is None:
        raise ValueError("the check was stopped")
    return result


def set_controls() -> set[str]:
    """Every control a step sets (Form field names)."""
    names = {k for step in STEPS for k in step.form_values()}
    return names | {k for s in STEPS if isinstance(s.action, CheckAction) for k in s.action.right}


def wire(page: Page, state: Any) -> None:
    """Previous, Next and the step's button (the panel's components are on the page)."""
    go_outputs = [*page.outputs, *page.lesson.values()]
    go_outputs += [page.controls[k] for k in sorted(set_controls())]
    go_outputs = list({id(comp): comp for comp in go_outputs}.values())

    def go(sess: Session, st: Lesson, index: Any, *values: Any) -> Iterator[Changes]:
        return lesson_updates(sess, st, page.form(values), page.ctx, index)

    page.lesson["lesson_go"].click(
        page.stream(go),
        # the step shown is read as the button is pressed, not when the press is served
        [page.session, state, page.lesson["lesson_index"], *page.inputs],
        go_outputs,
        api_name="lesson",
        **page.waiting,
        # a press while a step runs is queued behind it (the default drops it)
        trigger_mode="multiple",
        **page.model_queue,
        **HIDDEN,
    )
    names = ("lesson_index", "lesson_box", "lesson_card", "lesson_go", "lesson_said")
    shown = [page.lesson[k] for k in names]
    index = page.lesson["lesson_index"]
    for name, by in (("lesson_prev", -1), ("lesson_next", 1)):
        # the index moves in the browser at once, then the server shows that step: a press
        # of the step's button right after (before the server has answered, as on a busy
        # machine) sends the step moved to, never the one before it; each click counts
        move = script("lesson-move", BY=by, LAST=len(STEPS) - 1)
        moved = page.lesson[name].click(
            None, [index], [index], js=move, queue=False, trigger_mode="multiple", **INTERNAL
        )
        moved.then(
            page.once(show_update),
            [state, index],
            shown,
            queue=False,
            show_progress="hidden",
            # one request at a time, the newest index last: the server ends on the step
            # the page shows
            trigger_mode="always_last",
            **INTERNAL,
        )
