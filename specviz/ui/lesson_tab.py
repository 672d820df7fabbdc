"""The guided lesson, the first thing on the right: a panel (open by default) that shows one
of seven steps at a time with Previous and Next, and one button per step that sets the
controls and runs on the current pair; after the run the step states what happened,
computed from that run's numbers (specviz.lesson).

The steps reuse the page's own handlers: Run's (live), the sweep's (sweep_tab), the
distribution check's (check_tab) and the inspector's view (views), so a step's run is a
real run that every other view shows too. The visitor's place in the lesson and what each
step said live in a gr.State of their own; the traces stay in the page's Session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import gradio as gr

from specviz import lesson
from specviz.lesson import STEPS, Lesson, Step
from specviz.ui import verifier_tab
from specviz.ui.check_tab import check_updates
from specviz.ui.live import run_updates
from specviz.ui.page import HIDDEN, INTERNAL, Page
from specviz.ui.pairs import AppContext
from specviz.ui.state import Form, Session, View
from specviz.ui.sweep_tab import sweep_updates
from specviz.ui.views import inspect_view
from specviz.views import markup
from specviz.views.verifier_game import lesson_line

Report = Callable[[float, str], None]


def layout() -> dict[str, Any]:
    """The panel's components by name, and its per-visitor state ("lesson_state")."""
    c: dict[str, Any] = {"lesson_state": gr.State(Lesson(), time_to_live=3600)}
    with gr.Accordion(box_label(Lesson()), open=True, elem_id="sv-lesson") as box:
        c["lesson_box"] = box
        c["lesson_card"] = gr.HTML(card_html(Lesson()), js_on_load=None, elem_id="sv-lesson-card")
        with gr.Row(elem_id="sv-lesson-buttons"):
            c["lesson_prev"] = gr.Button(
                "← Previous", size="sm", scale=0, min_width=110, elem_id="sv-lesson-prev"
            )
            c["lesson_go"] = gr.Button(
                STEPS[0].button, variant="primary", size="sm", scale=1, elem_id="sv-lesson-go"
            )
            c["lesson_next"] = gr.Button(
                "Next →", size="sm", scale=0, min_width=110, elem_id="sv-lesson-next"
            )
        c["lesson_said"] = gr.HTML("", js_on_load=None, elem_id="sv-lesson-said")
    return c


def box_label(state: Lesson) -> str:
    """The panel's title: the lesson, and the step shown."""
    return f"Lesson · step {state.index + 1} of {len(STEPS)}: {state.step.title}"


def card_html(state: Lesson) -> str:
    """The current step's sentences (written in specviz.lesson)."""
    return f'<div class="sv-lesson-card">{state.step.text}</div>'


def said_html(state: Lesson) -> str:
    """What the current step said after its last run ("" before)."""
    said = state.said.get(state.index)
    return f'<div class="sv-lesson-said">{said}</div>' if said else ""


