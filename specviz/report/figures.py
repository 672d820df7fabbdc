"""The report's Plotly figures, from report.json's content alone (no trace, no model): the
same figures in report.html and in the app's Prompt set tab."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from specviz.report.stats import OVERALL, TOKEN_KINDS
from specviz.views.figures import empty_figure, label, lay_out, plain
from specviz.views.palette import COLORS, SERIES
from specviz.views.style import figure


def _groups(report: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(name, deterministic figures, timing figures) per category, then overall."""
    det, tim = report["deterministic"], report["timing"]
    # category names are the file's text: Plotly reads some markup in labels, so it goes
    out = [(plain(cat), d, tim["categories"][cat]) for cat, d in det["categories"].items()]
    return out + [(OVERALL, det[OVERALL], tim[OVERALL])]


def _err(values: list[float | None], lo: list[float], hi: list[float]) -> dict[str, Any]:
    return {
        "type": "data",
        "symmetric": False,
        "array": [h - (value or 0.0) for value, h in zip(values, hi, strict=True)],
        "arrayminus": [(value or 0.0) - lw for value, lw in zip(values, lo, strict=True)],
    }


def acceptance_figure(report: dict[str, Any]) -> go.Figure:
    """Acceptance (Wilson 95%) and tokens per call, per category."""
    groups = _groups(report)
    if not groups[-1][1]["verified"]:
        return empty_figure("no drafts were verified")
    names = [g[0] for g in groups]
    acc = [g[1]["acceptance"] for g in groups]
    lo = [g[1]["acceptance_interval"][0] for g in groups]
    hi = [g[1]["acceptance_interval"][1] for g in groups]
    fig = figure()
    fig.add_bar(
        x=names,
        y=acc,
        name="acceptance",
        marker_color=COLORS["accepted"],
        error_y=_err(acc, lo, hi),
    )
    fig.add_scatter(
        x=names,
        y=[g[1]["tokens_per_call"] for g in groups],
        name="tokens per call",
        mode="markers",
        marker={"size": 11, "color": COLORS["p"]},
        yaxis="y2",
    )
    return lay_out(
        fig,
        "acceptance (95% Wilson: drafts taken as independent) and tokens per call",
        "category",
        "acceptance",
        360,
        yaxis={"range": [0, 1]},
        yaxis2={
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
            "title": "tokens per call",
        },
    )


def speedup_figure(report: dict[str, Any]) -> go.Figure:
    """Measured speedup beside the refined formula's prediction, per category."""
    groups = _groups(report)
    names = [g[0] for g in groups]
    measured = [g[2]["speedup"] for g in groups]
    if not any(measured):
        return empty_figure("no speedup measured")
    fig = figure()
    fig.add_bar(x=names, y=measured, name="measured", marker_color=COLORS["spec"])
    fig.add_bar(
        x=names,
        y=[g[2]["predicted_speedup"] for g in groups],
        name="predicted (refined formula)",
        marker_color=COLORS["ar"],
    )
    fig.add_hline(y=1.0, line_dash="dot", line_color=COLORS["rest"])
    return lay_out(
        fig, "speedup: measured and predicted", "category", "speedup (x)", 360, barmode="group"
    )


def conditional_figure(report: dict[str, Any]) -> go.Figure:
    """P(accept k | accepted 1..k-1) by draft position, one line per category."""
    fig = figure()
    for n, (name, d, _) in enumerate(_groups(report)):
        rows = [r for r in d["conditional_acceptance"] if r["verified"]]
        if not rows:
            continue
        y = [r["rate"] for r in rows]
        fig.add_scatter(
            x=[r["position"] for r in rows],
            y=y,
            name=name,
            mode="lines+markers",
            error_y=_err(y, [r["lo"] for r in rows], [r["hi"] for r in rows]),
            line={
                "color": "#000" if name == OVERALL else SERIES[n % len(SERIES)],
                "width": 3 if name == OVERALL else 1.5,
            },
        )
    compare = report["deterministic"].get("compare")
    if compare:  # the second drafter, position by position beside the first
        rows = [r for r in compare[OVERALL]["b"]["conditional_acceptance"] if r["verified"]]
        y = [r["rate"] for r in rows]
        other = plain(str(report["deterministic"].get("compare_with") or "second drafter"))
        fig.add_scatter(
            x=[r["position"] for r in rows],
            y=y,
            name=f"{other}: {OVERALL}",
            mode="lines+markers",
            error_y=_err(y, [r["lo"] for r in rows], [r["hi"] for r in rows]),
            line={"color": "#000", "width": 3, "dash": "dash"},
        )
    if not fig.data:
        return empty_figure("no drafts were verified")
    return lay_out(
        fig,
        "P(accept k | accepted 1..k-1), 95% Wilson (drafts taken as independent)",
        "draft position k",
        "conditional acceptance",
        400,
        yaxis={"range": [0, 1.05]},
        xaxis={"dtick": 1},
    )


