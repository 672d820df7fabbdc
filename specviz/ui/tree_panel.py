"""The tree panel under the live view: the selected (else the last) tree round drawn as a
tree (specviz.views.tree_view), and clicks on its nodes sent to the decision inspector with
p, q, p' at the node's trial, u and the verdict. Clicking a token or a round row of a tree
round draws that round's tree. Reads the stored trace only: no model call. Empty while the
run has no tree rounds.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from specviz.ui import inspector_tab
from specviz.ui.assets import script
from specviz.ui.frames import tree_frame
from specviz.ui.page import INTERNAL, Page
from specviz.ui.state import Changes, Session
from specviz.views import decision_panel, tree_view


def layout(views: dict[str, Any]) -> None:
    """The tree drawing, into the page's components by name."""
    # a click on a node sends its round and node index; on the added token, as in the token
    # view, its round and position
    views["tree_view"] = gr.HTML(
        "", js_on_load=script("pick"), elem_id="sv-tree-view", max_height=300
    )


def node_changes(trace: Any, round_index: int, node: int) -> Changes:
    """The inspector on one tree node: its round and position, p, q, p', u, the verdict."""
    rnd, n = tree_view.node_at(trace, int(round_index), int(node))
    return {
        "insp_round": rnd.index + 1,
        "insp_pos": rnd.start + n.depth - 1,
        "insp_plot": tree_view.node_figure(rnd, n),
        "verdict": tree_view.node_verdict_html(rnd, n),
        "decision": decision_panel.node_panel_html(rnd, n, tree_view.node_verdict(rnd, n)),
    }


def on_click(sess: Session, evt: gr.EventData) -> Changes:
    """A click in the tree: a node opens its trial, the added token its decision."""
    data = getattr(evt, "_data", None) or {}
    if "node" not in data:
        return inspector_tab.on_click(sess, evt)
    try:
        return node_changes(sess.spec, data.get("round"), data["node"])
    except (ValueError, TypeError):
        return {}


def on_round_click(sess: Session, evt: gr.EventData) -> Changes:
    """A click on a token or a round row of a tree round draws that round's tree."""
    data = getattr(evt, "_data", None) or {}
    r = data.get("round")
    spec = sess.spec
    if not isinstance(r, int) or spec is None or not 0 <= r < len(spec.rounds):
        return {}
    if not spec.rounds[r].nodes:
        return {}
    return {"tree_view": tree_frame(spec, r)}


def wire(page: Page) -> None:
    views = page.components

    def click(sess: Session, evt: gr.EventData) -> dict[Any, Any]:
        out = on_click(sess, evt)
        return page.keyed({**out, **inspector_tab.opened()}) if out else gr.skip()

    def select(sess: Session, evt: gr.EventData) -> dict[Any, Any]:
        return page.keyed(on_round_click(sess, evt))

    views["tree_view"].click(click, [page.session], page.outputs, **{**page.quiet, **INTERNAL})
    for view in (views["tokens"], views["rounds"]):
        view.click(select, [page.session], [views["tree_view"]], **{**page.quiet, **INTERNAL})
