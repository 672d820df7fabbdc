"""The guided lesson's panel, the first thing on the right (open by default): one of seven
steps at a time with Previous and Next, and one button per step that sets the controls and
carries out the step's action on the current pair (specviz.lesson); after it the step states
what happened, computed from that action's own numbers. Under it a line names the controls
a step left away from the untouched page's (specviz.lesson.BASE), with one button that
restores them.

Steps 3 and 7 need an example a run may lack (a rejection the draw decided, a round a draw
decided): without one in the stored run they run again with the step's controls, the next
seed each time, at most specviz.lesson.TRIES runs, and say so when none had one.

A step's last update carries the final frame of the run it made: the browser draws a view
of a tab not yet opened from an event's last update only (last_held).

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

from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from typing import Any

import gradio as gr

from specviz.lesson import (
    BASE,
    STEPS,
    TRIES,
    Action,
    CheckAction,
    Lesson,
    PlayAction,
    RejectionAction,
    RunAction,
    Step,
    SweepAction,
    changed_controls,
    check_statement,
    first_rejection,
    no_draw_sentence,
    rejection_statement,
    sweep_statement,
    teaching_rejection,
)
from specviz.trace import Trace, round_number
from specviz.ui.assets import script
from specviz.ui.check_tab import check_updates, summary_html
from specviz.ui.context import AppContext
from specviz.ui.frames import inspect_changes
from specviz.ui.live import run_updates
from specviz.ui.page import HIDDEN, INTERNAL, Page
from specviz.ui.state import Changes, Form, Session
from specviz.ui.sweep_tab import sweep_updates
from specviz.ui.verifier_tab import deal_changes
from specviz.views import check_figure, markup
from specviz.views.verifier_game import drawn_rounds, lesson_line

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
        # the controls a step left changed, and one click back to the untouched page's
        with gr.Row(visible=False, elem_id="sv-lesson-changed") as changed:
            parts["lesson_changed_row"] = changed
            parts["lesson_changed"] = gr.HTML("", js_on_load=None, elem_id="sv-lesson-changed-line")
            parts["lesson_restore"] = gr.Button(
                "Restore the defaults",
                size="sm",
                scale=0,
                min_width=170,
                elem_id="sv-lesson-restore",
            )
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
    return within_limits(step.form_values(), ctx)


def within_limits(values: dict[str, Any], ctx: AppContext) -> dict[str, Any]:
    """Control values with gamma and max new tokens capped at the deployment's limits."""
    values = dict(values)
    values["gamma"] = min(values["gamma"], ctx.limits.max_gamma)
    values["max_new_tokens"] = min(values["max_new_tokens"], ctx.limits.max_new_tokens)
    return values


def defaults(ctx: AppContext) -> dict[str, Any]:
    """The untouched page's controls (BASE) within the deployment's limits."""
    return within_limits(BASE, ctx)


CHANGED = "Since the lesson set them, these controls differ from the page's defaults: "


def changed_changes(values: dict[str, Any], ctx: AppContext) -> Changes:
    """The line naming the controls that differ from the defaults, with the restore button
    (hidden when none differs)."""
    names = changed_controls(values, defaults(ctx))
    if not names:
        return {"lesson_changed": "", "lesson_changed_row": gr.Row(visible=False)}
    return {
        "lesson_changed": markup.status_html(CHANGED + "; ".join(names) + ".", "warn"),
        "lesson_changed_row": gr.Row(visible=True),
    }


def restore_changes(state: Lesson, ctx: AppContext) -> Changes:
    """Restore the defaults: every control a step sets back to the untouched page's, and
    the line hidden."""
    state.set_controls = False
    values = defaults(ctx)
    return {
        **values,
        **changed_changes(values, ctx),
        "status": markup.status_html("controls restored to the page's defaults"),
    }


