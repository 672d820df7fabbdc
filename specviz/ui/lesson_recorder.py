"""Record the lesson: one press carries out all seven steps of the guided lesson
(specviz.lesson) on the current pair and prompt, through the lesson panel's own actions
(their runs, the sweep, both distribution checks, the round dealt to play), and keeps them
as one recorded lesson in the store of shared runs (specviz.lesson_record,
specviz.sharestore): one link, ``?lesson=ID``, that plays every step again with no model
call (specviz.ui.lesson_replay, opened by the page's load event in specviz.ui.share).

The recording is a model-queue event like Run: the page shows each step's run as it goes,
and a status line says which step is being recorded. The visitor's own place in the lesson
and the controls are left as they were (the steps run on a Lesson of the recording's own,
with each step's controls). A step that fails stops the recording with one line, and
nothing is stored.

Download handout writes one self-contained HTML file (specviz.report.handout) of what the
page shows: the recorded lesson it plays or has just recorded, else the session's run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any

import gradio as gr
import torch

from specviz.lesson import (
    STEPS,
    CheckAction,
    Lesson,
    PlayAction,
    RejectionAction,
    SweepAction,
    first_rejection,
    teaching_rejection,
)
from specviz.lesson_record import (
    FIGURES,
    HTML_VIEWS,
    PARAM,
    Machine,
    RecordedLesson,
    RecordedRun,
    RecordedStep,
    now,
    run_machine,
)
from specviz.outfiles import write_text
from specviz.report import handout
from specviz.sharestore import SharedRuns
from specviz.threads import cpu_info
from specviz.trace import Trace
from specviz.ui import downloads, lesson_replay, share
from specviz.ui.context import AppContext
from specviz.ui.errors import user_errors
from specviz.ui.lesson_panel import StepRun, act
from specviz.ui.page import Page
from specviz.ui.state import IMPORTED, Changes, Form, Session
from specviz.views import markup, recorded


def layout(controls: dict[str, Any]) -> None:
    """Record the lesson and Download handout side by side, then the lesson's link and the
    handout's file (each shown once there is one)."""
    with gr.Row(elem_id="sv-record-row"):
        controls["record"] = gr.Button("Record the lesson", size="sm", elem_id="sv-record")
        controls["handout"] = gr.Button("Download handout", size="sm", elem_id="sv-handout")
    controls["record_link"] = gr.HTML("", js_on_load=None, elem_id="sv-record-link")
    controls["handout_file"] = gr.File(
        label="handout (one HTML file: open it, or print it to PDF)",
        interactive=False,
        visible=False,
        elem_id="sv-handout-file",
    )


def kind_of(step_action: Any) -> str:
    """The step's kind (specviz.lesson_record.KINDS) from its action."""
    kinds = {
        RejectionAction: "decision",
        SweepAction: "sweep",
        CheckAction: "check",
        PlayAction: "play",
    }
    return kinds.get(type(step_action), "run")


class Recording:
    """What the steps carried out so far left: their runs (each once) and their steps."""

    def __init__(self) -> None:
        self.runs: list[RecordedRun] = []
        self.steps: list[RecordedStep] = []
        self._traces: list[tuple[Trace | None, Trace | None]] = []

    def run_index(self, spec: Trace | None, ar: Trace | None, at: str) -> int | None:
        """The index of this run among those kept (kept now if new); None without one."""
        if spec is None and ar is None:
            return None
        for i, (s, a) in enumerate(self._traces):
            if s is spec and a is ar:
                return i
        self._traces.append((spec, ar))
        self.runs.append(RecordedRun(spec, ar, at))
        return len(self.runs) - 1

    def add(self, index: int, session: Session, said: str, merged: Changes, at: str) -> None:
        """Step `index` as it was carried out: its statement, the run it showed, the
        decision it opened or the round it dealt, and the views it drew."""
        step = STEPS[index]
        kind = kind_of(step.action)
        run = focus = deal = None
        views: dict[str, str] = {}
        if kind in ("run", "decision", "play"):
            run = self.run_index(session.spec, session.ar, at)
        if kind == "decision":
            found = teaching_rejection(session.spec) or first_rejection(session.spec)
            focus = (found[0].index, found[1]) if found is not None else None
        if kind == "play":
            game = merged.get("play_state")
            deal = getattr(game, "index", None)
        for name in FIGURES:
            fig = merged.get(name)
            if kind in ("sweep", "check") and hasattr(fig, "to_json"):
                views[name] = fig.to_json()
        for name in HTML_VIEWS:
            if kind in ("sweep", "check") and isinstance(merged.get(name), str):
                views[name] = merged[name]
        self.steps.append(
            RecordedStep(step.title, step.text, said, kind, at, run, focus, deal, views)
        )


