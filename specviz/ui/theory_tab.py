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

FEATURE_DRAFTING = """**Drafting from the target's features.** What vLLM and SGLang deploy is
rarely a second model: it is a small head on the target's own features. Medusa (Cai et al.,
2024) adds heads that each guess one later token from the last hidden state. EAGLE (Li et
al., 2024) drafts autoregressively at the feature level: one decoder layer reads the
target's last hidden state and the next token's embedding, predicts the next hidden state,
and the target's own output layer turns it into q. EAGLE-2 grows a dynamic tree from the
head's confidence; EAGLE-3 reads several of the target's layers and trains on its own
drafts, and SGLang reports Llama-3.1-8B going from 158 to 373 tokens/s with it on an H100.
specviz's `eagle` drafter is an EAGLE-1 head, trained here on the target's own text
(`python -m specviz train-head`). Its q is the head's distribution, so every rule on this
page stays exact with it; what changes is c, since one layer costs a fraction of a model."""


def layout(views: dict[str, Any]) -> None:
    """The theory and projection figures and the c slider, into the page's components by name."""
    views["feature_drafting"] = gr.Markdown(FEATURE_DRAFTING, elem_id="sv-feature-drafting")
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
