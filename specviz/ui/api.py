"""The named API, ``/generate``, for gradio_client users and notebooks: the CLI's
``generate`` parameters under the CLI's names and defaults, answered with the JSON trace of
``generate --json`` (plus the autoregressive trace and the speedup when compare is set).

    from gradio_client import Client
    trace = Client("http://127.0.0.1:7860").predict(prompt="Why is the sky blue?",
                                                    compare=True, api_name="/generate")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from specviz import metrics
from specviz.trace import Trace
from specviz.ui.errors import user_errors
from specviz.ui.live import complete_traces
from specviz.ui.page import Page
from specviz.ui.pairs import CUSTOM, AppContext
from specviz.ui.state import DEFAULTS, Form


def api_result(spec: Trace, ar: Trace | None) -> dict[str, Any]:
    """The named API's answer: the trace as `generate --json` prints it, plus the
    autoregressive trace and the measured speedup when both ran."""
    out = spec.to_dict()
    if ar is not None:
        out["ar"] = ar.to_dict()
        out["speedup"] = metrics.speedup(ar, spec) if ar.token_ids and spec.token_ids else None
    return out


def generate_endpoint(ctx: AppContext) -> Callable[..., dict[str, Any]]:
    """The named API endpoint /generate: the CLI's `generate` parameters, by the CLI's names
    and with its defaults; returns the JSON trace (plus the baseline with compare)."""

    @user_errors
    def generate(
        prompt: str,
        pair: str = "default",
        draft: str | None = None,
        target: str | None = None,
        drafter: str = DEFAULTS.drafter,
        gamma: int = DEFAULTS.gamma,
        adaptive_gamma: bool = DEFAULTS.adaptive_gamma,
        temperature: float = DEFAULTS.temperature,
        draft_temperature: float | None = DEFAULTS.draft_temperature,
        top_p: float = DEFAULTS.top_p,
        top_k: int = DEFAULTS.top_k,
        greedy: bool = DEFAULTS.greedy,
        max_new_tokens: int = DEFAULTS.max_new_tokens,
        seed: int = DEFAULTS.seed,
        compare: bool = False,
        verification: str = DEFAULTS.verification,
        typical_threshold: float = DEFAULTS.typical_threshold,
        typical_alpha: float = DEFAULTS.typical_alpha,
        match_top_k: int = DEFAULTS.match_top_k,
    ) -> dict[str, Any]:
        """Generate speculatively (and, with compare, autoregressively) and return the trace."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("prompt is empty")
        form = Form(
            prompt=prompt,
            pair=CUSTOM if (draft or target) else pair,
            custom_draft=draft or "",
            custom_target=target or "",
            drafter=drafter,
            gamma=gamma,
            adaptive_gamma=adaptive_gamma,
            temperature=temperature,
            own_draft_temperature=draft_temperature is not None,
            draft_temperature=draft_temperature,
            top_p=top_p,
            top_k=top_k,
            greedy=greedy,
            max_new_tokens=max_new_tokens,
            seed=seed,
            compare=compare,
            verification=verification,
            typical_threshold=typical_threshold,
            typical_alpha=typical_alpha,
            match_top_k=match_top_k,
        )
        return api_result(*complete_traces(ctx, form, ctx.settings(form)))

    return generate


def wire(page: Page) -> None:
    gr.api(generate_endpoint(page.ctx), api_name="generate", **page.model_queue)
