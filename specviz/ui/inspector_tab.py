"""The decision inspector (the Decision tab): p and q over the top tokens, min(1, p/q)
against the draw u, the residual a resampled token came from. Clicking a token (or a round
row) opens it on that token, and the decision panel beside the tokens
(specviz.views.decision_panel) shows the same decision, brought into sight on a phone; a
round and a position can also be typed. Rounds are numbered from 1 here as everywhere on
the page (the trace's index + 1). Reads the stored trace: no model call.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from specviz.ui.assets import script
from specviz.ui.frames import inspect_changes
from specviz.ui.page import INTERNAL, Page
from specviz.ui.state import Changes, Session, as_int
from specviz.views import markup


def layout(views: dict[str, Any]) -> None:
    """The inspector's components, into the page's components by name."""
    with gr.Row():
        views["insp_round"] = gr.Number(
            None,
            precision=0,
            label="round (from 1; empty: from position)",
            elem_id="sv-insp-round",
        )
        views["insp_pos"] = gr.Number(None, precision=0, minimum=0, label="output position")
        views["inspect"] = gr.Button("Inspect", elem_id="sv-inspect")
    views["verdict"] = gr.HTML(
        markup.status_html("click a token, or choose a round and position"),
        js_on_load=None,
        elem_id="sv-verdict",
    )
    views["insp_plot"] = gr.Plot(label="p and q", elem_id="sv-insp-plot")


def typed_changes(trace: Any, shown_round: Any, pos: Any) -> Changes:
    """The inspector for a typed round, numbered from 1 as the page shows it (empty: the
    round that placed the position), and a typed output position."""
    if trace is None or not trace.rounds or pos is None or shown_round is None:
        return inspect_changes(trace, None, pos)  # refused unless only the round is empty
    n, last = as_int("round", shown_round), len(trace.rounds)
    if not isinstance(n, int) or not 1 <= n <= last:
        raise ValueError(f"round {n} does not exist: this run has rounds 1 to {last}")
    try:
        return inspect_changes(trace, n - 1, pos)
    except ValueError:
        raise ValueError(f"round {n} placed no token at position {pos}") from None


def on_click(sess: Session, evt: gr.EventData) -> dict[str, Any]:
    """A click on a token span: its round and position come from the token script."""
    data = getattr(evt, "_data", None) or {}
    if "pos" not in data:
        return {}
    try:
        return inspect_changes(sess.spec, data.get("round"), data["pos"])
    except (ValueError, TypeError):
        return {}


def opened() -> dict[str, Any]:
    """The update that brings this tab to the front (built per event: a Tabs made while
    the page is being built would become a component of its own)."""
    return {"tabs": gr.Tabs(selected="insp")}


def wire(page: Page) -> None:
    """The Inspect button, and clicks on the token view and the round rows."""
    views = page.components

    def pick(sess: Session, rnd: Any, pos: Any) -> dict[str, Any]:
        return {**typed_changes(sess.spec, rnd, pos), **opened()}

    def click(sess: Session, evt: gr.EventData) -> dict[Any, Any]:
        out = on_click(sess, evt)
        return page.keyed({**out, **opened()} if out else {})

    views["inspect"].click(
        page.once(pick),
        [page.session, views["insp_round"], views["insp_pos"]],
        page.outputs,
        api_name="inspect",
        **page.quiet,
    )
    # then the decision panel beside the tokens comes into sight (a phone scrolls to it)
    into_sight = script("decision-scroll", PANEL="#sv-decision")
    for view in (views["tokens"], views["rounds"]):
        clicked = view.click(click, [page.session], page.outputs, **{**page.quiet, **INTERNAL})
        clicked.then(None, None, None, js=into_sight, queue=False, **INTERNAL)
