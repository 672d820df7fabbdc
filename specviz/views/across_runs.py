"""Plotly figures of the views across runs: the measured sweep against Leviathan's formula,
the reliability diagram of the keep probabilities, and the experiment log's runs.

Each takes the plain values its module produces (sweep rows, Calibration.to_dict(), log
rows), so the app can redraw from stored results without a model. No gradio import.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from specviz.analysis.sweep import formula_point
from specviz.views.figures import LEGEND, empty_figure, hline, plain
from specviz.views.palette import COLORS, SERIES
from specviz.views.style import figure, grid, merged

LAYOUT: dict[str, Any] = {
    "margin": {"l": 55, "r": 20, "t": 60, "b": 40},
    "legend": LEGEND,
    "font": {"size": 12},
}


# --- the sweep -----------------------------------------------------------------------------


def sweep_figure(rows: list[dict[str, Any]], verification: str = "rejection") -> go.Figure:
    """Measured speedup per gamma (points, with the middle 90 % of each one's bootstrap) over
    the formula's curve at the sweep's formula point (analysis.sweep.formula_point, per
    temperature: the acceptance the verification names and c, as the lesson states them)
    and the refined prediction from measured costs (where the rows carry it), one colour per
    temperature."""
    if not rows:
        return empty_figure("No sweep yet: run one to see measured points against the formula.")
    fig = figure(layout=LAYOUT)
    top = max(r["gamma"] for r in rows)
    temps = sorted({r["temperature"] for r in rows})
    for i, t in enumerate(temps):
        color, cells = SERIES[i % len(SERIES)], [r for r in rows if r["temperature"] == t]
        _sweep_series(fig, cells, t, top, color, verification)
    fig.add_hline(y=1.0, line={"color": COLORS["ar"], "dash": "dot", "width": 1})
    fig.update_xaxes(title="gamma (tokens drafted per round)", dtick=1)
    fig.update_yaxes(title="speedup (AR seconds / spec seconds, same tokens)", rangemode="tozero")
    title = (
        "Measured speedup, Leviathan's (1 − α^(γ+1)) / ((1 − α)(γc + 1)) and the refined prediction"
    )
    return fig.update_layout(title=title, height=420)


def _sweep_series(
    fig: go.Figure,
    cells: list[dict[str, Any]],
    t: float,
    top: int,
    color: str,
    verification: str,
) -> None:
    name = "greedy" if t == 0 else f"T = {t:g}"
    point = formula_point(cells, verification)
    gammas = list(range(1, top + 1))
    symbol = "α" if point.name == "alpha" else point.name
    fig.add_scatter(
        x=gammas,
        y=[point.expected(g) for g in gammas],
        mode="lines",
        line={"color": color, "dash": "dash"},
        name=f"{name}: formula at {symbol} = {point.accept:.3f}, c = {point.c:.2f}",
    )
    refined = [r for r in cells if r.get("predicted_speedup") is not None]
    if refined:
        fig.add_scatter(
            x=[r["gamma"] for r in refined],
            y=[r["predicted_speedup"] for r in refined],
            mode="lines+markers",
            line={"color": color, "dash": "dot"},
            marker={"color": color, "size": 7, "symbol": "diamond-open"},
            name=f"{name}: refined (measured step, verify and overhead costs)",
        )
    ys = [r["measured_speedup"] for r in cells]
    spread = all("measured_low" in r for r in cells)
    fig.add_scatter(
        x=[r["gamma"] for r in cells],
        y=ys,
        mode="markers+lines",
        marker={"color": color, "size": 10},
        line={"color": color, "width": 1},
        name=f"{name}: measured" + (" (middle 90 %)" if spread else ""),
        error_y={
            "type": "data",
            "symmetric": False,
            "array": [r["measured_high"] - y for r, y in zip(cells, ys, strict=True)],
            "arrayminus": [y - r["measured_low"] for r, y in zip(cells, ys, strict=True)],
            "color": color,
        }
        if spread
        else None,
        customdata=[[r["alpha"], r["c"], r["tokens_per_call"]] for r in cells],
        hovertemplate="gamma %{x}: %{y:.2f}x<br>alpha %{customdata[0]:.2f}, "
        "c %{customdata[1]:.2f}, %{customdata[2]:.2f} tokens/call<extra></extra>",
    )


# --- calibration ---------------------------------------------------------------------------


def reliability_figure(result: dict[str, Any]) -> go.Figure:
    """Observed against predicted per bin, with error bars and the diagonal (decisions
    that keep a draft with exactly their stated probability). Open markers: bins with fewer
    than min_n observations (shown, not judged)."""
    if not result.get("bins") and not result.get("residual_bins"):
        return empty_figure("No sampled decisions yet: run with a temperature above 0.")
    diag = {"color": COLORS["ar"], "dash": "dot"}
    calibrated = {"x": [0, 1], "y": [0, 1], "mode": "lines", "line": diag, "name": "calibrated"}
    data = [{"type": "scatter", **calibrated}]
    series = (
        ("bins", "drafts: accepted vs min(1, p/q)", COLORS["accepted"]),
        ("residual_bins", "resampled: drawn vs residual r(x)", COLORS["residual"]),
    )
    for key, name, color in series:
        if result.get(key):
            data.append(_reliability_series(result[key], name, color))
    # square, with both axes on [0, 1]: the plot area narrows to keep the scale (constrain
    # "domain"), where by default plotly would widen the x range beyond the probabilities
    square = {"range": [-0.02, 1.02], "constrain": "domain"}
    x = {"title": {"text": "predicted probability (bin mean)"}, **square}
    y = {"title": {"text": "observed frequency"}, "scaleanchor": "x", **square}
    title = (
        f"Calibration of the keep probabilities over {result.get('traces', 0)} run(s)<br>"
        f"<sup>{result.get('interval', '')}</sup>"
    )
    more = {"xaxis": x, "yaxis": y, "title": {"text": title}, "height": 460}
    return figure(data=data, layout=merged(LAYOUT, more))


def _reliability_series(bins: list[dict[str, Any]], name: str, color: str) -> dict[str, Any]:
    return {
        "type": "scatter",
        "x": [b["predicted"] for b in bins],
        "y": [b["observed"] for b in bins],
        "mode": "markers",
        "name": name,
        "marker": {
            "color": color,
            "size": 9,
            "symbol": ["circle" if b["judged"] else "circle-open" for b in bins],
        },
        "error_y": {
            "type": "data",
            "symmetric": False,
            "array": [b["ci_high"] - b["observed"] for b in bins],
            "arrayminus": [b["observed"] - b["ci_low"] for b in bins],
            "color": color,
        },
        "customdata": [[b["lo"], b["hi"], b["n"]] for b in bins],
        "hovertemplate": "bin %{customdata[0]:.2f}–%{customdata[1]:.2f}, n = %{customdata[2]}"
        "<br>predicted %{x:.3f}, observed %{y:.3f}<extra></extra>",
    }


# --- the experiment log --------------------------------------------------------------------


def runs_figure(rows: list[dict[str, Any]]) -> go.Figure:
    """Speedup (compared runs) and acceptance rate per run of the log."""
    if not rows:
        return empty_figure("No runs logged yet.")
    fig = grid(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    x = [r["run"] for r in rows]
    hover = [plain(r["changed"]) for r in rows]
    panels = (
        (1, "speedup", "speedup (x)", COLORS["spec"]),
        (2, "acceptance", "acceptance rate", COLORS["accepted"]),
    )
    for row, key, title, color in panels:
        line = {
            "type": "scatter",
            "x": x,
            "y": [r[key] for r in rows],
            "mode": "markers+lines",
            "connectgaps": False,
            "marker": {"color": color, "size": 9},
            "name": title,
            "text": hover,
            "hovertemplate": "run %{x}: %{y:.2f}<br>%{text}<extra></extra>",
        }
        fig.add(line, row)
        fig.axis("y", row, title={"text": title}, rangemode="tozero")
    fig.place("shapes", hline(1.0, {"color": COLORS["ar"], "dash": "dot", "width": 1}), 1)
    fig.axis("x", 2, title={"text": "run"}, dtick=1)
    more = {"title": {"text": "Runs of this session"}, "height": 440, "showlegend": False}
    return fig.figure(LAYOUT, more)
