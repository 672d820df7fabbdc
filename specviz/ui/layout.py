"""The page: the Blocks built from its parts, and how it is served.

Each part builds its own components and wires its own events: the controls column
(specviz.ui.controls), the live runs (live), the named API (api), the token view with its
shading and narration (token_view), the race replay in the live speedup tab (race), and
one module per tab that has handlers (inspector_tab, runs_tab, theory_tab, sweep_tab,
check_tab, io_tab). The tabs that only show figures are laid out here. Nothing loads at
import or build time.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import gradio as gr

from specviz import render
from specviz.config import Deployment, Limits
from specviz.ui import (
    api,
    check_tab,
    controls,
    inspector_tab,
    io_tab,
    live,
    race,
    runs_tab,
    sweep_tab,
    theory_tab,
    token_view,
)
from specviz.ui.content import HOW_TO_READ
from specviz.ui.page import Page
from specviz.ui.pairs import CustomLoader, Loader, app_context
from specviz.ui.state import DEFAULTS, new_session

ASSETS = Path(__file__).resolve().parent.parent.parent / "assets"
HEADER = (
    "<h1>specviz</h1><p>Speculative decoding, decision by decision: "
    "<b>p</b> is the target's distribution, <b>q</b> the draft's.</p>"
)
PARTS = (
    controls,
    live,
    api,
    token_view,
    race,
    inspector_tab,
    runs_tab,
    theory_tab,
    sweep_tab,
    check_tab,
    io_tab,
)


def build_app(
    loader: Loader | None = None,
    pairs: list[str] | None = None,
    limits: Limits | None = None,
    deployment: Deployment | None = None,
    custom_loader: CustomLoader | None = None,
) -> gr.Blocks:
    """The Blocks app. Loads nothing: models load on the first event that needs them.

    pairs: the registry pairs offered (default: those the deployment allows, ordered for
    this machine's device); limits overrides the deployment's input limits."""
    dep = deployment or Deployment.from_env()
    dep = replace(dep, limits=limits) if limits is not None else dep
    ctx, menu = app_context(dep, loader, pairs, custom_loader)
    with gr.Blocks(title="specviz: speculative decoding, decision by decision") as demo:
        session = gr.State(new_session, time_to_live=3600)
        gr.HTML(HEADER, js_on_load=None)
        with gr.Row():
            with gr.Column(scale=1, min_width=320):
                c = controls.layout(menu, dep)
            with gr.Column(scale=3):
                v = main_views()
        page = Page(ctx, dep.concurrency, session, c, {**v, "models": c["models"]}, demo)
        for part in PARTS:
            part.wire(page)
    for fn in demo.fns.values():  # the per-visitor state's initialiser is no API either
        if fn.fn is new_session:
            fn.api_visibility = "private"
    return demo


def main_views() -> dict[str, Any]:
    """The right column: status, token view with its shading and narration, per-round view,
    the exactness note, the tabs."""
    v: dict[str, Any] = {}
    v["status"] = gr.HTML(render.status_html("ready"), js_on_load=None, elem_id="sv-status")
    token_view.layout(v)
    v["exact_note"] = gr.HTML(
        render.exact_note_html(DEFAULTS.to_dict()), js_on_load=None, elem_id="sv-exact-note"
    )
    with gr.Tabs() as tabs:
        v["tabs"] = tabs
        inspector_tab.layout(v)
        with gr.Tab("Live speedup", id="speed"):
            v["speed"] = gr.Plot(label="tokens against seconds", elem_id="sv-speed")
            v["table1"] = gr.HTML(js_on_load=None, elem_id="sv-table1")
            v["greedy"] = gr.HTML(js_on_load=None, elem_id="sv-greedy")
            v["summary"] = gr.HTML(js_on_load=None, elem_id="sv-summary")
            race.layout(v)
        with gr.Tab("Acceptance", id="acc"):
            v["acc_round"] = gr.Plot(label="acceptance per round")
            with gr.Row():
                v["acc_hist"] = gr.Plot(label="accepted per round")
                v["acc_pos"] = gr.Plot(label="acceptance by draft position")
        runs_tab.layout(v)
        theory_tab.layout(v)
        sweep_tab.layout(v)
        check_tab.layout(v)
        io_tab.layout(v)
        with gr.Tab("How to read this", id="how"):
            gr.Markdown(HOW_TO_READ)
    return v


def launch_options() -> dict[str, Any]:
    """What app.py passes to launch(): gradio 6 takes css and theme there."""
    css = render.css_variables() + "\n" + (ASSETS / "specviz.css").read_text(encoding="utf-8")
    return {"css": css, "theme": gr.themes.Soft()}


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
