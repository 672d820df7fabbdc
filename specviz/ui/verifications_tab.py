"""Every verification side by side (in the Exactness tab, under the distribution check):
the form's prompt, seed and settings under each of the lossless and the lossy
verifications, against one autoregressive baseline (specviz.analysis.verifications does
the work). It draws acceptance against the distortion each decision adds, TV(out, p), and
tables the acceptance, tokens per target call, speedup and the check's verdict per
verification.

It runs on the model thread through a Worker, one step (a run, or one pair of a check's
samples) at a time, so that Stop, or the visitor leaving, ends it after the step in progress.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator
from typing import Any

import gradio as gr

from specviz import metrics
from specviz.analysis import distribution_check
from specviz.analysis.verifications import COLUMNS, Progress, Row, iter_compare, timing_sentence
from specviz.config import VERIFICATIONS
from specviz.ui.context import AppContext
from specviz.ui.errors import model_failures
from specviz.ui.frames import FRAME_S
from specviz.ui.page import HIDDEN, Page
from specviz.ui.pairs import pair_label
from specviz.ui.state import Changes, Form, Session, as_int
from specviz.ui.warm import warmed_pair
from specviz.ui.worker import Worker
from specviz.views import figures, markup

MAX_SAMPLES = 800  # per method in each check: the lossy verifications' power is stated up to n 800
INTRO = (
    "**Why not just accept more?** Run the prompt under every verification at the current "
    "settings: the two lossless ones (rejection, exact match) and two lossy ones that engines "
    "and courses use (typical acceptance, top-k match). Each point is one verification: its "
    "acceptance against the mean TV(out, p) per verified position, where out is the "
    "distribution of the token its decision emits (computed, not sampled). The lossless ones "
    "sit at TV 0; a lossy one "
    "buys acceptance with distortion, or fails to. The table leads with tokens per target "
    "call, which no timing noise touches; the runs are interleaved with one baseline, and each "
    "speedup comes with its spread. The check draws N one-token continuations "
    "under each and tests them against the target's p. "
    "`python -m specviz verifications` does the same from the command line."
)


def layout(views: dict[str, Any]) -> None:
    """The comparison's components, into the page's components by name."""
    gr.Markdown(INTRO)
    with gr.Row():
        views["verif_n"] = gr.Slider(
            distribution_check.MIN_N, MAX_SAMPLES, 400, step=100, label="check samples N"
        )
        views["verif_check"] = gr.Checkbox(True, label="run the distribution checks")
    with gr.Row():
        views["verif_run"] = gr.Button(
            "Compare the verifications", variant="primary", elem_id="sv-verif-run"
        )
        views["verif_stop"] = gr.Button("Stop", variant="stop", elem_id="sv-verif-stop")
    views["verif_status"] = gr.HTML(js_on_load=None, elem_id="sv-verif-status")
    views["verif_plot"] = gr.Plot(label="acceptance against TV(out, p)", elem_id="sv-verif-plot")
    views["verif_table"] = gr.HTML(js_on_load=None, elem_id="sv-verif-table")


def progress_html(p: Progress) -> str:
    """A progress bar over the steps and the step under way."""
    bar = markup.progress_html(p.done, max(1, p.total))
    return bar + markup.status_html(f"step {p.done + 1} of {p.total}: {p.text()}", "busy")


def table_html(rows: list[Row]) -> str:
    """The rows as a table, tokens per target call first, each verification's name saying
    whether it is lossy, each speedup with its spread; under it what the timing can and
    cannot tell apart."""
    d = metrics.DEFINITIONS
    notes = (
        f"{timing_sentence(rows)} Tokens per target call: {d['tokens per call']}. Speedup: "
        f"{d['speedup']}, every verification interleaved with one baseline on one thread, so "
        "that each meets the same load; in brackets the middle 90 % of its bootstrap over the "
        f"run's stretches. Mean TV(out, p): {d['out TV']}; 0 up to float error for a "
        "lossless verification. A lossy verification fails the check where its distortion is "
        "large enough for N samples to detect."
    ).strip()
    return markup.grid_html(COLUMNS, [r.cells() for r in rows], "sv-table sv-verif", notes)


def results(rows: list[Row], status: str) -> Changes:
    return {
        "verif_plot": figures.verifications_figure(rows),
        "verif_table": table_html(rows) if rows else "",
        "verif_status": status,
    }


def compare_updates(
    ctx: AppContext, form: Form, n: Any, check: Any, stop: threading.Event | None = None
) -> Generator[Changes, None, list[Row]]:
    """The comparison for the form's prompt and settings, on the model thread: its progress,
    and each verification's row as it is measured. Returns the rows measured (fewer when
    stopped)."""
    n = as_int("samples", n)
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"samples must be an integer, got {n!r}")
    if not distribution_check.MIN_N <= n <= MAX_SAMPLES:
        raise ValueError(f"samples must be in {distribution_check.MIN_N}..{MAX_SAMPLES}, got {n}")
    check = bool(check)
    settings = ctx.settings(form)
    yield {
        "verif_n": n,
        "verif_check": check,
        "verif_status": markup.status_html(f"loading pair {pair_label(form)!r} ...", "busy"),
    }
    pair = warmed_pair(ctx, form)
    items: list[Progress | Row] = []
    compare = iter_compare(pair, form.prompt, settings, n, 1, check)
    worker = Worker([compare], stop or threading.Event(), sink=items)
    shown = 0
    for _ in worker.polls(gap=FRAME_S):
        if len(items) > shown:
            shown = len(items)
            rows = [r for r in items[:shown] if isinstance(r, Row)]
            last = next(p for p in reversed(items[:shown]) if isinstance(p, Progress))
            yield results(rows, progress_html(last))
    if worker.error is not None:
        with model_failures(f"comparing verifications on pair {pair_label(form)!r}"):
            raise worker.error
    rows = [r for r in items if isinstance(r, Row)]
    if len(rows) < len(VERIFICATIONS):
        status = markup.status_html(f"stopped after {len(rows)} verifications")
    else:
        status = markup.status_html(f"done: {len(rows)} verifications, one baseline")
    yield results(rows, status)
    return rows


def stop_compare(session: Session) -> str:
    """Stop: the comparison ends after the step in progress."""
    session.stop.set()
    return markup.status_html("stopping after the step in progress ...", "busy")


def wire(page: Page) -> None:
    views, sess = page.components, page.session

    def run(s: Session, n: Any, check: Any, *values: Any) -> Iterator[Changes]:
        return compare_updates(page.ctx, page.form(values), n, check, s.new_stop())

    choices = [views["verif_n"], views["verif_check"]]
    views["verif_run"].click(
        page.stream(run),
        [sess, *choices, *page.inputs],
        [*choices, views["verif_status"], views["verif_plot"], views["verif_table"]],
        api_name="verifications",
        show_progress="minimal",
        **page.model_queue,
        **HIDDEN,
    )
    stop: Any = [views["verif_status"]]
    views["verif_stop"].click(
        stop_compare, [sess], stop, api_name="stop_verifications", **page.quiet
    )
