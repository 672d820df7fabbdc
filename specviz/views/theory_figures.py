"""Leviathan's expected speedup against gamma as figures: against the measured point (with
the refined prediction where the verify call's cost was measured), and projected for a
chosen cost ratio c. From numbers alone: no model call, no gradio import."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from specviz import metrics
from specviz.views.figures import lay_out
from specviz.views.palette import COLORS
from specviz.views.style import figure


def theory_figure(
    alpha: float,
    c: float,
    gamma: int,
    measured: float | None,
    verify_steps: dict[int, float] | None = None,
) -> go.Figure:
    """Leviathan's expected walltime improvement against gamma, with the measured point,
    and the refined prediction where the verify call's cost was measured (width -> target
    steps): Leviathan prices that call at one step."""
    fig, _ = _expected_curve(alpha, c, "expected (Leviathan)", {"color": COLORS["p"]})
    if verify_steps:
        gs = [g for g in metrics.GAMMAS if g + 1 in verify_steps]
        fig.add_scatter(
            x=gs,
            y=[metrics.refined_speedup(alpha, g, c, verify_steps[g + 1]) for g in gs],
            mode="lines+markers",
            name="refined: the verify call at its measured cost",
            line={"color": COLORS["q"], "dash": "dot"},
        )
    if measured is not None:
        marker = {"color": COLORS["rejected"], "size": 14, "symbol": "star"}
        fig.add_scatter(x=[gamma], y=[measured], mode="markers", name="measured", marker=marker)
    best = metrics.best_gamma(alpha, c)
    return lay_out(
        fig,
        f"theory against measurement: alpha = {alpha:.2f}, c = {c:.2f}, best gamma = {best}",
        "gamma (drafts per round)",
        "speedup",
        340,
    )


def projection_figure(alpha: float, c: float, gamma: int) -> go.Figure:
    """Projected speedup for a chosen cost ratio c: a projection, not a measurement."""
    line = {"color": COLORS["resampled"], "dash": "dash"}
    fig, ys = _expected_curve(alpha, c, "projection", line)
    if gamma in metrics.GAMMAS:
        marker = {"color": COLORS["resampled"], "size": 12}
        fig.add_scatter(
            x=[gamma], y=[ys[gamma - 1]], mode="markers", name="your gamma", marker=marker
        )
    fig.add_hline(y=1.0, line={"color": COLORS["ar"], "dash": "dot"})
    return lay_out(
        fig,
        f"PROJECTION, not a measurement: measured alpha = {alpha:.2f}, assumed c = {c:.2f}",
        "gamma",
        "projected speedup",
        340,
    )


def _expected_curve(
    alpha: float, c: float, name: str, line: dict[str, Any]
) -> tuple[go.Figure, list[float]]:
    """A figure holding Leviathan's expected speedup at every gamma in metrics.GAMMAS as one
    line, and the speedups it draws."""
    gammas, ys = metrics.expected_curve(alpha, c)
    fig = figure()
    fig.add_scatter(x=gammas, y=ys, mode="lines+markers", name=name, line=line)
    return fig, ys
