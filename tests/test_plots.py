"""Figures in specviz.views.figures, built from stored traces only."""

from __future__ import annotations

import json

from specviz.trace import decision_at
from specviz.views import figures, theory_figures
from tests.test_render import NASTY, sample_trace


def test_decision_figure_panels() -> None:
    t = sample_trace()
    fig = figures.decision_figure(decision_at(t, 0, 1))  # rejected + resampled
    names = [tr.name for tr in fig.data]
    assert "p (target)" in names and "q (draft)" in names and "u (draw)" in names
    assert any("residual" in (n or "") for n in names)
    texts = [a.text for a in fig.layout.annotations]
    assert "drafted" in texts and "chosen" in texts
    only_added = figures.decision_figure(decision_at(t, 1, 3))  # bonus
    assert "q (draft)" not in [tr.name for tr in only_added.data]


def test_decision_figure_under_exact_match() -> None:
    from tests.test_render import match_trace

    fig = figures.decision_figure(decision_at(match_trace(), 0, 1))  # mismatch + kept sample
    names = [tr.name for tr in fig.data]
    assert "p(x)" in names and "u (draw)" not in names
    assert not any("residual" in (n or "") for n in names)
    titles = [a.text for a in fig.layout.annotations]
    assert any(t.startswith("exact match: the chance p(x)") for t in titles)
    assert "resampled: drawn from the target's own sample from p" in titles


def test_drafted_token_is_highlighted() -> None:
    fig = figures.decision_figure(decision_at(sample_trace(), 0, 0))
    p_bar = fig.data[0]
    assert list(p_bar.marker.line.width)[0] > 0 and list(p_bar.marker.line.width)[1] == 0


def test_labels_neutralise_markup_and_show_whitespace() -> None:
    assert "<" not in figures.label(NASTY) and ">" not in figures.label(NASTY)
    assert figures.label(" a\n") == "·a↵"
    entries = [{"id": 1, "text": "a"}, {"id": 2, "text": "a"}]
    assert figures._labels(entries) == ["a #1", "a #2"]


def test_speedup_spec_is_plain_json_with_the_speedup() -> None:
    spec = sample_trace()
    ar = sample_trace()
    ar.method = "ar"
    ar.timeline = [[0.02, 2.0], [0.04, 4.0]]
    d = figures.speedup_spec(spec, ar)
    json.dumps(d)
    assert len(d["data"]) == 2 and "2.00x" in d["layout"]["title"]["text"]
    assert figures.matched_speedup(spec, ar) == 2.0
    assert figures.matched_speedup(spec, None) is None
    assert figures.speedup_figure(spec, None).data[0].name == "speculative"


def test_acceptance_and_theory_figures() -> None:
    t = sample_trace()
    assert list(figures.acceptance_per_round_figure(t).data[0].y) == [0.5, 1.0]
    assert list(figures.accepted_histogram_figure(t).data[0].x) == [1]
    assert list(figures.acceptance_by_position_figure(t).data[0].y) == [1.0, 0.0]
    th = theory_figures.theory_figure(0.8, 0.2, 4, 1.5)
    assert "best gamma" in th.layout.title.text and len(th.data) == 2
    pr = theory_figures.projection_figure(0.8, 0.05, 4)
    assert "PROJECTION" in pr.layout.title.text
    assert figures.empty_figure("x").layout.annotations[0].text == "x"


SHAPES = [
    {"rows": 3, "cols": 1, "row_heights": [0.5, 0.15, 0.45], "vertical_spacing": 0.12},
    {"rows": 2, "cols": 1, "shared_xaxes": True, "vertical_spacing": 0.08},
    {"rows": 2, "cols": 1},
]
TITLES = [None, ["first (p = 0.5)", "", "third <b>"], ["x", "y", "z"]]


class PlotlyGrid:
    """style.Grid's calls made by plotly itself, on make_subplots' own figure: add_trace,
    add_annotation and add_shape with row= and col=, update_xaxes and update_yaxes on a
    cell, update_layout once per layout."""

    def __init__(self, **kwargs) -> None:
        from plotly.subplots import make_subplots

        self.fig = make_subplots(**kwargs)

    def add(self, trace, row, col=1) -> None:
        self.fig.add_trace(trace, row=row, col=col)

    def place(self, kind, item, row, col=1) -> None:
        adds = {"annotations": self.fig.add_annotation, "shapes": self.fig.add_shape}
        adds[kind](item, row=row, col=col)

    def axis(self, letter, row, col=1, **props) -> None:
        update = self.fig.update_xaxes if letter == "x" else self.fig.update_yaxes
        update(props, row=row, col=col)

    def figure(self, *layouts):
        for layout in layouts:
            self.fig.update_layout(layout)
        return self.fig


