"""The distribution check (in the Exactness tab, under the greedy check): N speculative and
N autoregressive continuations of the prompt, at the current settings, against the target's
probabilities; a deliberately wrong rule can be chosen to watch the same check catch
it (specviz.analysis.distribution_check does the work).

The check runs on the model thread through a Worker, one sample at a time, so that Stop, or
the visitor leaving, ends it after the sample in progress; the handler streams its
progress and returns the typed result beside its views, for the lesson's statement."""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator
from dataclasses import replace
from typing import Any

import gradio as gr

from specviz.analysis import distribution_check
from specviz.analysis.distribution_check import CheckResult
from specviz.config import RULES
from specviz.ui.context import AppContext
from specviz.ui.errors import model_failures
from specviz.ui.frames import FRAME_S
from specviz.ui.page import HIDDEN, Page
from specviz.ui.pairs import pair_label
from specviz.ui.state import Changes, Form, Session, as_int
from specviz.ui.warm import warmed_pair
from specviz.ui.worker import Worker
from specviz.views import markup

CHECK_MAX_SAMPLES = 2000  # the distribution check: most samples per method
# The tab's defaults. The page's default prompt begins its answer the same way nearly every
# time (its first token has p = 0.94 at the default settings), which leaves a check of it 3
# bins whatever N (p-value 0.68 at N 400, length 2). The check's own prompt begins in many
# ways: at N 300 and length 2 it fills 9 bins for the first token and 19 for the pair, for
# about 1.6 times the old default's CPU time (docs/app.md has the figures).
CHECK_PROMPT = "Tell me a short story."
CHECK_N = 300
CHECK_LENGTH = 2


def layout(views: dict[str, Any]) -> None:
    """The check's components, into the page's components by name."""
    gr.Markdown(
        "Draw N short continuations of a prompt with speculative and with "
        "autoregressive sampling (current settings) and compare both with the "
        "target's probabilities, outcome by outcome: an outcome the target makes likely "
        "enough to be expected 5 times in N gets a bin of its own, the rest share one, and "
        "the chi-square p-value is stated with the bins it was computed over. A prompt whose "
        "answer always begins the same way leaves few bins, so the check has its own prompt. "
        "*Break the rule* to watch the same check catch a wrong algorithm."
    )
    views["check_prompt"] = gr.Textbox(
        CHECK_PROMPT,
        label="prompt to check (empty: the page's prompt)",
        max_lines=3,
        elem_id="sv-check-prompt",
    )
    with gr.Row():
        views["check_n"] = gr.Slider(
            200, CHECK_MAX_SAMPLES, CHECK_N, step=100, label="samples N", elem_id="sv-check-n"
        )
        views["check_len"] = gr.Slider(
            1, 3, CHECK_LENGTH, step=1, label="tokens per continuation", elem_id="sv-check-len"
        )
        views["check_rule"] = gr.Dropdown(
            list(RULES), value="rejection", label="rule (anything but rejection is wrong)"
        )
    views["check_run"] = gr.Button("Run the check", elem_id="sv-check-run")
    views["check_summary"] = gr.HTML(js_on_load=None, elem_id="sv-check-summary")
    views["check_plot"] = gr.Plot(label="empirical against the target's p", elem_id="sv-check-plot")


def progress_html(done: int, total: int, stage: str) -> str:
    """A progress bar and the stage in progress."""
    bar = markup.progress_html(done, max(1, total))
    return bar + markup.status_html(f"{stage}: {done} of {total} samples", "busy")


def summary_html(result: CheckResult) -> str:
    """The check's summary as the tab shows it: first each comparison's p-value with its
    bins, then the summary's lines."""
    head = "; ".join(
        f"{comp.name}: p-value {comp.spec_test.p_text} over {len(comp.labels)} bins"
        for comp in result.comparisons
    )
    return markup.pre_html(f"{head}\n{result.summary()}", "sv-check")


def check_updates(
    ctx: AppContext,
    form: Form,
    n: Any,
    length: Any,
    rule: str,
    stop: threading.Event | None = None,
    prompt: Any = None,
) -> Generator[Changes, None, CheckResult | None]:
    """The distribution check for the prompt (empty or None: the form's) and the form's
    settings, on the model thread: its choices and progress as it draws, then its figure
    and summary. Returns the CheckResult (None when `stop` was set, or the handler closed,
    before it finished). A set stop event ends it after the sample in progress."""
    from specviz.views import check_figure

    own = isinstance(prompt, str) and bool(prompt.strip())
    if own:
        form = replace(form, prompt=prompt)
    n, length = as_int("samples", n), as_int("length", length)
    if not isinstance(n, int) or not 200 <= n <= CHECK_MAX_SAMPLES:
        raise ValueError(f"samples must be in 200..{CHECK_MAX_SAMPLES}, got {n!r}")
    settings = ctx.settings(form)
    distribution_check.validate(n, length, rule)
    # the prompt box says what is checked: its own prompt, or empty for the page's
    choices: Changes = {
        "check_prompt": prompt if own else "",
        "check_n": n,
        "check_len": length,
        "check_rule": rule,
    }
    yield {**choices, "check_summary": progress_html(0, 2 * n, "warming up")}
    pair = warmed_pair(ctx, form)
    items: list[distribution_check.Progress | distribution_check.CheckResult] = []
    check = distribution_check.iter_check(pair, form.prompt, settings, n, length, rule)
    worker = Worker([check], stop or threading.Event(), sink=items)
    shown = 0
    for _ in worker.polls(gap=FRAME_S):
        if len(items) > shown:
            shown = len(items)
            last = items[shown - 1]
            if isinstance(last, distribution_check.Progress):
                yield {"check_summary": progress_html(last.done, last.total, last.stage)}
    if worker.error is not None:
        with model_failures(f"checking pair {pair_label(form)!r}"):
            raise worker.error
    result = items[-1] if items else None
    if not isinstance(result, distribution_check.CheckResult):
        yield {"check_summary": markup.status_html("the check was stopped")}
        return None
    yield {"check_plot": check_figure.check_figure(result), "check_summary": summary_html(result)}
    return result


def wire(page: Page) -> None:
    views, sess = page.components, page.session

    def run(
        s: Session, prompt: Any, n: Any, length: Any, rule: str, *values: Any
    ) -> Iterator[Changes]:
        form = page.form(values)
        return check_updates(page.ctx, form, n, length, rule, s.new_stop(), prompt)

    choices = [views["check_n"], views["check_len"], views["check_rule"]]
    views["check_run"].click(
        page.stream(run),
        [sess, views["check_prompt"], *choices, *page.inputs],
        [views["check_prompt"], *choices, views["check_plot"], views["check_summary"]],
        api_name="check",
        show_progress="minimal",
        **page.model_queue,
        **HIDDEN,
    )
