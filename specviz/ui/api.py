"""The named API, ``/generate``, for gradio_client users and notebooks: the CLI's
``generate`` parameters under the CLI's names and defaults, answered with the JSON trace of
``generate --json`` (plus the autoregressive trace and the speedup when compare is set).
The settings among its parameters are derived from config.Settings (config.offered("api")).

    from gradio_client import Client
    trace = Client("http://127.0.0.1:7860").predict(prompt="Why is the sky blue?",
                                                    compare=True, api_name="/generate")
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import gradio as gr

from specviz import metrics
from specviz.config import Setting, offered
from specviz.trace import Trace
from specviz.ui.context import AppContext
from specviz.ui.errors import user_errors
from specviz.ui.live import complete_traces
from specviz.ui.page import Page
from specviz.ui.pairs import CUSTOM
from specviz.ui.state import Controls, Form, convert

POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD


def api_result(spec: Trace, ar: Trace | None) -> dict[str, Any]:
    """The named API's answer: the trace as `generate --json` prints it, plus the
    autoregressive trace and the measured speedup when both ran."""
    out = spec.to_dict()
    if ar is not None:
        out["ar"] = ar.to_dict()
        out["speedup"] = metrics.speedup(ar, spec) if ar.token_ids and spec.token_ids else None
    return out


# The parameters that are not settings, before and after the settings the API offers.
HEAD = (
    inspect.Parameter("prompt", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str),
    inspect.Parameter("pair", POSITIONAL, default="default", annotation=str),
    inspect.Parameter("draft", POSITIONAL, default=None, annotation=str | None),
    inspect.Parameter("target", POSITIONAL, default=None, annotation=str | None),
)
TAIL = (inspect.Parameter("compare", POSITIONAL, default=False, annotation=bool),)
HELP = {
    "prompt": "the prompt",
    "pair": "a pair this app offers",
    "draft": "a custom pair's draft id (with target)",
    "target": "a custom pair's target id (with draft)",
    "compare": "also run the autoregressive baseline and return it with the speedup",
}


def api_type(s: Setting) -> Any:
    """The parameter's type: the setting's kind (a tuple arrives as a list), or None too."""
    kind = list[s.item] if s.kind is tuple else s.kind
    return kind | None if s.optional else kind


def generate_signature(form: type[Controls] = Form) -> inspect.Signature:
    """The parameters of /generate: the prompt and the pair, each setting the API offers
    (config.offered("api")) under its name with its default, and compare."""
    settings = tuple(
        inspect.Parameter(
            s.name,
            POSITIONAL,
            default=list(s.default) if isinstance(s.default, tuple) else s.default,
            annotation=api_type(s),
        )
        for s in offered("api", form.settings_class)
    )
    return inspect.Signature([*HEAD, *settings, *TAIL], return_annotation=dict[str, Any])


def api_form(form: type[Controls], values: dict[str, Any]) -> tuple[Controls, dict[str, Any]]:
    """The Form of one /generate call from its arguments, and the values of the settings
    the API offers but the app does not (applied over the Form's settings). An optional
    number's switch is on when the argument is given."""
    cls = form.settings_class
    on_page = {s.name for s in offered("app", cls)}
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for s in offered("api", cls):
        x = values[s.name]
        if s.name not in on_page:
            extra[s.name] = None if x is None and s.optional else convert(s, x)
            continue
        if s.meta.switch is not None:
            fields[s.meta.switch.name] = x is not None
        fields[s.name] = x
    draft, target = values["draft"], values["target"]
    made = form(
        prompt=values["prompt"],
        pair=CUSTOM if (draft or target) else values["pair"],
        custom_draft=draft or "",
        custom_target=target or "",
        compare=values["compare"],
        **fields,
    )
    return made, extra


def generate_endpoint(ctx: AppContext, form: type[Controls] = Form) -> Callable[..., Any]:
    """The named API endpoint /generate: the CLI's `generate` parameters, by the CLI's names
    and with its defaults; returns the JSON trace (plus the baseline with compare). Its
    signature is derived from the settings (see :func:`generate_signature`): gradio reads
    the function's signature and type hints to describe the endpoint."""
    signature = generate_signature(form)

    def generate(*args: Any, **kwargs: Any) -> dict[str, Any]:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = bound.arguments
        if not isinstance(values["prompt"], str) or not values["prompt"].strip():
            raise ValueError("prompt is empty")
        made, extra = api_form(form, values)
        settings = ctx.settings(made)
        settings = settings.with_(**extra) if extra else settings
        return api_result(*complete_traces(ctx, made, settings))

    helps = {s.name: s.meta.help or s.meta.label for s in offered("api", form.settings_class)}
    helps = {**HELP, **helps}
    generate.__signature__ = signature
    generate.__annotations__ = {
        **{p.name: p.annotation for p in signature.parameters.values()},
        "return": signature.return_annotation,
    }
    generate.__doc__ = "\n".join(
        [
            "Generate speculatively (and, with compare, autoregressively) and return the trace.",
            "",
            "Args:",
            *(f"    {name}: {helps[name]}" for name in signature.parameters),
        ]
    )
    return user_errors(generate)


def wire(page: Page) -> None:
    gr.api(generate_endpoint(page.ctx), api_name="generate", **page.model_queue)
