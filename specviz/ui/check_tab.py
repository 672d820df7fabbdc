"""The distribution check (in the Exactness tab, under the greedy check): N speculative and
N autoregressive continuations of the prompt, at the current settings, against the exact
target probabilities; a deliberately wrong rule can be chosen to watch the same check catch
it (specviz.analysis.distribution_check does the work)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from specviz.config import RULES
from specviz.modelthread import MODEL_THREAD
from specviz.ui.errors import model_failures, user_errors
from specviz.ui.page import HIDDEN, Page
from specviz.ui.pairs import AppContext, pair_label
from specviz.ui.state import Form, View, as_int
from specviz.ui.warm import warmed_pair
from specviz.views import markup

CHECK_MAX_SAMPLES = 2000  # the distribution check: most samples per method


def layout(v: dict[str, Any]) -> None:
    """The check's components, into the views by name."""
    gr.Markdown(
        "Draw N short continuations of the prompt with speculative and with "
        "autoregressive sampling (current settings) and compare both with the exact "
        "target probabilities. *Break the rule* to watch the same check catch a "
        "wrong algorithm."
    )
    with gr.Row():
        v["check_n"] = gr.Slider(200, CHECK_MAX_SAMPLES, 400, step=100, label="samples N")
        v["check_len"] = gr.Slider(1, 3, 2, step=1, label="tokens per continuation")
        v["check_rule"] = gr.Dropdown(
            list(RULES), value="exact", label="rule (anything but exact is wrong)"
        )
    v["check_run"] = gr.Button("Run the check", elem_id="sv-check-run")
    v["check_summary"] = gr.HTML(js_on_load=None, elem_id="sv-check-summary")
    v["check_plot"] = gr.Plot(label="empirical against exact", elem_id="sv-check-plot")


def check_updates(
    ctx: AppContext,
    form: Form,
    n: Any,
    length: Any,
    rule: str,
    progress: Callable[[float, str], None] | None = None,
) -> View:
    """The distribution check for the form's prompt and settings (the CheckResult itself
    under "check_result", for the lesson's statement: no component shows that key)."""
    from specviz.analysis import distribution_check
    from specviz.views import check_figure

    n, length = as_int("samples", n), as_int("length", length)
    if not isinstance(n, int) or not 200 <= n <= CHECK_MAX_SAMPLES:
        raise ValueError(f"samples must be in 200..{CHECK_MAX_SAMPLES}, got {n!r}")
    settings = ctx.settings(form)
    distribution_check.validate(n, length, rule)
    pair = warmed_pair(ctx, form)

    def report(p: distribution_check.Progress) -> None:
        if progress is not None:
            progress(p.done / max(1, p.total), p.stage)

    with model_failures(f"checking pair {pair_label(form)!r}"):
        result = MODEL_THREAD.call(
            lambda: distribution_check.run_check(
                pair, form.prompt, settings, n, length, rule, progress_cb=report
            )
        )
    return {
        "check_plot": check_figure.check_figure(result),
        "check_summary": f"<pre class='sv-check'>{markup.esc(result.summary())}</pre>",
        "check_result": result,
    }


def wire(page: Page) -> None:
    v = page.views

    @user_errors
    def run(
        n: Any,
        length: Any,
        rule: str,
        *values: Any,
        progress: Any = gr.Progress(),  # noqa: B008 - gradio injects the tracker by default
    ) -> dict[Any, Any]:
        def report(fraction: float, stage: str) -> None:
            progress(fraction, desc=stage)

        return page.keyed(check_updates(page.ctx, page.form(values), n, length, rule, report))

    v["check_run"].click(
        run,
        [v["check_n"], v["check_len"], v["check_rule"], *page.inputs],
        [v["check_plot"], v["check_summary"]],
        api_name="check",
        show_progress="full",
        **page.model_queue,
        **HIDDEN,
    )