def move_update(state: Lesson, by: int) -> View:
    """Previous (-1) or Next (+1): the step shown, its button and what it said."""
    state.move(by)
    return {
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


def _said(state: Lesson, index: int, html: str) -> View:
    state.said[index] = html
    return {"lesson_said": said_html(state)} if state.index == index else {}


def _busy(message: str) -> View:
    return {"lesson_said": markup.status_html(message, "busy")}


def lesson_updates(
    session: Session, state: Lesson, form: Form, ctx: AppContext, report: Report | None = None
) -> Iterator[View]:
    """The current step: set its controls, run, and state what happened. A ValueError (bad
    input, a failed load or run) ends as one line in the panel and in the status line."""
    index = state.index
    try:
        yield from _step_updates(session, state, index, form, ctx, report)
    except ValueError as exc:
        line = str(exc).splitlines()[0] if str(exc) else "invalid input"
        state.said.pop(index, None)
        yield {
            "lesson_said": markup.status_html(line, "error"),
            "status": markup.status_html(line, "error"),
        }


def _step_updates(
    session: Session,
    state: Lesson,
    index: int,
    form: Form,
    ctx: AppContext,
    report: Report | None,
) -> Iterator[View]:
    step = STEPS[index]
    if step is lesson.PLAY_STEP:  # play the verifier on the session's own run
        form = replace(form, **step_controls(step, ctx))
        game = yield from verifier_tab.lesson_updates(session, form, ctx)
        yield _said(state, index, lesson_line(game))
        return
    if index == 2 and lesson.first_rejection(session.spec) is not None:
        yield from _open_rejection(session, state, index)  # no model call
        return
    controls = step_controls(step, ctx)
    form = replace(form, **controls)
    tab = {"tabs": gr.Tabs(selected=step.tab)} if step.tab and index != 2 else {}
    if index in (4, 5):
        run = StepRun(state, index, form, ctx, controls, tab)
        yield from _sweep(session, run) if index == 4 else _check(run, report)
    else:
        yield {**controls, **tab, **_busy(f"step {index + 1}: running ...")}
        yield from run_updates(session, form, ctx)
        spec, ar = session.spec, session.ar
        if index == 0:
            state.first = lesson.RunNumbers.of(spec, ar) if spec and spec.rounds else None
            yield _said(state, index, lesson.untouched_statement(spec, ar))
        elif index == 1:
            yield _said(state, index, lesson.temperature_statement(spec, ar, state.first))
        elif index == 2:
            yield from _open_rejection(session, state, index)
        else:
            yield _said(state, index, lesson.greedy_statement(spec, ar, session.decode))


def _open_rejection(session: Session, state: Lesson, index: int) -> Iterator[View]:
    """Step 3: the inspector on the session's first rejection, read from the stored trace."""
    found = lesson.first_rejection(session.spec)
    if found is None:
        raise ValueError("this run had no rejection: press the step's button again")
    rnd, pos, _ = found
    view = inspect_view(session.spec, rnd.index, pos)
    said = _said(state, index, lesson.rejection_statement(session.spec))
    yield {**view, "tabs": gr.Tabs(selected="insp"), **said}


@dataclass(frozen=True)
class StepRun:
    """One press of a step's button: the lesson, the step, the form with the step's controls
    set, the app context, the controls the page shows set, and the tab to open."""

    state: Lesson
    index: int
    form: Form
    ctx: AppContext
    controls: dict[str, Any]
    tab: View


def _sweep(session: Session, run: StepRun) -> Iterator[View]:
    """Step 5: the sweep's own handler at the lesson's gammas, tokens and repetitions."""
    gammas, reps = list(lesson.SWEEP_GAMMAS), lesson.SWEEP_REPS
    choices = {"sweep_gammas": gammas, "sweep_temps": "", "sweep_reps": reps}
    yield {**run.controls, **choices, **run.tab, **_busy("step 5: sweeping gamma ...")}
    rows: list[dict[str, Any]] = []
    for out in sweep_updates(session, run.form, run.ctx, gammas, "", reps):
        rows = out.get("sweep_rows", rows)
        yield out
    yield _said(run.state, run.index, lesson.sweep_statement(rows))


def _check(run: StepRun, report: Report | None) -> Iterator[View]:
    """Step 6: the distribution check with the wrong rule, then with exact match."""
    state, index, form, ctx, controls, tab = (
        run.state,
        run.index,
        run.form,
        run.ctx,
        run.controls,
        run.tab,
    )
    n, length = lesson.CHECK_N, lesson.CHECK_LENGTH
    check = {"check_n": n, "check_len": length}
    yield {
        **controls,
        **check,
        "check_rule": lesson.WRONG_RULE,
        **tab,
        **_busy(f"step 6: check 1 of 2, the rule {lesson.WRONG_RULE} ({n} samples) ..."),
    }
    wrong = check_updates(ctx, form, n, length, lesson.WRONG_RULE, report)
    yield {
        "check_plot": wrong["check_plot"],
        "check_summary": wrong["check_summary"],
        "verification": "exact-match",
        "check_rule": "exact",
        **_busy(f"step 6: check 2 of 2, exact-match verification ({n} samples) ..."),
    }
    exact = check_updates(
        ctx, replace(form, verification="exact-match"), n, length, "exact", report
    )
    yield {
        "check_plot": exact["check_plot"],
        "check_summary": wrong["check_summary"] + exact["check_summary"],
        **_said(state, index, lesson.check_statement(wrong["check_result"], exact["check_result"])),
    }


def wire(page: Page, parts: dict[str, Any]) -> None:
    """Previous, Next and the step's button."""
    targets = {
        **page.views,
        **{k: page.controls[k] for k in lesson.BASE},
        **{k: v for k, v in parts.items() if k != "lesson_state"},
    }
    outputs = list({id(c): c for c in targets.values()}.values())
    state = parts["lesson_state"]

    def keyed(out: View) -> dict[Any, Any]:
        return {targets[k]: v for k, v in out.items() if k in targets}

    def go(
        sess: Session,
        st: Lesson,
        *values: Any,
        progress: Any = gr.Progress(),  # noqa: B008 - gradio injects the tracker by default
    ) -> Iterator[dict[Any, Any]]:
        def report(fraction: float, stage: str) -> None:
            progress(fraction, desc=stage)

        for out in lesson_updates(sess, st, page.form(values), page.ctx, report):
            yield keyed(out)

    parts["lesson_go"].click(
        go,
        [page.session, state, *page.inputs],
        outputs,
        api_name="lesson",
        show_progress="minimal",
        **page.model_queue,
        **HIDDEN,
    )
    shown = [parts[k] for k in ("lesson_box", "lesson_card", "lesson_go", "lesson_said")]
    for name, by in (("lesson_prev", -1), ("lesson_next", 1)):
        parts[name].click(
            lambda st, by=by: keyed(move_update(st, by)),
            [state],
            shown,
            queue=False,
            show_progress="hidden",
            **INTERNAL,
        )
