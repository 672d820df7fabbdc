"""The page: the Blocks built from its sections, and how it is served.

Two columns. The left: what a person needs first (preset, prompt, Run/Step/Stop, the
presentation toggle, the help text), then the settings (specviz.ui.controls). The right:
the guided lesson (lesson_panel), the live view (status, token view, round table,
narration, the exactness note; token_view), then seven tabs, each reading top to bottom:

    Decision    the decision inspector (inspector_tab), or play the verifier (verifier_tab)
    Speed       the live speedup chart, the Table 1 columns, the race replay (race), where
                a round's time goes, this run's figures
    Acceptance  per round, by draft position, the calibration and the run log (runs_tab)
    Theory      the formula and the projection (theory_tab), the measured sweep (sweep_tab)
    Exactness   the greedy check, the distribution check (check_tab), every verification
                side by side (verifications_tab)
    Data        export and import (io_tab)
    Prompt set  the pair report over a prompt set (report_tab)

Each section builds its own components and wires its own events; the tabs are composed here
(no tab module imports another), with the views that only show figures. The presentation
view (present) and the phone layout are CSS in assets/specviz.css. Nothing loads at import
or build time.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import gradio as gr

from specviz.config import Deployment, Limits
from specviz.sharestore import SharedRuns
from specviz.ui import (
    api,
    check_tab,
    controls,
    downloads,
    inspector_tab,
    io_tab,
    lesson_panel,
    lesson_recorder,
    lesson_replay,
    live,
    present,
    race,
    report_tab,
    runs_tab,
    share,
    sweep_tab,
    theory_tab,
    token_view,
    tree_panel,
    verifications_tab,
    verifier_tab,
)
from specviz.ui.assets import ASSETS
from specviz.ui.blocks import Blocks
from specviz.ui.context import AppContext, app_context
from specviz.ui.page import Page
from specviz.ui.pairs import CustomLoader, Loader
from specviz.ui.runners import Runner
from specviz.ui.state import DEFAULTS, new_session
from specviz.views import markup

HEADER = (
    "<h1>specviz</h1><p>Speculative decoding, decision by decision: "
    "<b>p</b> is the target's distribution, <b>q</b> the draft's.</p>"
)
# The sections that build their own components and wire their own events.
SECTIONS = (
    controls,
    live,
    api,
    token_view,
    present,
    race,
    share,
    inspector_tab,
    runs_tab,
    theory_tab,
    sweep_tab,
    check_tab,
    verifications_tab,
    io_tab,
    report_tab,
    verifier_tab,
    tree_panel,
    lesson_replay,
    lesson_recorder,
)


def build_app(
    loader: Loader | None = None,
    pairs: list[str] | None = None,
    limits: Limits | None = None,
    deployment: Deployment | None = None,
    custom_loader: CustomLoader | None = None,
    runner: Runner | None = None,
    shared: SharedRuns | None = None,
) -> gr.Blocks:
    """The Blocks app. Loads nothing: models load on the first event that needs them.

    pairs: the registry pairs offered (default: those the deployment allows, ordered for
    this machine's device); limits overrides the deployment's input limits; runner is where
    the models run (default: chosen for this machine, specviz.ui.runners.choose_runner);
    shared is the store of shared runs (default: under the specviz cache)."""
    dep = deployment or Deployment.from_env()
    dep = replace(dep, limits=limits) if limits is not None else dep
    ctx, menu = app_context(dep, loader, pairs, custom_loader, runner, shared)
    with Blocks(
        title="specviz: speculative decoding, decision by decision",
        # gradio's copies of the files the page offers (specviz.ui.downloads)
        delete_cache=downloads.GRADIO_CACHE,
    ) as demo:
        page, lesson_state = compose(ctx, menu, dep, demo)
        for section in SECTIONS:
            section.wire(page)
        lesson_panel.wire(page, lesson_state)
    return demo


def compose(
    ctx: AppContext, menu: list[str], dep: Deployment, demo: gr.Blocks
) -> tuple[Page, gr.State]:
    """Every component of the page, inside the Blocks being built, by name; and the lesson's
    per-visitor state. Wires nothing."""
    session = gr.State(new_session, time_to_live=3600)
    # gradio's session store makes a visitor's session, by calling new_session, when one of
    # the visitor's events first reads it. gr.State would also run the function in a load
    # event of its own, which raced the page's load event (specviz.ui.share) and, finishing
    # last, put a blank session over the one the page's load had filled: on a busy machine
    # a lesson's link forgot its lesson, and the first Step started a run instead.
    session.load_event_to_attach = None
    gr.HTML(HEADER, js_on_load=None, elem_id="sv-header")
    with gr.Row(elem_id="sv-main"):
        with gr.Column(scale=1, min_width=320, elem_id="sv-left"):
            ctrls = controls.layout(menu, dep, ctx.runner)
        with gr.Column(scale=3, elem_id="sv-right"):
            panel = lesson_panel.layout()  # the guided lesson comes first
            views = main_views()
    state = panel.pop(lesson_panel.STATE)
    page = Page(
        ctx,
        dep.concurrency,
        session,
        ctrls,
        {**views, "models": ctrls["models"]},
        panel,
        demo,
    )
    return page, state


def main_views() -> dict[str, Any]:
    """The right column: the live view (status, token view with its shading, round table and
    narration, the exactness note), then the tabs. Tabs wrap onto a second row rather than
    hide behind a menu where the page is narrow."""
    views: dict[str, Any] = {}
    with gr.Column(elem_id="sv-live"):
        lesson_replay.layout(views)  # a recorded lesson's step, when its link is opened
        views["status"] = gr.HTML(markup.status_html("ready"), js_on_load=None, elem_id="sv-status")
        # the run's speed in one line beside the tokens: tokens per target call first
        views["speedline"] = gr.HTML("", js_on_load=None, elem_id="sv-speedline")
        token_view.layout(views)
        tree_panel.layout(views)  # a tree round's tree (empty for a chain)
        views["exact_note"] = gr.HTML(
            markup.exact_note_html(DEFAULTS), js_on_load=None, elem_id="sv-exact-note"
        )
    with gr.Tabs(elem_id="sv-tabs", overflow_behavior="wrap") as tabs:
        views["tabs"] = tabs
        with gr.Tab("Decision", id="insp", elem_id="sv-inspector"):
            verifier_tab.layout(views, inspector_tab.layout)  # the inspector, or the game
        with gr.Tab("Speed", id="speed", elem_id="sv-speed-tab"):
            speed_views(views)
        with gr.Tab("Acceptance", id="acc", elem_id="sv-acc-tab"):
            views["acc_round"] = gr.Plot(label="acceptance per round", elem_id="sv-acc-round")
            with gr.Row():
                views["acc_hist"] = gr.Plot(label="accepted per round")
                views["acc_pos"] = gr.Plot(
                    label="acceptance by draft position", elem_id="sv-acc-pos"
                )
            runs_tab.layout(views)
        with gr.Tab("Theory", id="theory", elem_id="sv-theory-tab"):
            theory_tab.layout(views)
            sweep_tab.layout(views)
        with gr.Tab("Exactness", id="exact", elem_id="sv-exact-tab"):
            views["greedy_check"] = gr.HTML(js_on_load=None, elem_id="sv-greedy")
            check_tab.layout(views)
            verifications_tab.layout(views)
        with gr.Tab("Data", id="data", elem_id="sv-data-tab"):
            io_tab.layout(views)
        with gr.Tab("Prompt set", id="report", elem_id="sv-report-tab"):
            report_tab.layout(views)
    return views


def speed_views(views: dict[str, Any]) -> None:
    """The Speed tab: tokens against seconds, the Table 1 columns, the race replay, where a
    round's time goes, and this run's figures."""
    views["speed"] = gr.Plot(label="tokens against seconds", elem_id="sv-speed")
    views["table1"] = gr.HTML(js_on_load=None, elem_id="sv-table1")
    race.layout(views)
    views["time_split"] = gr.Plot(label="where a round's time goes", elem_id="sv-time")
    views["time_totals"] = gr.HTML(js_on_load=None, elem_id="sv-time-totals")
    views["summary"] = gr.HTML(js_on_load=None, elem_id="sv-summary")


def launch_options() -> dict[str, Any]:
    """What app.py passes to launch(): gradio 6 takes css, theme and js there (the js: the
    presentation mode's URL and keys)."""
    css = markup.css_variables() + "\n" + (ASSETS / "specviz.css").read_text(encoding="utf-8")
    return {"css": css, "theme": gr.themes.Soft(), "js": present.page_js()}


def serve(demo: gr.Blocks, deployment: Deployment | None = None, **launch: Any) -> None:
    """Queue and launch the app as a deployment sets it (host and port from
    GRADIO_SERVER_NAME and GRADIO_SERVER_PORT; further launch() arguments override)."""
    dep = deployment or Deployment.from_env()
    options: dict[str, Any] = {
        "server_name": os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        "server_port": int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        "max_file_size": io_tab.MAX_IMPORT_BYTES,
        **launch_options(),
        **launch,
    }
    demo.queue(default_concurrency_limit=dep.concurrency, max_size=dep.queue_size)
    demo.launch(**options)