def edited_changes(state: Lesson, values: dict[str, Any], ctx: AppContext) -> Changes:
    """The visitor changed a control: the line again, while the lesson's settings stand
    (nothing before a step set them, or after a restore)."""
    return changed_changes(values, ctx) if state.set_controls else {}


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
        """The first update: the controls the step sets, the line naming those that differ
        from the defaults, its tab, and a busy line."""
        tab = {"tabs": gr.Tabs(selected=self.step.tab)} if self.step.tab else {}
        self.state.set_controls = True
        changed = changed_changes(self.controls, self.ctx)
        return {**self.controls, **changed, **tab, **self.busy(message)}

    def again(self, seed: int, message: str) -> Changes:
        """A run of the step again with another seed: the seed control shows it."""
        self.form = replace(self.form, seed=seed)
        self.controls = {**self.controls, "seed": seed}
        return {"seed": seed, **changed_changes(self.controls, self.ctx), **self.busy(message)}

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
        last = yield from last_held(run_updates(session, run.form, run.ctx))
        said = action.statement(run.state, session.spec, session.ar, session.decode)
        yield {**last, **run.said(said)}
    elif isinstance(action, RejectionAction):
        yield from rejection(session, run)
    elif isinstance(action, SweepAction):
        yield from sweep(action, session, run)
    elif isinstance(action, PlayAction):
        yield from play(session, run)
    else:
        yield from check(action, session, run)


def last_held(updates: Generator[Changes, None, Any]) -> Generator[Changes, None, Changes]:
    """Every update but the last, which it returns, so that the step's statement goes out
    with the run's final frame in the event's last update: the browser draws a view of a
    tab not yet opened from an event's last update only."""
    last, _ = yield from held(updates)
    return last


def held(updates: Generator[Changes, None, Any]) -> Generator[Changes, None, tuple[Changes, Any]]:
    """As last_held, returning the last update and the handler's own return value; closing
    this closes the handler (which stops its work)."""
    last: Changes = {}
    try:
        while True:
            try:
                out = next(updates)
            except StopIteration as stop:
                return last, stop.value
            if last:
                yield last
            last = out
    finally:
        updates.close()


def run_until(
    session: Session, run: StepRun, found: Callable[[Trace | None], Any], what: str
) -> Generator[Changes, None, tuple[list[int], Changes]]:
    """Run with the step's controls until found(the run's trace) is not None: the seed of
    the form first, then the next ones, at most TRIES runs (a seed whose settings the stored
    run already has is skipped: it would give the same run). Returns the seeds run and the
    last run's final frame, held back for the step's last update (last_held)."""
    tried: list[int] = []
    last: Changes = {}
    spec = session.spec
    stored = (spec.prompt, spec.settings.to_dict()) if spec is not None else None
    seed = run.form.seed
    while len(tried) < TRIES:
        again = run.ctx.settings(replace(run.form, seed=seed)).to_dict()
        if (run.form.prompt, again) == stored:
            seed += 1
            continue
        if not tried:
            yield run.start(f"running with seed {seed} to find {what} ...")
            if seed != run.form.seed:
                yield run.again(seed, f"running with seed {seed} to find {what} ...")
        else:
            yield {**last, **run.again(seed, f"seed {tried[-1]} had none; seed {seed} ...")}
        last = yield from last_held(run_updates(session, run.form, run.ctx))
        tried.append(seed)
        if found(session.spec) is not None:
            break
        seed += 1
    return tried, last


def _seeds(seeds: list[int]) -> str:
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))}"


def rejection(session: Session, run: StepRun) -> Iterator[Changes]:
    """Step 3: the stored run's first rejection where the draw decided; without one, runs
    with the step's controls and new seeds until one has it, or says that none had."""
    tried: list[int] = []
    last: Changes = {}
    had = session.spec is not None
    if teaching_rejection(session.spec) is None:
        tried, last = yield from run_until(
            session, run, teaching_rejection, "a rejection where the draw decides"
        )
    found = teaching_rejection(session.spec)
    note = ""
    if found is None:
        note = f"<p>{no_draw_sentence(session.spec, tried)}</p>"
        found = first_rejection(session.spec)
        if found is None:
            yield {**last, **run.said(note)}
            return
    elif tried and (had or tried[1:]):
        none = "no rejection where the draw decided"
        parts = [f"your last run had {none}"] if had else []
        if tried[1:]:
            runs = "the runs" if tried[2:] else "the run"
            parts.append(f"{runs} with {_seeds(tried[:-1])} had {'none either' if had else none}")
        said = "; ".join(parts)
        note = f"<p>{said[0].upper()}{said[1:]}; the run with seed {tried[-1]} has one.</p>"
    said = note + rejection_statement(session.spec, found)
    yield {**last, **open_rejection(session, found), **run.said(said)}


