"""The decision as the page shows it: numbers with digits enough to check p/q (the
verdict sentence, the decision figure's labels, the decision panel beside the tokens), the
panel for chain, exact-match and tree decisions, and the figures' legends and axes."""

from __future__ import annotations

import re
from html import unescape

import pytest

from specviz.trace import Drafted, Node, Round, decision_at
from specviz.verify.rejection import Rejection
from specviz.verify.words import num, pq
from specviz.views import across_runs, decision_panel, figures, markup, theory_figures, timing
from tests.test_render import NASTY, drafted, match_trace, sample_trace


def _half_ulp(shown: str) -> float:
    """Half a unit of the last digit a number was written with."""
    mantissa, _, exponent = shown.partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (-decimals) * 10.0 ** int(exponent or 0)


def checkable(sentence: str) -> None:
    """p and q in the sentence are each known to 5 % or better, and their ratio agrees with
    the ratio the sentence states, within the rounding of all three."""
    got = re.search(r"p/q = ([0-9.e-]+) \(p = ([0-9.e-]+), q = ([0-9.e-]+)\)", sentence)
    assert got, sentence
    ratio, p, q = got.groups()
    for shown in (p, q):
        assert _half_ulp(shown) <= 0.05 * float(shown), (shown, sentence)
    lo = (float(p) - _half_ulp(p)) / (float(q) + _half_ulp(q))
    hi = (float(p) + _half_ulp(p)) / (float(q) - _half_ulp(q))
    assert lo - _half_ulp(ratio) <= float(ratio) <= hi + _half_ulp(ratio), sentence


def test_small_probabilities_keep_three_significant_figures() -> None:
    assert [num(x) for x in (0.0146, 0.027, 0.05, 0.003, 1.234e-5)] == [
        "0.0146",
        "0.0270",
        "0.0500",
        "0.00300",
        "1.23e-05",
    ]
    assert [num(x) for x in (0.0, 0.1, 0.4567, 1.0)] == ["0.00", "0.10", "0.46", "1.00"]


@pytest.mark.parametrize(
    ("p", "q", "u", "status"),
    [
        (0.0146, 0.027, 0.6, "rejected"),  # the lecturer's "p = 0.01, q = 0.03, p/q = 0.54"
        (0.0146, 0.027, 0.3, "accepted"),
        (0.004, 0.091, 0.02, "accepted"),
        (0.2, 0.47, 0.94, "rejected"),
        (0.123, 0.981, 0.5, "rejected"),
        (3e-5, 0.0007, 0.01, "accepted"),
    ],
)
def test_the_verdict_lets_p_over_q_be_checked(p: float, q: float, u: float, status: str) -> None:
    d = drafted("tok", status, p, q, u)
    checkable(Rejection().keep_text(d))
    rnd = Round(0, 0, 1, [d], None, 1.0, 1.0, 0.0)
    trace = sample_trace()
    trace.rounds = [rnd]
    html = unescape(markup.verdict_html(decision_at(trace, 0, 0)))
    checkable(html)
    panel = unescape(decision_panel.decision_panel_html(decision_at(trace, 0, 0)))
    checkable(panel)  # the panel states the same sentence
    # beside the bars, three figures each (words.pq)
    assert f">{pq(p)}<" in panel and f">{pq(q)}<" in panel
    assert all(len(re.sub(r"^0\.0*|e.*$|\.", "", pq(x))) == 3 for x in (p, q))


def test_the_decision_figure_labels_p_and_q_with_their_digits() -> None:
    d = drafted("tok", "rejected", 0.0146, 0.027, 0.94)
    rnd = Round(0, 0, 1, [d], None, 1.0, 1.0, 0.0)
    trace = sample_trace()
    trace.rounds = [rnd]
    fig = figures.decision_figure(decision_at(trace, 0, 0))
    titles = [a.text.replace("<br>", " ") for a in fig.layout.annotations]
    assert any("p = 0.0146, q = 0.0270" in t for t in titles), titles
    bars = {tr.name: tr for tr in fig.data if tr.type == "bar"}
    # no label over the drafted token's two thin bars, where one would cover the other: the
    # numbers are in the panel's title
    assert bars["p (target)"].text is None and bars["q (draft)"].text is None
    (u,) = [tr for tr in fig.data if tr.name == "u (draw)"]
    # near 1 the draw's label stands on the mark's left, inside the axis, never cut off
    assert u.text == ("u = 0.94",) and u.textposition == "middle left" and u.cliponaxis is False
    keep = bars["min(1, p/q)"]
    assert keep.text == ("min(1, p/q) = 0.54",)