def test_grid_builds_the_figure_plotlys_own_calls_build(monkeypatch) -> None:
    """style.grid (plain JSON, made a figure once) builds the figure plotly builds from the
    same traces, annotations, shapes, axis settings and layouts, for every shape and titles,
    a second time from the kept grid too."""
    from specviz.views import style

    def filled(fig, rows: int):
        for r in range(1, rows + 1):
            fig.add({"type": "bar", "x": ["a", "b"], "y": [r, 2], "name": f"s{r}"}, r)
            note = {"x": "b", "y": 2, "text": "drafted", "showarrow": True, "arrowhead": 2}
            fig.place("annotations", note, r)
            fig.place("shapes", figures.hline(1.0, {"dash": "dot", "width": 1}), r)
            fig.axis("y", r, title={"text": f"y{r}"}, rangemode="tozero")
        fig.axis("x", rows, range=[0, 1], title={"text": "x"})
        more = {"title": {"text": "t"}, "height": 500, "margin": {"t": 10}}
        return json.loads(fig.figure(figures._LAYOUT, more).to_json())

    style.figure()  # the page's template, as every figure of specviz has it
    monkeypatch.setattr(style, "_grids", {})
    for shape in SHAPES:
        for titles in TITLES:
            kw = dict(shape)
            if titles is not None:
                kw["subplot_titles"] = titles[: shape["rows"]]
            want = filled(PlotlyGrid(**kw), shape["rows"])
            for _ in range(2):  # the first builds the grid, the second copies it
                assert filled(style.grid(**kw), shape["rows"]) == want, kw


def test_layout_and_hline_are_lay_out_and_add_hline_own() -> None:
    """A figure made at once with figures.layout (and hline's shape) equals the one
    lay_out's update_layout (and add_hline) make of the same traces."""
    from specviz.views.style import figure

    bar = {"type": "bar", "x": [1, 2], "y": [0.5, 1.0], "name": "b"}
    line = {"color": "#57606a", "dash": "dot"}
    extras = [
        ({}, {}),
        ({"yaxis_range": [0, 1]}, {"yaxis": {"range": [0, 1]}}),
        (
            {"yaxis_range": [0, 1], "xaxis_dtick": 1},
            {"yaxis": {"range": [0, 1]}, "xaxis": {"dtick": 1}},
        ),
        ({"margin_t": 80, "showlegend": False}, {"margin": {"t": 80}, "showlegend": False}),
    ]
    for flat, nested in extras:
        old = figures.lay_out(figure(data=[bar]), "t <b>", "x", "", 300, **flat)
        old.add_hline(y=1.0, line=line)
        shape = figures.layout("t <b>", "x", "", 300, **nested, shapes=[figures.hline(1.0, line)])
        new = figure(data=[bar], layout=shape)
        assert json.loads(new.to_json()) == json.loads(old.to_json()), flat
    assert figures.layout("t", "x", "y", 300)["margin"] is not figures._LAYOUT["margin"]


def test_empty_figure_is_plotlys_own_calls() -> None:
    from specviz.views.style import figure

    fig = figure(layout=figures._LAYOUT)
    fig.add_annotation(text="x <b>", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(height=260)
    assert json.loads(figures.empty_figure("x <b>").to_json()) == json.loads(fig.to_json())


def test_every_decision_chart_is_plotlys_own(monkeypatch) -> None:
    """The inspector's charts, every panel combination, equal those plotly's own calls
    build on make_subplots' figure."""
    from tests.test_render import match_trace

    charts = []
    for t in (sample_trace(), match_trace()):
        for rnd in t.rounds:
            for pos in range(rnd.start, rnd.start + rnd.n_accepted + 1):
                charts.append(decision_at(t, rnd.index, pos))
    got = [json.loads(figures.decision_figure(d).to_json()) for d in charts]
    monkeypatch.setattr(figures, "grid", PlotlyGrid)
    assert got == [json.loads(figures.decision_figure(d).to_json()) for d in charts]
    assert len(charts) >= 6


def test_runs_chart_is_plotlys_own(monkeypatch) -> None:
    from specviz.views import across_runs

    rows = [
        {"run": 1, "speedup": 1.4, "acceptance": 0.6, "changed": "gamma=3 <b>"},
        {"run": 2, "speedup": None, "acceptance": 0.7, "changed": ""},
        {"run": 3, "speedup": 0.9, "acceptance": 0.2, "changed": "greedy=True"},
    ]
    got = json.loads(across_runs.runs_figure(rows).to_json())
    monkeypatch.setattr(across_runs, "grid", PlotlyGrid)
    assert got == json.loads(across_runs.runs_figure(rows).to_json())
    assert len(got["data"]) == 2 and got["layout"]["shapes"][0]["yref"] == "y"


def test_a_small_drafted_token_reads_on_a_log_axis_with_room_over_the_bars() -> None:
    """A drafted token whose p and q are a few per cent of the tallest bar gets a log axis
    (its bars would be a few pixels high); otherwise the linear axis leaves room above the
    tallest bar for the arrow, so that no bar is cut at the top."""
    from specviz.trace import Drafted, Round

    def fig_for(p: float, q: float):
        top = [
            {"id": 1, "text": "big", "p": 0.9, "q": 0.33},
            {"id": 2, "text": "tok", "p": p, "q": q},
        ]
        d = Drafted(2, "tok", p, q, min(1.0, p / q), 0.9, "rejected", 0.5, top)
        trace = sample_trace()
        trace.rounds = [Round(0, 0, 1, [d], None, 1.0, 1.0, 0.0)]
        return figures.decision_figure(decision_at(trace, 0, 0))

    small = fig_for(0.00376, 0.0170)
    assert small.layout.yaxis.type == "log"
    lo, hi = small.layout.yaxis.range
    assert 10**lo < 0.00376 and 10**hi > 0.9  # every bar inside the axis
    assert "(log scale)" in small.layout.annotations[0].text
    large = fig_for(0.2, 0.3)
    assert large.layout.yaxis.type in (None, "linear", "-")
    assert large.layout.yaxis.range[1] >= 1.2 * 0.9
