"""Leviathan's expected speedup against gamma as figures: against the measured point (with
the refined prediction where the verify call's cost was measured), and projected for a
chosen cost ratio c. From numbers alone: no model call, no gradio import."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from specviz import metrics
from specviz.views.figures import hline, layout
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
    curve, _ = _expected_curve(alpha, c, "expected (Leviathan)", {"color": COLORS["p"]})
    data = [curve]
    if verify_steps:
        gs = [g for g in metrics.GAMMAS if g + 1 in verify_steps]
        refined = {
            "type": "scatter",
            "x": gs,
            "y": [metrics.refined_speedup(alpha, g, c, verify_steps[g + 1]) for g in gs],
            "mode": "lines+markers",
            "name": "refined: the verify call at its measured cost",
            "line": {"color": COLORS["q"], "dash": "dot"},
        }
        data.append(refined)
    if measured is not None:
        marker = {"color": COLORS["rejected"], "size": 14, "symbol": "star"}
        point = {"x": [gamma], "y": [measured], "mode": "markers", "marker": marker}
        data.append({"type": "scatter", **point, "name": "measured"})
    best = metrics.best_gamma(alpha, c)
    shape = layout(
        f"theory against measurement: alpha = {alpha:.2f}, c = {c:.2f}, best gamma = {best}",
        "gamma (drafts per round)",
        "speedup",
        340,
    )
    return figure(data=data, layout=shape)


def projection_figure(alpha: float, c: float, gamma: int) -> go.Figure:
    """Projected speedup for a chosen cost ratio c: a projection, not a measurement."""
    line = {"color": COLORS["resampled"], "dash": "dash"}
    curve, ys = _expected_curve(alpha, c, "projection", line)
    data = [curve]
    if gamma in metrics.GAMMAS:
        marker = {"color": COLORS["resampled"], "size": 12}
        point = {"x": [gamma], "y": [ys[gamma - 1]], "mode": "markers", "marker": marker}
        data.append({"type": "scatter", **point, "name": "your gamma"})
    shape = layout(
        f"PROJECTION, not a measurement: measured alpha = {alpha:.2f}, assumed c = {c:.2f}",
        "gamma",
        "projected speedup",
        340,
        shapes=[hline(1.0, {"color": COLORS["ar"], "dash": "dot"})],
    )
    return figure(data=data, layout=shape)


def _expected_curve(
    alpha: float, c: float, name: str, line: dict[str, Any]
) -> tuple[dict[str, Any], list[float]]:
    """Leviathan's expected speedup at every gamma in metrics.GAMMAS as one line (a plotly
    trace), and the speedups it draws."""
    gammas, ys = metrics.expected_curve(alpha, c)
    curve = {"x": gammas, "y": ys, "mode": "lines+markers", "name": name, "line": line}
    return {"type": "scatter", **curve}, ys
