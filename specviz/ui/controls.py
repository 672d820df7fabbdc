"""The left column: presets, the prompt, Run/Step/Stop, the presentation toggle and the
help text first, then the pair and the sampling controls; and the events of the controls
themselves (a preset fills them in, a new pair loads and warms, an optional setting's switch
reveals its widget).

The settings' widgets are derived from config.Settings: each setting the app offers gets
the widget its kind and Meta call for (:func:`widget`). Every control starts at Form's
default, which is the CLI's: an untouched page runs what ``python -m specviz generate`` runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from specviz.config import Deployment, Limits, Setting, Settings, form_defaults, offered
from specviz.drafters import CHOICES, auto_says
from specviz.ui import lesson_recorder, share
from specviz.ui.content import HOW_TO_READ, PRESET_FIELDS, PRESETS, apply_preset
from specviz.ui.context import AppContext
from specviz.ui.errors import user_errors
from specviz.ui.page import INTERNAL, Page
from specviz.ui.pairs import CUSTOM, compiled_by_default, pair_label
from specviz.ui.runners import Runner
from specviz.ui.state import PROMPT_CHARS_PER_TOKEN, Changes, Form
from specviz.ui.warm import warmed_pair
from specviz.views import markup


def layout(pairs: list[str], dep: Deployment, runner: Runner) -> dict[str, Any]:
    """The left column: what a person needs first (preset, prompt, Run/Step/Stop, the
    presentation toggle, the help text), then the settings (compare, compile, models,
    sampling). Every control starts at Form's default, which is the CLI's."""
    limits, f = dep.limits, Form()
    controls: dict[str, Any] = {}
    with gr.Column(elem_id="sv-quick"):
        controls["preset"] = gr.Dropdown(
            list(PRESETS), value=None, label="preset", elem_id="sv-preset"
        )
        controls["prompt"] = gr.Textbox(
            f.prompt,
            label="prompt",
            lines=4,
            max_lines=12,
            max_length=limits.max_prompt_tokens * PROMPT_CHARS_PER_TOKEN,
            elem_id="sv-prompt",
        )
        with gr.Row(elem_id="sv-buttons"):
            controls["run"] = gr.Button("Run", variant="primary", elem_id="sv-run", min_width=60)
            controls["step"] = gr.Button("Step", elem_id="sv-step", min_width=60)
            controls["stop"] = gr.Button("Stop", variant="stop", elem_id="sv-stop", min_width=60)
        controls["present"] = gr.Checkbox(
            False,
            label="presentation mode (Space or → takes a Step)",
            elem_id="sv-present-toggle",
        )
        share.layout(controls)
        lesson_recorder.layout(controls)
        with gr.Accordion("How to read this", open=False, elem_id="sv-help"):
            gr.Markdown(HOW_TO_READ)
    with gr.Column(elem_id="sv-settings"):
        settings(controls, pairs, dep, runner)
    return controls


def settings(controls: dict[str, Any], pairs: list[str], dep: Deployment, runner: Runner) -> None:
    """Compare, the compiled path, the models and the sampling controls, into c by name."""
    limits, f = dep.limits, Form()
    controls["compare"] = gr.Checkbox(
        f.compare, label="compare with autoregressive decoding (measured speedup)"
    )
    controls["compile"] = gr.Checkbox(
        compiled_by_default(),  # Form's None: the machine's default, as the CLI's
        label=compile_label(runner.name),
        elem_id="sv-compile",
        visible=runner.compiles,  # on ZeroGPU: where the start-up compiled ahead of time
    )
    with gr.Accordion("models", open=True):
        controls["pair"] = gr.Dropdown(pairs, value=pairs[0], label="pair (draft -> target)")
        controls["dtype"] = gr.Dropdown(
            ["auto", "float32", "bfloat16"], value=f.dtype, label="dtype"
        )
        with gr.Row(visible=dep.custom_models):
            controls["custom_draft"] = gr.Textbox(
                "", label="custom draft id (pair: custom)", placeholder="owner/name", max_length=200
            )
            controls["custom_target"] = gr.Textbox(
                "", label="custom target id", placeholder="owner/name", max_length=200
            )
        setting_widgets(controls, limits, "models")
        controls["models"] = gr.HTML(
            markup.status_html("models load when the page opens"),
            js_on_load=None,
            elem_id="sv-models",
        )
    with gr.Accordion("sampling", open=True):
        setting_widgets(controls, limits, "sampling")


def setting_widgets(
    controls: dict[str, Any], limits: Limits, group: str, cls: type[Settings] = Settings
) -> None:
    """The widgets of the settings in one section of the app (config.offered("app"), by
    their Meta's group), into c by form field, each at its Form default: an optional
    number's switch box, then its widget (hidden until the box is ticked)."""
    starts = form_defaults(cls)
    for s in offered("app", cls):
        if s.meta.group != group:
            continue
        visible = True
        if s.meta.switch is not None:
            box = s.meta.switch
            controls[box.name] = gr.Checkbox(starts[box.name], label=box.label, elem_id=box.elem_id)
            visible = bool(starts[box.name])
        controls[s.name] = widget(s, starts[s.name], limits, visible)


def widget(s: Setting, value: Any, limits: Limits, visible: bool = True) -> Any:
    """The widget of one setting, from its kind and Meta: a checkbox for a flag, radio
    buttons for a choice, a slider (capped by the deployment's limit) or a number box for
    a number, a text box for a list of numbers."""
    m = s.meta
    common: dict[str, Any] = {"label": m.label, "elem_id": m.elem_id, "visible": visible}
    if s.kind is bool:
        return gr.Checkbox(value, **common)
    if choices := m.choices or CHOICES.get(s.name):
        return gr.Radio(list(choices), value=value, **common)
    if s.kind is tuple:
        return gr.Textbox(value, placeholder="e.g. 2,2,1", max_lines=1, **common)
    if s.kind is str:
        return gr.Textbox(value, max_lines=1, **common)
    hi = s.high(limits)
    if m.slider is not None:
        low, top, step = m.slider
        tops = [x for x in (top, hi) if x is not None]
        top = min(tops) if tops else low
        return gr.Slider(low, top, min(value, top), step=step, **common)
    bounds: dict[str, Any] = {"minimum": m.lo}
    if hi is not None and hi < 2**53:  # a browser's numbers are doubles
        bounds["maximum"] = hi
    return gr.Number(value, precision=0 if s.kind is int else None, **bounds, **common)


def pair_updates(ctx: AppContext, form: Form) -> Iterator[Changes]:
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
        "models": markup.models_html({**loaded.describe(), "auto drafts with": auto_says(loaded)}),
    }