def machine_of(session: Session) -> Machine:
    """Where the session's runs were measured: as its last trace recorded it (the CPU, the
    threads, specviz.threads), else this machine; its GPU where the pair ran on one."""
    main = session.spec or session.ar
    recorded_at = main.machine if main is not None else {}
    device = str(main.models.get("device", "")) if main is not None else ""
    if device.startswith("cuda") and torch.cuda.is_available():
        return Machine.of(torch.cuda.get_device_name(torch.device(device)), "")
    if recorded_at.get("cpu"):
        return Machine.of(recorded_at["cpu"], str(recorded_at.get("threads") or ""))
    threads = torch.get_num_threads()
    return Machine.of(cpu_info()[0], f"{threads} thread{'s' if threads != 1 else ''}")


def record_updates(
    session: Session,
    form: Form,
    ctx: AppContext,
    store: SharedRuns,
    page_url: str,
    shown: set[str],
) -> Iterator[Changes]:
    """Carry out every step, showing its views (those of `shown`) as it goes, then store
    the lesson and show its link. A step's failure ends it with one line (ValueError)."""
    state = Lesson()
    recording = Recording()
    started = now()
    for i, step in enumerate(STEPS):
        state.index = i
        at = now()
        line = markup.status_html(
            f"recording the lesson: step {i + 1} of {len(STEPS)}, {step.title} ...", "busy"
        )
        merged: Changes = {}
        try:
            for out in act(step.action, session, StepRun(state, i, form, ctx)):
                merged.update(out)
                views = {k: value for k, value in out.items() if k in shown and k != "tabs"}
                yield {**views, "status": line}
        except ValueError as exc:
            why = str(exc).splitlines()[0] if str(exc) else "invalid input"
            raise ValueError(
                f"the recording stopped at step {i + 1} ({step.title}): {why}"
            ) from None
        said = state.said.get(i)
        if said is None:
            raise ValueError(
                f"the recording stopped at step {i + 1} ({step.title}): it said nothing"
            )
        recording.add(i, session, said, merged, at)
    lesson = RecordedLesson(
        recording.steps, recording.runs, machine_of(session), started, form.pair, form.prompt
    )
    lesson_id = store.save_body(lesson.to_dict(), "lesson")
    # the page shows the lesson's last run: its handout is the lesson's
    session.recorded = lesson_replay.Walk(lesson_id, lesson, None)
    base = page_url.split("?", 1)[0].split("#", 1)[0]
    url = f"{base}?{PARAM}={lesson_id}" if base else f"?{PARAM}={lesson_id}"
    done = (
        f"lesson recorded: {len(recording.steps)} steps, {len(recording.runs)} runs, kept as "
        f"{lesson_id} (its link is under Record the lesson)"
    )
    yield {
        "record_link": recorded.lesson_link_html(url, lesson_id),
        "status": markup.status_html(done),
    }


def handout_file(session: Session) -> str:
    """Write the handout of what the page shows: the recorded lesson it plays (or has just
    recorded), else the session's run; the file's path."""
    walk = session.recorded
    lessons = isinstance(walk, lesson_replay.Walk) and session.spec is not None
    if lessons and any(session.spec is r.spec for r in walk.lesson.runs):
        text = handout.lesson_handout(walk.lesson, walk.lesson_id)
        name = f"specviz-lesson-{walk.lesson_id}.html"
    else:
        if session.mode in ("run", "step") and session.spec is not None:
            if session.spec.stop_reason == "running":
                raise ValueError("this run has not finished: make its handout once it has ended")
        if session.imported:
            measured = IMPORTED
        else:
            where = run_machine(session.ar) or run_machine(session.spec)
            machine = where or machine_of(session).words()
            measured = f"measured on this server ({machine}); handout written {now()}"
        text = handout.run_handout(session.spec, session.ar, measured)
        name = "specviz-handout.html"
    folder = downloads.new_folder("handout-")
    return str(write_text(folder / name, text))


def wire(page: Page) -> None:
    """Record the lesson (on the model queue, as Run) and Download handout (off it)."""
    ctrls, sess, store = page.controls, page.session, page.ctx.shared
    shown = set(page.components)

    @user_errors
    def record(request: gr.Request, session: Session, *values: Any) -> Iterator[dict[Any, Any]]:
        address = share.page_address(request)
        form = page.form(values)
        with closing(record_updates(session, form, page.ctx, store, address, shown)) as updates:
            for out in updates:
                yield page.keyed(out)

    ctrls["record"].click(
        record,
        [sess, *page.inputs],
        [*page.outputs, ctrls["record_link"]],
        api_name="record_lesson",
        **page.live,
    )

    def handed(session: Session) -> dict[Any, Any]:
        return page.keyed({"handout_file": gr.File(value=handout_file(session), visible=True)})

    ctrls["handout"].click(
        user_errors(handed), [sess], [ctrls["handout_file"]], api_name="handout", **page.quiet
    )
