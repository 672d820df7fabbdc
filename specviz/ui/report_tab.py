"""The Prompt set tab: the pair report (specviz.report) over an uploaded JSON lines file or
the built-in set, at the page's current pair and settings.

A report shares the model queue with Run and the sweep, runs on the model thread through a
Worker, and shows a progress bar and the report's figures after each prompt; at the end it
offers report.html, report.json and runs.jsonl for download. Stop (or closing the browser
tab) ends it after the prompt in progress. A file over the app's limits (lines, characters
per prompt, size) or with a malformed line is refused with one line on the page. The models
are the process's (AppContext.pair loads each pair once); the report's own state (its stop
event, its files) is per visitor, in a gr.State of this tab.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from specviz.config import Settings
from specviz.report import figures, stats
from specviz.report.html import overview_table
from specviz.report.prompts import (
    APP_LIMITS,
    BUILTIN,
    CATEGORIES,
    QUICK,
    QUICK_TOKENS,
    Prompt,
    builtin_prompts,
    quick_prompts,
    read_prompts,
)
from specviz.report.records import Record
from specviz.report.run import Plan, Progress, ReportRun, check_prompts, report_meta
from specviz.ui import downloads
from specviz.ui.context import AppContext
from specviz.ui.errors import failure
from specviz.ui.frames import FRAME_S
from specviz.ui.page import HIDDEN, Page
from specviz.ui.state import Changes, Form
from specviz.ui.worker import Worker
from specviz.views import markup

QUICK_CHOICE = (
    f"quick: {len(CATEGORIES)} prompts, one of each kind of task, {QUICK_TOKENS} tokens each"
)
BUILTIN_CHOICE = "the built-in set (36 prompts, six kinds of task, max new tokens each)"
FILE_CHOICE = "my JSON lines file"
SOURCES = {QUICK_CHOICE: QUICK, BUILTIN_CHOICE: BUILTIN}
FIGURES = ("acceptance", "speedup", "conditional", "histogram", "kinds", "compare")
INTRO = (
    "Run the current pair and settings (the controls on the left: pair, gamma, temperature, "
    "max new tokens, seed) over a set of prompts (the quick set runs "
    f"{QUICK_TOKENS} new tokens a prompt, whatever max new tokens says), both methods per "
    "prompt with the same "
    "seed, and see where the draft loses: acceptance and tokens per call by category, "
    "measured speedup beside the refined prediction, P(accept k | accepted 1..k-1) by "
    "draft position, the accepted-length histogram and acceptance by kind of token. A "
    f"file has one JSON object a line: prompt, optional category and id; at most "
    f"{APP_LIMITS.max_prompts} prompts of at most {APP_LIMITS.max_chars} characters. "
    "`python -m specviz report` does the same from the command line (resume, shards, "
    "the costliest decisions with links to their traces)."
)


class ReportState:
    """One visitor's report: its stop event and the directory of its last report."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.out: Path | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> ReportState:
        return ReportState()  # each visitor starts with a fresh one

    def new_stop(self) -> threading.Event:
        self.stop = threading.Event()
        return self.stop


def layout(views: dict[str, Any]) -> None:
    """The tab's components, into the page's components by name."""
    gr.Markdown(INTRO)
    views["report_state"] = gr.State(ReportState(), time_to_live=3600)
    with gr.Row():
        views["report_source"] = gr.Radio(
            [QUICK_CHOICE, BUILTIN_CHOICE, FILE_CHOICE],
            value=QUICK_CHOICE,
            label="prompts",
            elem_id="sv-report-source",
            scale=2,
        )
        views["report_file"] = gr.File(
            label="prompt file (.jsonl)",
            file_types=[".jsonl", ".json", ".txt"],
            type="filepath",
            elem_id="sv-report-file",
            scale=2,
        )
        views["report_ngram"] = gr.Checkbox(
            False,
            label="also run the n-gram drafter on the same prompts and seeds (paired differences)",
            elem_id="sv-report-ngram",
            scale=1,
        )
    with gr.Row():
        views["report_run"] = gr.Button(
            "Run the report", variant="primary", elem_id="sv-report-run"
        )
        views["report_stop"] = gr.Button(
            "Stop the report", variant="stop", elem_id="sv-report-stop"
        )
    views["report_status"] = gr.HTML(js_on_load=None, elem_id="sv-report-status")
    views["report_table"] = gr.HTML(js_on_load=None, elem_id="sv-report-table")
    with gr.Row():
        views["report_acceptance"] = gr.Plot(label="acceptance", elem_id="sv-report-acceptance")
        views["report_speedup"] = gr.Plot(label="speedup", elem_id="sv-report-speedup")
    views["report_conditional"] = gr.Plot(
        label="conditional acceptance by draft position", elem_id="sv-report-conditional"
    )
    with gr.Row():
        views["report_histogram"] = gr.Plot(
            label="accepted per round", elem_id="sv-report-histogram"
        )
        views["report_kinds"] = gr.Plot(label="by kind of token", elem_id="sv-report-kinds")
    views["report_compare"] = gr.Plot(label="paired differences", elem_id="sv-report-compare")
    views["report_files"] = gr.File(
        label="the report: report.html, report.json, runs.jsonl",
        file_count="multiple",
        interactive=False,
        elem_id="sv-report-files",
    )


def load_prompts(source: Any, path: Any) -> list[Prompt]:
    """The prompts the tab's choices name (ValueError, one line)."""
    if source == FILE_CHOICE:
        if not path:
            raise ValueError("choose a JSON lines file first, or the built-in set")
        return read_prompts(str(path), APP_LIMITS)
    return quick_prompts() if source == QUICK_CHOICE else builtin_prompts()