def wire(page: Page) -> None:
    """A preset fills the controls; a new pair (or the page opening, unless on a shared
    run) loads and warms it."""
    controls = page.controls
    controls["preset"].change(
        user_errors(apply_preset),
        [controls["preset"]],
        [controls[f] for f in PRESET_FIELDS],
        api_name="preset",
        **page.quiet,
    )
    for s in offered("app"):  # an optional number's switch reveals its widget
        if s.meta.switch is not None:
            controls[s.meta.switch.name].change(
                lambda on: gr.update(visible=bool(on)),
                [controls[s.meta.switch.name]],
                [controls[s.name]],
                queue=False,
                show_progress="hidden",
                **INTERNAL,
            )
    load = page.stream(lambda *values: pair_updates(page.ctx, page.form(values)))
    options = {**page.live, **INTERNAL}
    for comp in (controls["pair"], controls["dtype"]):
        comp.change(load, page.inputs, page.outputs, **options)
    for comp in (controls["custom_draft"], controls["custom_target"]):
        comp.submit(load, page.inputs, page.outputs, **options)
    # the page's load event (specviz.ui.share) sets pair_go unless it shows a shared run
    controls["pair_go"].change(load, page.inputs, page.outputs, **options)


def compile_label(runner: str) -> str:
    """The compiled box's words: how this machine's compiled path is compiled."""
    from specviz.backend import auto_backend
    from specviz.models import resolve_device

    if runner == "zerogpu":
        return "compiled path (compiled ahead of time at start-up, static KV cache)"
    if auto_backend(resolve_device("auto")) == "aoti":
        return "compiled path (compiled ahead of time by the set-up step, static KV cache)"
    return "compiled path (torch.compile, static KV cache; the first run compiles)"