def open_rejection(session: Session, found: tuple[Any, int, Any] | None = None) -> Changes:
    """The inspector on a rejection of the session's run (None: its first), read from the
    stored trace."""
    found = found or first_rejection(session.spec)
    if found is None:
        raise ValueError("this run had no rejection: press the step's button again")
    rnd, pos, _ = found
    return {**inspect_changes(session.spec, rnd.index, pos), "tabs": gr.Tabs(selected="insp")}


def _drawn(trace: Trace | None) -> int | None:
    rounds = drawn_rounds(trace)
    return rounds[0] if rounds else None


def play(session: Session, run: StepRun) -> Iterator[Changes]:
    """Step 7: a round of the stored run where a draw decided a draft, dealt in the Decision
    tab; without one (a greedy run, a lossy verification, no run), runs with the step's
    controls first (new seeds, at most TRIES runs). Then the step's line about the game."""
    before = session.spec
    tried: list[int] = []
    last: Changes = {}
    if _drawn(before) is None:
        tried, last = yield from run_until(session, run, _drawn, "a round where a draw decides")
    index = _drawn(session.spec)
    if index is None:
        said = (
            f"<p>None of the runs with {_seeds(tried)} had a round where a draw decided a "
            "draft, so there is nothing to guess: press the step's button again.</p>"
        )
        yield {**last, **run.said(said)}
        return
    view = deal_changes(session, round_number(index))
    said = lesson_line(view["play_state"])
    if tried:
        why = (
            "your last run was greedy, where no draw decides"
            if before is not None and before.settings.is_greedy
            else "your last run had no round where a draw decided a draft"
            if before is not None
            else "there was no run yet"
        )
        said = f"<p>A new sampled run (seed {tried[-1]}) first: {why}.</p>" + said
    yield {**last, **view, "tabs": gr.Tabs(selected="insp"), **run.said(said)}


def sweep(action: SweepAction, session: Session, run: StepRun) -> Iterator[Changes]:
    """The sweep's own handler at the action's gammas and repetitions."""
    yield run.start("sweeping gamma ...")
    updates = sweep_updates(session, run.form, run.ctx, list(action.gammas), "", action.reps)
    last, rows = yield from held(updates)
    verification = run.ctx.settings(run.form).verification
    yield {**last, **run.said(sweep_statement(rows, verification, action.reps))}


def check(action: CheckAction, session: Session, run: StepRun) -> Iterator[Changes]:
    """The distribution check with the wrong rule, then the right one with its controls."""
    n = action.n
    yield run.start(f"check 1 of 2, the rule {action.wrong_rule} ({n} samples) ...")
    wrong = yield from _checked(run, run.form, action.wrong_rule, action, session)
    run.controls = {**run.controls, **action.right}
    changed = changed_changes(run.controls, run.ctx)
    busy = run.busy(f"check 2 of 2, {_right(action)} ({n} samples) ...")
    yield {**action.right, **changed, **busy}
    right_form = replace(run.form, **action.right)
    right = yield from _checked(run, right_form, action.right_rule, action, session)
    yield {
        "check_summary": summary_html(wrong) + summary_html(right),
        "check_plot": check_figure.checks_figure([wrong, right]),
        **run.said(check_statement(wrong, right)),
    }


def _right(action: CheckAction) -> str:
    changed = {k: value for k, value in action.right.items() if BASE.get(k) != value}
    changes = ", ".join(f"{k.replace('_', ' ')} {value}" for k, value in changed.items())
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
    wire_restore(page, state)
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


def wire_restore(page: Page, state: Any) -> None:
    """Restore the defaults, and the line kept true as the visitor changes a control."""
    names = sorted(BASE)
    controls = [page.controls[k] for k in names]
    line = [page.lesson["lesson_changed"], page.lesson["lesson_changed_row"]]
    page.lesson["lesson_restore"].click(
        page.once(lambda st: restore_changes(st, page.ctx)),
        [state],
        [*controls, *line, page.components["status"]],
        queue=False,
        show_progress="hidden",
        **INTERNAL,
    )

    def edited(st: Lesson, *values: Any) -> Changes:
        return edited_changes(st, dict(zip(names, values, strict=True)), page.ctx)

    for comp in controls:
        # a slider reports once it is let go; every other control on each edit
        event = comp.release if isinstance(comp, gr.Slider) else comp.input
        event(
            page.once(edited),
            [state, *controls],
            line,
            queue=False,
            show_progress="hidden",
            **INTERNAL,
        )
