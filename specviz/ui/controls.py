"""The left column: presets, the prompt, Run/Step/Stop, the presentation toggle and the
help text first, then the pair and the sampling controls; and the events of the controls
themselves (a preset fills them in, a new pair loads and warms, the draft-temperature
switch reveals its slider).

Every control starts at Form's default, which is the CLI's: an untouched page runs what
``python -m specviz generate`` runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from specviz.config import DRAFTERS, VERIFICATIONS, Deployment, verification_label
from specviz.ui.content import HOW_TO_READ, PRESET_FIELDS, PRESETS, apply_preset
from specviz.ui.errors import user_errors
from specviz.ui.page import INTERNAL, Page
from specviz.ui.pairs import CUSTOM, AppContext, compiled_by_default, pair_label, zero_gpu
from specviz.ui.state import PROMPT_CHARS_PER_TOKEN, Form, View
from specviz.ui.warm import warmed_pair
from specviz.views import markup


def layout(pairs: list[str], dep: Deployment) -> dict[str, Any]:
    """The left column: what a person needs first (preset, prompt, Run/Step/Stop, the
    presentation toggle, the help text), then the settings (compare, compile, models,
    sampling). Every control starts at Form's default, which is the CLI's."""
    limits, f = dep.limits, Form()
    c: dict[str, Any] = {}
    with gr.Column(elem_id="sv-quick"):
        c["preset"] = gr.Dropdown(list(PRESETS), value=None, label="preset", elem_id="sv-preset")
        c["prompt"] = gr.Textbox(
            f.prompt,
            label="prompt",
            lines=4,
            max_lines=12,
            max_length=limits.max_prompt_tokens * PROMPT_CHARS_PER_TOKEN,
            elem_id="sv-prompt",
        )
        with gr.Row(elem_id="sv-buttons"):
            c["run"] = gr.Button("Run", variant="primary", elem_id="sv-run", min_width=60)
            c["step"] = gr.Button("Step", elem_id="sv-step", min_width=60)
            c["stop"] = gr.Button("Stop", variant="stop", elem_id="sv-stop", min_width=60)
        c["present"] = gr.Checkbox(
            False,
            label="presentation view (Space or → takes a Step)",
            elem_id="sv-present-toggle",
        )
        with gr.Accordion("How to read this", open=False, elem_id="sv-help"):
            gr.Markdown(HOW_TO_READ)
    with gr.Column(elem_id="sv-settings"):
        settings(c, pairs, dep)
    return c


def settings(c: dict[str, Any], pairs: list[str], dep: Deployment) -> None:
    """Compare, the compiled path, the models and the sampling controls, into c by name."""
    limits, f = dep.limits, Form()
    c["compare"] = gr.Checkbox(
        f.compare, label="compare with autoregressive decoding (measured speedup)"
    )
    c["compile"] = gr.Checkbox(
        compiled_by_default(),  # Form's None: the machine's default, as the CLI's
        label="compiled path (torch.compile, static KV cache; the first run compiles)",
        elem_id="sv-compile",
        visible=not zero_gpu(),  # ZeroGPU has no torch.compile
    )
    with gr.Accordion("models", open=True):
        c["pair"] = gr.Dropdown(pairs, value=pairs[0], label="pair (draft -> target)")
        c["dtype"] = gr.Dropdown(["auto", "float32", "bfloat16"], value=f.dtype, label="dtype")
        with gr.Row(visible=dep.custom_models):
            c["custom_draft"] = gr.Textbox(
                "", label="custom draft id (pair: custom)", placeholder="owner/name", max_length=200
            )
            c["custom_target"] = gr.Textbox(
                "", label="custom target id", placeholder="owner/name", max_length=200
            )
        c["drafter"] = gr.Radio(list(DRAFTERS), value=f.drafter, label="drafter")
        c["models"] = gr.HTML(
            markup.status_html("models load when the page opens"),
            js_on_load=None,
            elem_id="sv-models",
        )
    with gr.Accordion("sampling", open=True):
        c["gamma"] = gr.Slider(
            1,
            limits.max_gamma,
            min(f.gamma, limits.max_gamma),
            step=1,
            label="gamma (drafts/round)",
            elem_id="sv-gamma",
        )
        c["adaptive_gamma"] = gr.Checkbox(f.adaptive_gamma, label="adaptive gamma")
        c["temperature"] = gr.Slider(
            0, 2, f.temperature, step=0.05, label="temperature", elem_id="sv-temperature"
        )
        c["own_draft_temperature"] = gr.Checkbox(
            f.own_draft_temperature,
            label="draft uses its own temperature (changes q only: the output stays exact, "
            "acceptance drops)",
            elem_id="sv-own-draft-temp",
        )
        c["draft_temperature"] = gr.Slider(
            0.05,
            3,
            f.draft_temperature,
            step=0.05,
            label="draft temperature",
            visible=f.own_draft_temperature,
            elem_id="sv-draft-temp",
        )
        c["top_p"] = gr.Slider(0.05, 1, f.top_p, step=0.05, label="top-p", elem_id="sv-top-p")
        c["top_k"] = gr.Number(f.top_k, precision=0, minimum=0, label="top-k (0 = off)")
        c["greedy"] = gr.Checkbox(f.greedy, label="greedy (argmax p and q)")
        c["verification"] = gr.Radio(
            [(verification_label(v), v) for v in VERIFICATIONS],
            value=f.verification,
            label="verification: rejection u < p/q, or exact match (the target's own sample "
            "must equal the draft), both lossless; typical and top-k-match are lossy",
            elem_id="sv-verification",
        )
        c["typical_threshold"] = gr.Number(
            f.typical_threshold,
            minimum=0,
            maximum=1,
            label="typical (lossy): threshold",
            elem_id="sv-typical-threshold",
        )
        c["typical_alpha"] = gr.Number(
            f.typical_alpha,
            minimum=0,
            maximum=1,
            label="typical (lossy): alpha",
            elem_id="sv-typical-alpha",
        )
        c["match_top_k"] = gr.Number(
            f.match_top_k,
            precision=0,
            minimum=1,
            label="top-k-match (lossy): k",
            elem_id="sv-match-top-k",
        )
        c["max_new_tokens"] = gr.Slider(
            1,
            min(512, limits.max_new_tokens),
            min(f.max_new_tokens, limits.max_new_tokens),
            step=1,
            label="max new tokens",
            elem_id="sv-max-new",
        )
        c["seed"] = gr.Number(f.seed, precision=0, minimum=0, label="seed")


def pair_updates(ctx: AppContext, form: Form) -> Iterator[View]:
    """Load (and warm) a pair with visible progress, then show where each model runs."""
    pair = pair_label(form)
    if form.pair == CUSTOM and not (form.custom_draft.strip() and form.custom_target.strip()):
        yield {"status": markup.status_html("custom pair: enter a draft id and a target id")}
        return
    yield {
        "status": markup.status_html(
            f"loading pair {pair!r} (the first load takes a while) ...", "busy"
        ),
        "models": markup.status_html("loading ...", "busy"),
    }
    loaded = ctx.pair(form)
    try:
        warmed_pair(ctx, form)
    except ValueError:
        pass  # the form is not valid yet; the first Run warms the pair instead
    yield {
        "status": markup.status_html(f"pair {pair!r} ready: press Run or Step"),
        "models": markup.models_html(loaded.describe()),
    }


def wire(page: Page) -> None:
    """A preset fills the controls; a new pair (or the page opening) loads and warms it."""
    c = page.controls
    c["preset"].change(
        user_errors(apply_preset),
        [c["preset"]],
        [c[f] for f in PRESET_FIELDS],
        api_name="preset",
        **page.quiet,
    )
    c["own_draft_temperature"].change(
        lambda on: gr.Slider(visible=bool(on)),
        [c["own_draft_temperature"]],
        [c["draft_temperature"]],
        queue=False,
        show_progress="hidden",
        **INTERNAL,
    )
    load = page.stream(lambda *values: pair_updates(page.ctx, page.form(values)))
    options = {**page.live, **INTERNAL}
    for comp in (c["pair"], c["dtype"]):
        comp.change(load, page.inputs, page.outputs, **options)
    for comp in (c["custom_draft"], c["custom_target"]):
        comp.submit(load, page.inputs, page.outputs, **options)
    page.blocks.load(load, page.inputs, page.outputs, **options)
