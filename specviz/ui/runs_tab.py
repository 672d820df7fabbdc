"""The runs section (in the Acceptance tab): what accumulates over a session's runs, from
stored traces only.

- the experiment log: a row per Run (the settings that differ from the defaults,
  acceptance, alpha, c, tokens per call, speedup; specviz.analysis.runlog), its chart, its CSV;
- a run picked from the log loads back into the token view and every other view;
- the calibration of the keep probabilities over the logged runs: verified drafts binned by their
  predicted acceptance min(1, p/q) against the observed frequency, with error bars, and
  the same for resampled tokens (specviz.analysis.calibration).

Live runs show specviz.ui.frames.runs_changes after Session.record; nothing here calls a model.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from specviz.ui import downloads
from specviz.ui.errors import user_errors
from specviz.ui.frames import final_frame, log_display
from specviz.ui.page import Page
from specviz.ui.state import Changes, Session
from specviz.views import markup

CALIBRATION_NOTE = (
    "Every verified draft had a predicted acceptance probability min(1, p/q) and was "
    "accepted or not; a rule that keeps each draft with exactly its stated probability puts "
    "each bin's observed frequency on the diagonal. "
    "It accumulates over this session's runs (sampled runs only; greedy decisions draw no u)."
)


def layout(views: dict[str, Any]) -> None:
    """The calibration, then the log with its picker, file and chart, into the page's
    components by name (the Acceptance tab lays them out under the acceptance charts)."""
    gr.Markdown(CALIBRATION_NOTE)
    views["calib_summary"] = gr.HTML(js_on_load=None, elem_id="sv-calib-summary")
    views["calib_plot"] = gr.Plot(
        label="reliability diagram of the keep probabilities", elem_id="sv-calib"
    )
    views["log_table"] = gr.Dataframe(
        log_display([]),
        label="experiment log: one row per Run in this session",
        interactive=False,
        wrap=True,
        elem_id="sv-log",
    )
    with gr.Row():
        views["log_pick"] = gr.Dropdown(
            [], value=None, label="run", elem_id="sv-log-pick", scale=1, min_width=120
        )
        views["log_load"] = gr.Button("Load its trace into the views", elem_id="sv-log-load")
        views["log_export"] = gr.Button("Export the log (CSV)", elem_id="sv-log-export")
    # shown once there is a file to download: an empty box would read as a broken one
    views["log_file"] = gr.File(
        label="log CSV", interactive=False, visible=False, elem_id="sv-log-file"
    )
    views["log_chart"] = gr.Plot(label="speedup and acceptance per run", elem_id="sv-log-chart")


def load_run(session: Session, run: Any) -> Changes:
    """Show a logged run's traces again in every view (no model call)."""
    try:
        n = int(run)
    except (TypeError, ValueError):
        raise ValueError("choose a run from the log first") from None
    spec, ar = session.log.traces(n)
    main = spec or ar
    assert main is not None
    session.start(spec, ar, "idle")
    session.decode = None  # the pair may have changed since; the greedy check decodes ids
    out = final_frame(session, main.settings.gamma)
    message = f"run {n} loaded from the log: click any token to inspect its decision"
    return {**out, "status": markup.status_html(message)}


def log_file(session: Session) -> str:
    """The log as a CSV file."""
    if not session.log.rows:
        raise ValueError("nothing logged yet: press Run first")
    path = downloads.new_folder("log-") / "specviz-runs.csv"
    path.write_text(session.log.csv(), encoding="utf-8")
    return str(path)


def wire(page: Page) -> None:
    views, sess = page.components, page.session
    views["log_load"].click(
        page.once(load_run),
        [sess, views["log_pick"]],
        page.outputs,
        api_name="load_run",
        **page.quiet,
    )
    views["log_export"].click(
        user_errors(shown_file), [sess], [views["log_file"]], api_name="export_log", **page.quiet
    )


def shown_file(session: Session) -> Any:
    """The log's CSV file in its box, shown."""
    return gr.File(value=log_file(session), visible=True)
