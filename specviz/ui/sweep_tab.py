"""The measured sweep (in the Theory tab, under the formula): speculative against
autoregressive decoding for each gamma (and temperature) at the current settings, measured
(specviz.analysis.sweep), with the points drawn over Leviathan's curve at the measured alpha
and c as each cell completes.

This is the one view across runs that runs the models: a sweep shares the model queue
with Run, drives the sweep iterator on the model thread through a Worker (so nothing else
runs on the models between its timed runs), streams its progress, and Stop (or leaving the
page) ends it after the run in progress.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import gradio as gr

from specviz.analysis.sweep import SweepEvent, SweepPlan, format_table, sweep
from specviz.config import DEFAULT_GAMMAS
from specviz.ui.context import AppContext
from specviz.ui.errors import model_failures
from specviz.ui.frames import FRAME_S
from specviz.ui.page import HIDDEN, Page
from specviz.ui.pairs import pair_label
from specviz.ui.state import Changes, Form, Session, as_int
from specviz.ui.worker import Worker
from specviz.views import across_runs, markup

GAMMA_CHOICES = (1, 2, 3, 4, 5, 6, 7, 8)
MAX_APP_REPS = 5  # the CLI allows more; the app keeps a sweep to minutes
INTRO = (
    "Measure speculative and autoregressive decoding for each gamma at the current "
    "settings (prompt, pair, temperature, max new tokens, seed): each repetition runs the "
    "baseline and every gamma with the same seed, interleaved on one thread so that each "
    "meets the same load, after one warm-up; EOS is ignored so that every run has max new "
    "tokens. Points: measured speedup (the baseline's seconds over the speculative run's for "
    "the same tokens, pooled over the repetitions) with the middle 90 % of its bootstrap; "
    "dashed: Leviathan's expected speedup at the sweep's median alpha and c. "
    "`python -m specviz sweep` does the same from the command line."
)


def layout(views: dict[str, Any]) -> None:
    """The sweep's components, into the page's components by name."""
    gr.Markdown(INTRO)
    with gr.Row():
        views["sweep_gammas"] = gr.CheckboxGroup(
            list(GAMMA_CHOICES),
            value=list(DEFAULT_GAMMAS),
            label="gammas",
            elem_id="sv-sweep-gammas",
            scale=3,
        )
        views["sweep_temps"] = gr.Textbox(
            "",
            label="temperatures (comma-separated; empty: the temperature control's)",
            max_length=200,
            scale=2,
        )
        views["sweep_reps"] = gr.Slider(
            1, MAX_APP_REPS, 2, step=1, label="repetitions", elem_id="sv-sweep-reps", scale=1
        )
    with gr.Row():
        views["sweep_run"] = gr.Button("Run the sweep", variant="primary", elem_id="sv-sweep-run")
        views["sweep_stop"] = gr.Button("Stop the sweep", variant="stop", elem_id="sv-sweep-stop")
    views["sweep_status"] = gr.HTML(js_on_load=None, elem_id="sv-sweep-status")
    views["sweep_plot"] = gr.Plot(label="measured speedup against gamma", elem_id="sv-sweep-plot")
    views["sweep_table"] = gr.HTML(js_on_load=None, elem_id="sv-sweep-table")


def parse_temperatures(text: Any) -> tuple[float, ...]:
    """'0.7, 1.0' -> (0.7, 1.0); empty -> ()."""
    out = []
    for part in str(text or "").split(","):
        if part.strip():
            try:
                out.append(float(part))
            except ValueError:
                raise ValueError(f"temperatures: {part.strip()!r} is not a number") from None
    return tuple(out)


def sweep_plan(form: Form, ctx: AppContext, gammas: Any, temperatures: Any, reps: Any) -> SweepPlan:
    """The plan from the tab's choices and every other setting from the form."""
    settings = ctx.settings(form)
    reps = as_int("repetitions", reps)
    if isinstance(reps, bool) or not isinstance(reps, int) or not 1 <= reps <= MAX_APP_REPS:
        raise ValueError(f"repetitions must be in 1..{MAX_APP_REPS}, got {reps!r}")
    gs = tuple(sorted(as_int("gamma", g) for g in gammas or ()))
    temps = parse_temperatures(temperatures) or (settings.temperature,)
    return SweepPlan(gs, temps, settings, reps, form.prompt)