def histogram_figure(report: dict[str, Any]) -> go.Figure:
    """The accepted-length histogram per category, as a share of its rounds."""
    fig = figure()
    for n, (name, d, _) in enumerate(_groups(report)):
        h = {int(k): value for k, value in d["histogram"].items()}
        total = sum(h.values())
        if not total:
            continue
        xs = list(range(max(h) + 1))
        fig.add_bar(
            x=xs,
            y=[h.get(x, 0) / total for x in xs],
            name=name,
            marker_color="#000" if name == OVERALL else SERIES[n % len(SERIES)],
        )
    if not fig.data:
        return empty_figure("no rounds")
    return lay_out(
        fig,
        "drafts accepted per round (share of rounds)",
        "drafts accepted",
        "share of rounds",
        380,
        barmode="group",
        xaxis={"dtick": 1},
    )


def kinds_figure(report: dict[str, Any]) -> go.Figure:
    """Acceptance by kind of drafted token, per category (95% Wilson)."""
    fig = figure()
    for n, (name, d, _) in enumerate(_groups(report)):
        kinds = [k for k in TOKEN_KINDS if k in d["token_kinds"]]
        rows = [d["token_kinds"][k] for k in kinds]
        y = [r["rate"] for r in rows]
        fig.add_bar(
            x=kinds,
            y=y,
            name=name,
            error_y=_err(y, [r["lo"] for r in rows], [r["hi"] for r in rows]),
            marker_color="#000" if name == OVERALL else SERIES[n % len(SERIES)],
            customdata=[r["verified"] for r in rows],
            hovertemplate="%{x}: %{y:.3f} of %{customdata} drafts",
        )
    if not fig.data:
        return empty_figure("no drafts were verified")
    return lay_out(
        fig,
        "acceptance by kind of drafted token (95% Wilson, drafts taken as independent)",
        "kind of token",
        "acceptance",
        400,
        barmode="group",
        yaxis={"range": [0, 1.05]},
    )


def decision_figure(entry: dict[str, Any]) -> go.Figure:
    """p and q over one costly decision's top tokens, the rejected draft outlined."""
    top = entry["top"] or [{"id": -1, "text": entry["token"], "p": entry["p"], "q": entry["q"]}]
    names = []
    for e in top:
        name = label(e["text"])
        names.append(f"{name} #{e['id']}" if name in names else name)
    width = [
        3.0 if e["text"] == entry["token"] and abs(e["p"] - entry["p"]) < 1e-12 else 0.0
        for e in top
    ]
    fig = figure()
    for key, name in (("p", "p (target)"), ("q", "q (draft)")):
        fig.add_bar(
            x=names,
            y=[e[key] for e in top],
            name=name,
            marker={"color": COLORS[key], "line": {"color": "#000", "width": width}},
        )
    return lay_out(
        fig,
        f"rejected {label(entry['token'])!s}: p {entry['p']:.3f}, q {entry['q']:.3f}",
        "token",
        "probability",
        260,
        barmode="group",
        margin={"l": 40, "r": 10, "t": 40, "b": 40},
    )


def compare_figure(report: dict[str, Any]) -> go.Figure:
    """Paired differences B - A in tokens per call per category, with bootstrap intervals."""
    cmp = report["deterministic"].get("compare")
    if not cmp:
        return empty_figure("no second drafter (--compare-with)")
    names = [*map(plain, cmp["categories"]), OVERALL]
    rows = [
        *(cmp["categories"][cat]["paired"] for cat in cmp["categories"]),
        cmp[OVERALL]["paired"],
    ]
    fig = figure()
    for n, key in enumerate(("tokens_per_call", "acceptance")):
        y = [r[key]["mean"] for r in rows]
        fig.add_scatter(
            x=names,
            y=y,
            mode="markers",
            name=key.replace("_", " "),
            marker={"size": 10, "color": SERIES[n]},
            error_y=_err(
                y, [r[key]["lo"] or 0.0 for r in rows], [r[key]["hi"] or 0.0 for r in rows]
            ),
        )
    fig.add_hline(y=0.0, line_color=COLORS["rest"])
    return lay_out(
        fig, "B - A per prompt: mean and 95% bootstrap interval", "category", "difference", 380
    )


def all_figures(report: dict[str, Any]) -> dict[str, go.Figure]:
    """Every overview figure by name (the app's tab and the page draw these)."""
    out = {
        "acceptance": acceptance_figure(report),
        "speedup": speedup_figure(report),
        "conditional": conditional_figure(report),
        "histogram": histogram_figure(report),
        "kinds": kinds_figure(report),
    }
    if report["deterministic"].get("compare"):
        out["compare"] = compare_figure(report)
    return out
