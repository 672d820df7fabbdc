"""Plotly figures built from traces alone: no model call, no gradio import.

The decision inspector (p and q over the top tokens, min(1, p/q) against u, the residual),
the live speedup chart and the acceptance charts, with the helpers other figure modules
share (labels, bar groups, layout). Colours come from specviz.views.palette.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from specviz import metrics
from specviz.config import verification_label
from specviz.trace import Decision, Drafted, Trace, round_number
from specviz.verify import verification_for
from specviz.verify.words import SHORT_SOURCES, num, pair_fmt, pq
from specviz.views.palette import COLORS, GRID, OUTLINE, SERIES, ZERO_LINE, show_whitespace
from specviz.views.style import Grid, figure, grid, merged

# Every figure's legend: one horizontal row at the figure's own bottom edge (the container's,
# not the plot area's), left-aligned. Plotly widens the bottom margin to hold it, rows
# included where it wraps on a narrow page, so it always sits below the x axis's tick labels
# and title and never on them; a legend placed in the plot area's coordinates (y below 0)
# lands on the x axis's title as soon as the plot is short or the page narrow.
LEGEND: dict[str, Any] = {
    "orientation": "h",
    "x": 0,
    "xanchor": "left",
    "yref": "container",
    "y": 0,
    "yanchor": "bottom",
}

_LAYOUT: dict[str, Any] = {
    "margin": {"l": 50, "r": 20, "t": 50, "b": 40},
    "legend": LEGEND,
    "font": {"size": 12},
}


def plain(text: str) -> str:
    """Text for a figure, with the characters Plotly reads as markup neutralised."""
    return text.replace("&", "＆").replace("<", "‹").replace(">", "›")


# A chart's titles break onto lines of at most this many characters: Plotly does not wrap
# them, and on a phone's width a longer line runs past the figure's edge and is cut.
TITLE_CHARS = 52


def wrapped(text: str, width: int = TITLE_CHARS) -> str:
    """A title broken at spaces (Plotly's <br>) into lines of at most width characters; a
    parenthesised formula ("norm(max(0, p − q))") stays on one line."""
    lines: list[str] = []
    for word in _words(text):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def _words(text: str) -> list[str]:
    """text split at the spaces outside parentheses."""
    words, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == " " and depth <= 0:
            words.append(text[start:i])
            start = i + 1
    return [*words, text[start:]]


def lines_of(text: str) -> int:
    """How many lines a wrapped title takes."""
    return text.count("<br>") + 1


def label(text: str) -> str:
    """A token as an axis label: whitespace visible, markup characters neutralised."""
    return plain(show_whitespace(text))


def _labels(entries: list[dict[str, Any]]) -> list[str]:
    """Unique labels for a top list (two tokens may decode to the same text)."""
    names = [label(e["text"]) for e in entries]
    return [
        f"{n} #{e['id']}" if names.count(n) > 1 else n for n, e in zip(names, entries, strict=True)
    ]


def _highlight(ids: list[int], chosen: int) -> list[float]:
    return [3.0 if i == chosen else 0.0 for i in ids]


def add_bar_group(
    fig: Grid, row: int, bars: Sequence[tuple[str, Sequence[Any], Sequence[float]]]
) -> None:
    """Grouped bars in one row of a one-column subplot grid, one series per (name, x, y).

    The n-th series takes the palette's n-th SERIES colour, so a name keeps its colour on
    every row, and the legend lists it once, from the first row.
    """
    for n, (name, x, y) in enumerate(bars):
        bar = {"type": "bar", "x": x, "y": y, "name": name, "legendgroup": name}
        fig.add({**bar, "marker": {"color": SERIES[n % len(SERIES)]}, "showlegend": row == 1}, row)


def lay_out(fig: go.Figure, title: str, x: str, y: str, height: int, **extra: Any) -> go.Figure:
    """The shared layout (:func:`layout`) with a title, axis titles and a height, plus any
    other keys (plotly's flat spelling: yaxis_range=r), applied to a figure made already."""
    return fig.update_layout(layout(title, x, y, height), **extra)


def layout(title: str, x: str, y: str, height: int, **extra: Any) -> dict[str, Any]:
    """lay_out's layout as one plain dict (extra nested: xaxis={"range": r} for
    xaxis_range=r), for a figure made with it at once: go.Figure validates a whole layout
    in about a fifth of the time update_layout takes to apply it."""
    axes = {"xaxis": {"title": {"text": x}}, "yaxis": {"title": {"text": y}}}
    return merged(_LAYOUT, {"title": {"text": title}, **axes, "height": height}, extra)


def hline(y: float, line: dict[str, Any]) -> dict[str, Any]:
    """The shape add_hline(y=y, line=line) adds: a line across the x axis's domain."""
    return {
        "type": "line",
        "x0": 0,
        "x1": 1,
        "xref": "x domain",
        "y0": y,
        "y1": y,
        "yref": "y",
        "line": line,
    }


def empty_figure(message: str) -> go.Figure:
    """A blank figure carrying one line of text."""
    note = {
        "text": message,
        "showarrow": False,
        "x": 0.5,
        "y": 0.5,
        "xref": "paper",
        "yref": "paper",
    }
    hidden = {"annotations": [note], "xaxis": {"visible": False}, "yaxis": {"visible": False}}
    return figure(layout=merged(_LAYOUT, hidden, {"height": 260}))


# --- decision inspector ----------------------------------------------------------------


# Below this share of the tallest bar, a drafted token's bars would be a few pixels high:
# the p/q panel then reads on a log axis, so that they stay visible.
SMALL_BAR = 0.05


def log_axis(top: list[dict[str, Any]], chosen: int, keys: Sequence[str]) -> bool:
    """Whether the p/q panel needs a log axis: the drafted token's tallest bar is nonzero
    and under SMALL_BAR of the panel's tallest."""
    mine = [e[k] for e in top if e["id"] == chosen for k in keys]
    tallest = max((e[k] for e in top for k in keys), default=0.0)
    return bool(mine) and 0 < max(mine) < SMALL_BAR * tallest


def _pq_series(top: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The p/q panel's series: (key in the top list, legend name)."""
    series = [("p", "p (target)"), ("q", "q (draft)")]
    if top and all("out" in e for e in top):  # recorded for verified drafts
        series.append(("out", "out (what this decision emits)"))
    return series


def _pq_bars(fig: Grid, row: int, top: list[dict[str, Any]], chosen: int) -> bool:
    """p and q over the top tokens, the drafted token outlined and annotated (its numbers
    are in the panel's title: a label over each of its thin bars would overlap the next).
    The y axis leaves room over the tallest bar for the annotation; it is a log axis where
    the drafted token's bars would be too small to see (returned: True)."""
    names, ids = _labels(top), [e["id"] for e in top]
    width = _highlight(ids, chosen)
    series = _pq_series(top)
    for key, name in series:
        bar = {
            "type": "bar",
            "x": names,
            "y": [e[key] for e in top],
            "name": name,
            "marker": {"color": COLORS[key], "line": {"color": OUTLINE, "width": width}},
        }
        fig.add(bar, row)
    keys = [k for k, _ in series]
    log = log_axis(top, chosen, keys)
    values = [e[k] for e in top for k in keys if e[k] > 0]
    tallest = max(values, default=1.0)
    if log:
        low = min(values)
        fig.axis("y", row, type="log", range=[math.log10(low) - 0.3, math.log10(tallest) + 0.5])
    else:
        fig.axis("y", row, range=[0, 1.25 * tallest])
    if chosen in ids:
        j = ids.index(chosen)
        y = max(top[j]["p"], top[j]["q"])
        note = {
            "x": names[j],
            "y": math.log10(y) if log else y,
            "text": "drafted",
            "showarrow": True,
            "arrowhead": 2,
        }
        fig.place("annotations", note, row)
    return log


def _accept_bar(
    fig: Grid, row: int, accept_prob: float, u: float | None, name: str = "min(1, p/q)"
) -> None:
    """min(1, p/q) (or exact match's p(x), named so) as a bar on [0, 1] and the drawn u
    as a marker on it."""
    su, sa = pair_fmt(u, accept_prob) if u is not None else ("", num(accept_prob))
    bar = {
        "type": "bar",
        "x": [accept_prob],
        "y": [name],
        "orientation": "h",
        "name": name,
        "marker": {
            "color": COLORS["accepted"] if u is None or u < accept_prob else COLORS["rejected"]
        },
        "text": [f"{name} = {sa}"],
        "textposition": "inside" if accept_prob >= 0.5 else "outside",
        "insidetextanchor": "start",
        "cliponaxis": False,
    }
    fig.add(bar, row)
    if u is not None:
        draw = {
            "type": "scatter",
            "x": [u],
            "y": [name],
            "mode": "markers+text",
            "marker": {
                "symbol": "line-ns-open",
                "size": 30,
                "color": COLORS["u"],
                "line": {"width": 3},
            },
            "text": [f"u = {su}"],
            # the label stays inside the axis: on the left of a draw near 1
            "textposition": "middle left" if u > 0.5 else "middle right",
            "cliponaxis": False,
            "name": "u (draw)",
        }
        fig.add(draw, row)
    fig.axis("x", row, range=[0, 1])


def _residual_bars(
    fig: Grid,
    row: int,
    top: list[dict[str, Any]],
    chosen: int,
    drawn_apart: bool,
    source: str = "residual",
) -> None:
    """p and the distribution the added token came from, the chosen token marked."""
    names, ids = _labels(top), [e["id"] for e in top]
    width = _highlight(ids, chosen)
    p = {
        "type": "bar",
        "x": names,
        "y": [e["p"] for e in top],
        "name": "p (target)",
        "marker": {"color": COLORS["p"], "opacity": 0.45},
        "showlegend": False,
    }
    fig.add(p, row)
    if drawn_apart:
        residual = {
            "type": "bar",
            "x": names,
            "y": [e["residual"] for e in top],
            "name": SHORT_SOURCES[source],
            "marker": {"color": COLORS["residual"], "line": {"color": OUTLINE, "width": width}},
        }
        fig.add(residual, row)
    tallest = max((e[k] for e in top for k in ("p", "residual")), default=1.0)
    fig.axis("y", row, range=[0, 1.25 * (tallest or 1.0)])  # room for the arrow on top
    if chosen in ids:
        j = ids.index(chosen)
        y = max(top[j]["p"], top[j]["residual"])
        note = {"x": names[j], "y": y, "text": "chosen", "showarrow": True, "arrowhead": 2}
        fig.place("annotations", note, row)


def pq_numbers(d: Drafted) -> str:
    """A draft's p and q (and the updated p′ a tree's later sibling was tried against) with
    digits enough to check their ratio."""
    said = f"p = {pq(d.p)}, q = {pq(d.q)}"
    return said + (f", p′ = {pq(d.p_prime)}" if d.p_prime is not None else "")


def decision_figure(dec: Decision) -> go.Figure:
    """The inspector chart for one decision, from the stored trace only."""
    panels: list[str] = []
    if dec.drafted is not None:
        panels += ["pq", "accept"]
    if dec.added is not None:
        panels.append("added")
    verification = verification_for(dec.settings)
    # the added token's distribution, as the engine recorded where it drew it from
    source = ""
    if dec.added is not None:
        source = dec.added.source or (
            "bonus" if dec.added.status == "bonus" else verification.fallback_source
        )
    added = f"{dec.added.status if dec.added else ''}: drawn from {SHORT_SOURCES.get(source, '')}"
    # a bar of its own where that distribution is not p itself
    drawn_apart = source in ("residual", "siblings")
    with_out = dec.drafted is not None and dec.drafted.out_tv is not None
    accept = verification.keep_title(dec.drafted) if dec.drafted is not None else ""
    log = dec.drafted is not None and log_axis(
        dec.drafted.top, dec.drafted.id, [k for k, _ in _pq_series(dec.drafted.top)]
    )
    titles = {
        "pq": f"p, q{' and out' if with_out else ''} over the top tokens"
        f"{' (log scale)' if log else ''} "
        f"(drafted {label(dec.drafted.text)!r}: {pq_numbers(dec.drafted)})"
        if dec.drafted
        else "",
        "accept": accept,
        "added": added,
    }
    heights = {"pq": 0.5, "accept": 0.15, "added": 0.45}
    fig = grid(
        rows=len(panels),
        cols=1,
        subplot_titles=[wrapped(titles[p]) for p in panels],
        row_heights=[heights[p] for p in panels],
        vertical_spacing=0.12,
    )
    for row, panel in enumerate(panels, start=1):
        if panel == "pq":
            _pq_bars(fig, row, dec.drafted.top, dec.drafted.id)
        elif panel == "accept":
            name = verification.keep_label(dec.drafted)
            _accept_bar(fig, row, dec.drafted.accept_prob, dec.drafted.u, name)
        else:
            _residual_bars(fig, row, dec.added.top, dec.added.id, drawn_apart, source)
    # the first panel's title sits in the top margin, under the figure's own
    first = lines_of(wrapped(titles[panels[0]]))
    return fig.figure(
        _LAYOUT,
        {
            "barmode": "group",
            "height": 220 + 170 * len(panels) + 15 * (first - 1),
            "margin": {"t": 50 + 15 * (first - 1)},
            "title": {"text": f"round {round_number(dec.round.index)}, position {dec.pos}"},
        },
    )


# --- live speedup ----------------------------------------------------------------------


def matched_speedup(spec: Trace, ar: Trace | None) -> float | None:
    """The measured speedup so far, over the tokens both runs made (metrics.speedup: the
    one figure every view states)."""
    if ar is None or not ar.timeline or not spec.timeline:
        return None
    s = metrics.speedup(ar, spec)
    return s or None


def speedup_spec(spec: Trace | None, ar: Trace | None) -> dict[str, Any]:
    """The live chart as a plain plotly JSON spec: cheap enough to rebuild every round."""
    data = []
    for trace, name, key in ((spec, "speculative", "spec"), (ar, "autoregressive", "ar")):
        if trace is not None and trace.timeline:
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": name,
                    "line": {"color": COLORS[key], "shape": "hv"},
                    "x": [0.0] + [t for t, _ in trace.timeline],
                    "y": [0.0] + [n for _, n in trace.timeline],
                }
            )
    s = matched_speedup(spec, ar) if spec is not None else None
    title = "tokens against wall-clock seconds (same prompt, settings, seed)"
    if s is not None:
        title += f": speedup so far {s:.2f}x"
    grid = {"gridcolor": GRID, "zerolinecolor": ZERO_LINE}
    layout = {
        "title": {"text": title},
        "height": 330,
        "margin": _LAYOUT["margin"],
        "legend": LEGEND,
        "plot_bgcolor": "white",
        "xaxis": {"title": {"text": "seconds"}, **grid},
        "yaxis": {"title": {"text": "output tokens"}, **grid},
    }
    return {"data": data, "layout": layout}


def speedup_figure(spec: Trace | None, ar: Trace | None) -> go.Figure:
    """Tokens against wall-clock seconds, speculative and autoregressive, with the speedup."""
    return figure(speedup_spec(spec, ar))


# --- acceptance ------------------------------------------------------------------------


def acceptance_per_round_figure(trace: Trace) -> go.Figure:
    """Accepted drafts / verified drafts in each round (the acceptance-rate definition)."""
    rounds = trace.rounds
    n_verified = [len(r.verified) for r in rounds]
    bar = {
        "type": "bar",
        "x": [round_number(r.index) for r in rounds],
        "y": [r.n_accepted / n if n else 0.0 for r, n in zip(rounds, n_verified, strict=True)],
        "marker": {"color": COLORS["accepted"]},
        "name": "accepted / verified",
        "customdata": [
            [r.n_accepted, n, len(r.drafted)] for r, n in zip(rounds, n_verified, strict=True)
        ],
        "hovertemplate": "round %{x}: %{customdata[0]} accepted of %{customdata[1]} verified "
        "(%{customdata[2]} drafted)<extra></extra>",
    }
    shape = layout(
        "acceptance per round", "round", "accepted / verified", 300, yaxis={"range": [0, 1]}
    )
    return figure(data=[bar], layout=shape)


def accepted_histogram_figure(trace: Trace) -> go.Figure:
    """How many rounds accepted 0, 1, 2, ... drafts."""
    hist = metrics.accepted_histogram(trace)
    bar = {
        "type": "bar",
        "x": list(hist),
        "y": list(hist.values()),
        "marker": {"color": COLORS["p"]},
        "name": "rounds",
    }
    shape = layout(
        "accepted drafts per round (histogram)",
        "drafts accepted in the round",
        "rounds",
        300,
        xaxis={"dtick": 1},
    )
    return figure(data=[bar], layout=shape)


def acceptance_by_position_figure(trace: Trace) -> go.Figure:
    """Acceptance rate at draft position 1, 2, ... (verified drafts only)."""
    rates = metrics.acceptance_by_position(trace)
    bar = {
        "type": "bar",
        "x": list(range(1, len(rates) + 1)),
        "y": rates,
        "marker": {"color": COLORS["accepted"]},
        "name": "acceptance rate",
    }
    shape = layout(
        "acceptance by draft position",
        "draft position",
        "accepted / verified",
        300,
        yaxis={"range": [0, 1]},
        xaxis={"dtick": 1},
    )
    return figure(data=[bar], layout=shape)


# --- verifications side by side ------------------------------------------------------------


def verifications_figure(rows: Sequence[Any]) -> go.Figure:
    """Acceptance against TV(out, p), one marker per verification (rows of
    specviz.analysis.verifications): the lossless ones sit at TV 0, the lossy ones buy
    acceptance with distortion, or fail to."""
    fig = figure(layout=_LAYOUT)
    for n, r in enumerate(rows):
        tv = r.mean_out_tv if r.mean_out_tv is not None else 0.0
        name = verification_label(r.verification)
        fig.add_scatter(
            x=[tv],
            y=[r.acceptance_rate],
            mode="markers+text",
            text=[name],
            textposition="top center",
            name=name,
            marker={"size": 14, "symbol": "x" if r.lossy else "circle", "color": SERIES[n % 10]},
        )
    if rows:  # room above the highest marker for its label
        lo = min(r.acceptance_rate for r in rows)
        fig.update_yaxes(range=[max(0.0, lo - 0.1), 1.12])
    return lay_out(
        fig,
        "acceptance against the distortion each decision adds",
        "mean TV(out, p) per verified position",
        "acceptance rate",
        380,
    )