def progress_html(event: SweepEvent | None, total: int) -> str:
    """A progress bar and the run in progress."""
    done = event.done if event is not None else 0
    text = "warming up ..."
    if event is not None:
        which = "the baseline" if event.method == "ar" else f"gamma {event.gamma}"
        text = (
            f"run {done} of {total} done ({which}, temperature {event.temperature:g}, "
            f"repetition {event.rep + 1})"
        )
    bar = markup.progress_html(done, total)
    return bar + markup.status_html(text, "busy")


def results(rows: list[dict[str, Any]], status: str, verification: str = "rejection") -> Changes:
    """The chart and the table of the rows so far."""
    table = markup.pre_html(format_table(rows), "sv-sweep") if rows else ""
    return {
        "sweep_plot": across_runs.sweep_figure(rows, verification),
        "sweep_table": table,
        "sweep_status": status,
    }


def sweep_updates(
    session: Session, form: Form, ctx: AppContext, gammas: Any, temperatures: Any, reps: Any
) -> Generator[Changes, None, list[dict[str, Any]]]:
    """Run the sweep on the model thread; stream its choices, its progress, and each cell's
    row as it ends. Returns the rows measured (fewer when stopped)."""
    if not ctx.runner.keeps_models:
        raise ValueError("the sweep needs a model kept in memory: it does not run on ZeroGPU")
    plan = sweep_plan(form, ctx, gammas, temperatures, reps)
    label = pair_label(form)
    choices = {
        "sweep_gammas": list(plan.gammas),
        "sweep_temps": str(temperatures or ""),
        "sweep_reps": plan.reps,
    }
    yield {**choices, "sweep_status": markup.status_html(f"loading pair {label!r} ...", "busy")}
    pair = ctx.pair(form)
    events: list[SweepEvent] = []
    stop = session.new_stop()
    worker = Worker([sweep(pair, plan)], stop, sink=events)
    yield {**results([], ""), "sweep_status": progress_html(None, plan.total_runs)}
    shown = 0
    for _ in worker.polls(gap=FRAME_S):
        if len(events) > shown:
            shown = len(events)
            rows = [e.row for e in events[:shown] if e.row is not None]
            status = progress_html(events[shown - 1], plan.total_runs)
            yield results(rows, status, plan.settings.verification)
    if worker.error is not None:
        with model_failures(f"sweeping pair {label!r}"):
            raise worker.error
    rows = [e.row for e in events if e.row is not None]
    yield results(rows, done_html(events, plan), plan.settings.verification)
    return rows


def done_html(events: list[SweepEvent], plan: SweepPlan) -> str:
    done = events[-1].done if events else 0
    if done < plan.total_runs:
        return markup.status_html(f"sweep stopped after {done} of {plan.total_runs} runs")
    return markup.status_html(f"sweep done: {done} runs, {len(plan.cells())} cells")


def stop_sweep(session: Session) -> str:
    """Stop: the sweep ends after the run in progress."""
    session.stop.set()
    return markup.status_html("stopping after the run in progress ...", "busy")


def wire(page: Page) -> None:
    views, sess = page.components, page.session
    choices = [views["sweep_gammas"], views["sweep_temps"], views["sweep_reps"]]

    def handler(s: Session, g: Any, t: Any, r: Any, *values: Any) -> Iterator[Changes]:
        return sweep_updates(s, page.form(values), page.ctx, g, t, r)

    outputs = [*choices, *(views[k] for k in ("sweep_status", "sweep_plot", "sweep_table"))]
    views["sweep_run"].click(
        page.stream(handler),
        [sess, *choices, *page.inputs],
        outputs,
        api_name="sweep",
        show_progress="minimal",
        **page.model_queue,
        **HIDDEN,
    )
    stop: Any = [views["sweep_status"]]
    views["sweep_stop"].click(stop_sweep, [sess], stop, api_name="stop_sweep", **page.quiet)
