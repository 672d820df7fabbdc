"""The token view and what sits with it: the status legend, the switch that shades each
drafted token by its overlap sum_x min(p, q) (with its legend), the token view with the
decision panel and the per-round view beside it, and the narration box where Step tells the
round just taken in plain sentences.

The decision panel (specviz.views.decision_panel) shows the decision the inspector shows:
the token clicked, the round a Step took, the first rejection after a Run
(specviz.ui.frames.inspect_changes fills both), where it is seen without leaving the tokens.

Shading is a per-visitor switch kept in the Session, so the live, final, replayed and
reloaded views all honour it (specviz.ui.frames.sync_rounds renders with it). Narration reads the
stored round only (specviz.views.narration): no model call.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from specviz.ui.assets import Js, script
from specviz.ui.errors import user_errors
from specviz.ui.frames import narration_hint, set_shade
from specviz.ui.page import Page
from specviz.ui.state import Changes, Session
from specviz.views import decision_panel, markup

NO_OVERLAPS = "this trace recorded no overlaps (an autoregressive run or a minimal trace)"


def layout(views: dict[str, Any]) -> None:
    """The legends, the shading switch, the token view with the decision panel and the
    per-round view beside it, the narration box."""
    with gr.Row(elem_id="sv-legend-row"):
        gr.HTML(markup.legend_html(), js_on_load=None, scale=4, elem_id="sv-legend")
        views["shade"] = gr.Checkbox(
            False,
            label="shade drafts by overlap sum_x min(p, q)",
            elem_id="sv-shade",
            scale=1,
            min_width=180,
        )
    views["overlap_legend"] = gr.HTML("", js_on_load=None, elem_id="sv-overlap-legend")
    with gr.Row(elem_id="sv-token-row") as row:  # veiled by the verifier game (its class)
        views["token_row"] = row
        views["tokens"] = view("tokens", markup.tokens_html([]), scale=3)
        # beside the tokens: the selected decision above the round table
        with gr.Column(scale=2, min_width=300, elem_id="sv-side"):
            views["decision"] = gr.HTML(
                decision_panel.hint_html(), js_on_load=None, elem_id="sv-decision"
            )
            views["rounds"] = view("rounds", markup.rounds_html([]))
    views["narration"] = gr.HTML(narration_hint(), js_on_load=None, elem_id="sv-narration")


def view(name: str, html: str, **options: Any) -> gr.HTML:
    """The token view or the round table: a click on a token sends its round and position,
    and the view keeps its newest line in sight."""
    return gr.HTML(
        html,
        js_on_load=Js(script("pick") + "\n" + script("follow-end")),
        elem_id=f"sv-{name}",
        max_height=420,
        autoscroll=True,
        **options,
    )


def shade_legend(session: Session) -> str:
    """The shading's legend while it is on ("" while off)."""
    if not session.shade:
        return ""
    if session.spec is not None and not session.shading:
        return markup.status_html(f"Shading: {NO_OVERLAPS}.")
    return markup.overlap_legend_html()


def shade_update(session: Session, on: bool) -> Changes:
    """Switch the overlap shading: the token view re-rendered from the cached rounds."""
    set_shade(session, bool(on))
    out: Changes = {"overlap_legend": shade_legend(session)}
    if session.spec is not None:
        out["tokens"] = markup.tokens_html(session.spans, session.spec.prompt)
    return out


def wire(page: Page) -> None:
    views = page.components
    views["shade"].change(
        user_errors(lambda s, on: page.keyed(shade_update(s, on))),
        [page.session, views["shade"]],
        [views["overlap_legend"], views["tokens"]],
        api_name="shade",
        **page.quiet,
    )