def report_settings(source: Any, settings: Settings) -> Settings:
    """The settings a report runs: the quick set's QUICK_TOKENS new tokens (within the
    deployment's limit), else the form's."""
    if source != QUICK_CHOICE:
        return settings
    return settings.with_(max_new_tokens=min(QUICK_TOKENS, settings.limits.max_new_tokens))


def error_html(exc: BaseException) -> str:
    text = str(failure(exc, "the report")).splitlines()
    return markup.status_html(f"refused: {text[0] if text else 'invalid input'}", "error")


def checked_upload(path: Any) -> Changes:
    """An uploaded file read at once: its prompts counted, or its first bad line shown."""
    if not path:
        return {"report_status": ""}
    try:
        prompts = read_prompts(str(path), APP_LIMITS)
    except ValueError as exc:
        return {"report_source": FILE_CHOICE, "report_status": error_html(exc)}
    cats = len({p.category for p in prompts})
    return {
        "report_source": FILE_CHOICE,
        "report_status": markup.status_html(
            f"{len(prompts)} prompts in {cats} categories: press Run the report"
        ),
    }


def progress_html(p: Progress | None, total: int) -> str:
    done = p.done if p is not None else 0
    text = "warming up ..." if p is None else p.line()
    bar = markup.progress_html(done, total)
    return bar + markup.status_html(text, "busy")


def report_changes(records: list[Record], meta: dict[str, Any]) -> Changes:
    """The table and the figures of the records so far."""
    if not records:
        return {}
    report = stats.build(records, meta)
    figs = figures.all_figures(report)
    out: Changes = {"report_table": overview_table(report)}
    for name in FIGURES:
        if name in figs:
            out[f"report_{name}"] = figs[name]
        elif name == "compare":
            out["report_compare"] = figures.compare_figure(report)
    return out


def report_updates(
    state: ReportState, form: Form, ctx: AppContext, source: Any, path: Any, ngram: Any
) -> Generator[Changes, None, None]:
    """Run the report on the model thread; stream its progress and figures after each
    prompt; offer its files at the end. Refusals show as one line in the status."""
    try:
        yield from _report(state, form, ctx, source, path, bool(ngram))
    except ValueError as exc:
        yield {"report_status": error_html(exc)}


def _report(
    state: ReportState, form: Form, ctx: AppContext, source: Any, path: Any, ngram: bool
) -> Generator[Changes, None, None]:
    if not ctx.runner.keeps_models:
        raise ValueError("the report needs a model kept in memory: it does not run on ZeroGPU")
    prompts = load_prompts(source, path)
    settings = report_settings(source, ctx.settings(form))
    compare = settings.with_(drafter="ngram") if ngram else None
    ident = {"name": form.pair, "draft": form.custom_draft, "target": form.custom_target}
    plan = Plan(
        prompts,
        settings,
        {**ident, "dtype": form.dtype},
        compare_with="ngram" if ngram else None,
        compare_settings=compare,
        source=Path(str(path)).name if source == FILE_CHOICE else SOURCES.get(source, BUILTIN),
    )
    yield {"report_status": markup.status_html(f"loading pair {form.pair!r} ...", "busy")}
    pair = ctx.pair(form)
    check_prompts(pair, plan)
    out = downloads.new_folder("report-")
    state.out = out
    run = ReportRun(out, plan, pair, about={"pair": pair.describe(), "command": "app"})
    meta = report_meta(plan.manifest(run.about), [])
    events: list[Progress] = []
    worker = Worker([run], state.new_stop(), sink=events)
    total = len(prompts)
    yield {"report_status": progress_html(None, total), "report_files": None}
    shown = 0
    for _ in worker.polls(gap=FRAME_S):
        if len(events) > shown:
            shown = len(events)
            recs = list(run.records)
            meta = report_meta(plan.manifest(run.about), recs)
            yield {
                **report_changes(recs, meta),
                "report_status": progress_html(events[shown - 1], total),
            }
    if worker.error is not None:
        raise failure(worker.error, "the report")
    paths = run.write()
    done = len(run.records)
    status = (
        f"report done: {done} prompts"
        if done == total
        else f"report stopped after {done} of {total} prompts (the files hold those)"
    )
    meta = report_meta(plan.manifest(run.about), run.records)
    yield {
        **report_changes(run.records, meta),
        "report_status": markup.status_html(status),
        "report_files": [str(p) for p in (paths[2], paths[1], paths[0])] if done else None,
    }


def stop_report(state: ReportState) -> str:
    """Stop: the report ends after the prompt in progress."""
    state.stop.set()
    return markup.status_html("stopping after the prompt in progress ...", "busy")


def wire(page: Page) -> None:
    views = page.components
    state = views["report_state"]
    choices = [views["report_source"], views["report_file"], views["report_ngram"]]

    def handler(
        st: ReportState, src: Any, path: Any, ngram: Any, *values: Any
    ) -> Iterator[Changes]:
        return report_updates(st, page.form(values), page.ctx, src, path, ngram)

    outputs = [
        views["report_source"],
        views["report_status"],
        views["report_table"],
        *(views[f"report_{n}"] for n in FIGURES),
        views["report_files"],
    ]
    views["report_run"].click(
        page.stream(handler),
        [state, *choices, *page.inputs],
        outputs,
        api_name="report",
        show_progress="minimal",
        **page.model_queue,
        **HIDDEN,
    )
    views["report_file"].upload(
        page.once(checked_upload),
        [views["report_file"]],
        [views["report_source"], views["report_status"]],
        api_name="report_upload",
        **page.quiet,
    )
    views["report_stop"].click(
        stop_report, [state], [views["report_status"]], api_name="stop_report", **page.quiet
    )
