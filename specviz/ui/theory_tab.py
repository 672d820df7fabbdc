"""Theory and projection (in the Theory tab, above the measured sweep): Leviathan's expected
speedup against gamma from the measured alpha and c, and a projection for a cost ratio c the
visitor chooses (labelled as a projection, not a measurement)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from specviz import metrics
from specviz.ui.errors import user_errors
from specviz.ui.frames import no_alpha_figure
from specviz.ui.page import Page
from specviz.ui.state import Session, as_float
from specviz.views import figures, theory_figures


def layout(views: dict[str, Any]) -> None:
    """The theory and projection figures and the c slider, into the page's components by name."""
    views["theory"] = gr.Plot(
        label="expected speedup against gamma (Leviathan)", elem_id="sv-theory-plot"
    )
    views["tree_compare"] = gr.HTML("", js_on_load=None, elem_id="sv-tree-compare")
    views["c_user"] = gr.Slider(
        0.01,
        1.0,
        0.1,
        step=0.01,
        label="projection: cost ratio c of a draft step to a bigger target's step",
    )
    views["projection"] = gr.Plot(
        label="projection (not a measurement)", elem_id="sv-projection-plot"
    )


def projection_update(session: Session, c: float) -> Any:
    """The projection for a user-chosen cost ratio c from the measured alpha."""
    spec = session.spec
    if spec is None or not spec.rounds:
        return figures.empty_figure("run first: the projection uses the measured alpha")
    c = as_float("c", c)
    if not 0 < c <= 10:
        raise ValueError(f"c must be in (0, 10], got {c}")
    _, alpha = metrics.expected_acceptance(spec)  # sum p q under exact match
    if alpha is None:
        return no_alpha_figure()
    return theory_figures.projection_figure(alpha, c, spec.settings.gamma)


def wire(page: Page) -> None:
    views = page.components
    views["c_user"].change(
        user_errors(projection_update),
        [page.session, views["c_user"]],
        [views["projection"]],
        api_name="projection",
        **page.quiet,
    )
