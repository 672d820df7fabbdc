"""The race replay under the live speedup chart: after a compared run, the speculative and
autoregressive texts fill side by side on one clock from their measured timelines, at
0.25x, 1x or 2x (specviz.views.race_replay). One page update per replay: the tokens appear by CSS
animation delays, so a long run replays without further traffic. Nothing is re-run.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from specviz.ui.frames import NEEDS_COMPARE
from specviz.ui.page import Page
from specviz.ui.state import Changes, Session, as_float
from specviz.views.race_replay import SPEEDS, check_speed, replay_animation_html


def layout(views: dict[str, Any]) -> None:
    """The speed choice, the button and the replay's view."""
    with gr.Row(equal_height=True):
        views["race_speed"] = gr.Radio(
            [(f"{s:g}x", s) for s in SPEEDS],
            value=1.0,
            label="race replay speed (replay of measured timings)",
            elem_id="sv-race-speed",
            scale=3,
        )
        views["race_play"] = gr.Button("Replay race", elem_id="sv-race-play", scale=1)
    views["race"] = gr.HTML(js_on_load=None, elem_id="sv-race")


def race_update(session: Session, speed: Any) -> Changes:
    """The whole replay of the session's compared run as one update."""
    spec, ar = session.spec, session.ar
    if spec is None or ar is None or not spec.token_ids or not ar.token_ids:
        raise ValueError(NEEDS_COMPARE)
    speed = check_speed(as_float("speed", speed))
    session.race_nonce += 1
    return {"race": replay_animation_html(spec, ar, speed, session.race_nonce)}


def wire(page: Page) -> None:
    views = page.components
    views["race_play"].click(
        page.once(race_update),
        [page.session, views["race_speed"]],
        [views["race"]],
        api_name="race",
        **page.quiet,
    )