def test_the_panel_shows_a_rejection_and_what_replaced_it() -> None:
    html = decision_panel.decision_panel_html(decision_at(sample_trace(), 0, 1))
    assert 'data-keep="0.20" data-u="0.90"' in html
    assert "sv-dp-u-left" in html  # u = 0.9: its label on the mark's left
    assert html.count('class="sv-dp-part"') == 2  # the rejected draft, then the resampled
    text = unescape(re.sub(r"<[^>]+>", "", html))
    assert "round 1 · position 1" in text
    assert "rejected: u = 0.90 ≥ p/q = 0.20 (p = 0.100, q = 0.500)" in text
    assert "r(x)" in text and "from the residual norm(max(0, p − q))" in text
    assert "<script" not in html and "<img" not in html  # the token text is escaped
    assert "&lt;img" in html


def test_the_panel_under_exact_match_has_no_draw() -> None:
    html = decision_panel.decision_panel_html(decision_at(match_trace(), 0, 1))
    assert "data-u" not in html and 'class="sv-dp-u' not in html
    text = unescape(re.sub(r"<[^>]+>", "", html))
    assert "p(x)" in text and "exact match: the target sampled" in text
    assert "<script" not in html


def test_a_bonus_and_a_tree_node() -> None:
    bonus = decision_panel.decision_panel_html(decision_at(sample_trace(), 1, 3))
    assert 'data-status="bonus"' in bonus and "data-keep" not in bonus
    node = Node(
        7,
        NASTY,
        -1,
        1,
        q=0.3,
        p=0.02,
        status="rejected",
        trial=1,
        p_prime=0.0123,
        accept_prob=0.041,
        u=0.77,
    )
    rnd = Round(0, 0, 2, [], None, 1.0, 1.0, 0.0, tree=[2], nodes=[node])
    html = decision_panel.node_panel_html(rnd, node, "rejected (tried second)")
    assert 'data-keep="0.0410" data-u="0.77"' in html
    assert ">0.0123<" in html and "min(1, p′/q)" in html and "tree depth 1" in html
    assert "<script" not in html
    assert decision_panel.hint_html().startswith('<div class="sv-dp sv-dp-hint">')


def _figures() -> dict[str, object]:
    """One figure of each kind the page draws with a legend."""
    t = sample_trace()
    ar = sample_trace()
    ar.method = "ar"
    ar.timeline = [[0.02, 2.0], [0.04, 4.0]]
    bins = [
        {
            "predicted": 0.5,
            "observed": 0.4,
            "ci_low": 0.3,
            "ci_high": 0.6,
            "judged": True,
            "lo": 0.4,
            "hi": 0.6,
            "n": 20,
        }
    ]
    return {
        "decision": figures.decision_figure(decision_at(t, 0, 1)),
        "speedup": figures.speedup_figure(t, ar),
        "theory": theory_figures.theory_figure(0.8, 0.2, 4, 1.5, {3: 1.1, 5: 1.2}),
        "projection": theory_figures.projection_figure(0.8, 0.2, 4),
        "time": timing.breakdown_figure(t),
        "reliability": across_runs.reliability_figure({"bins": bins, "traces": 1}),
        "sweep": across_runs.sweep_figure(
            [
                {
                    "gamma": 2,
                    "temperature": 0.7,
                    "alpha": 0.8,
                    "c": 0.2,
                    "measured_speedup": 1.3,
                    "tokens_per_call": 2.4,
                }
            ]
        ),
    }


@pytest.mark.parametrize("name", list(_figures()))
def test_legends_sit_at_the_figure_bottom_edge_below_the_axis_titles(name: str) -> None:
    """A legend placed in the plot area's coordinates below it lands on the x axis's title;
    at the container's bottom edge plotly widens the margin to hold it instead."""
    fig = _figures()[name]
    legend = fig.layout.legend
    assert (legend.yref, legend.y, legend.yanchor) == ("container", 0, "bottom"), name
    assert legend.orientation == "h" and legend.xanchor == "left"


def test_the_reliability_diagram_keeps_its_x_axis_on_the_probabilities() -> None:
    fig = _figures()["reliability"]
    for axis in (fig.layout.xaxis, fig.layout.yaxis):
        lo, hi = axis.range
        assert -0.05 <= lo and hi <= 1.05
    # square by narrowing the plot area: plotly would otherwise widen the x range to keep
    # the scale anchored to y (the lecturer's x axis ran from -1 to 2)
    assert fig.layout.yaxis.scaleanchor == "x"
    assert fig.layout.xaxis.constrain == "domain" and fig.layout.yaxis.constrain == "domain"


def test_drafted_rows_keep_their_own_numbers() -> None:
    d: Drafted = drafted("x", "accepted", 0.9, 0.6, 0.2)
    assert figures.pq_numbers(d) == "p = 0.900, q = 0.600"
