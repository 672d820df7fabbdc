"""The distribution check's figure: per comparison, the speculative and the autoregressive
frequencies beside the target's probabilities (Plotly; no gradio)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specviz.analysis.binning import OTHER, Comparison
from specviz.analysis.chisquare import frequencies
from specviz.analysis.distribution_check import CheckResult
from specviz.views.figures import LEGEND, add_bar_group, label, lines_of, wrapped
from specviz.views.style import grid


def check_figure(result: CheckResult, max_bins: int = 20) -> Any:
    """Plotly figure: per comparison, speculative and autoregressive frequencies beside the
    target's p."""
    return checks_figure([result], max_bins)


def checks_figure(results: Sequence[CheckResult], max_bins: int = 20) -> Any:
    """Plotly figure of one or more checks: per check and comparison, speculative and
    autoregressive frequencies beside the target's p, each titled with its verdict, its
    p-value and its bins."""
    panels = [(result, comp) for result in results for comp in result.comparisons]
    several = len(results) > 1
    titles = [
        wrapped(
            (f"{_what(result)} {_verdict(result)}: " if several else "")
            + f"{comp.name}: TV(spec, p) {comp.tv_spec:.3f}, p-value {comp.spec_test.p_text} over "
            f"{len(comp.labels)} bins | TV(AR, p) {comp.tv_ar:.3f}, p-value {comp.ar_test.p_text}"
        )
        for result, comp in panels
    ]
    fig = grid(rows=len(panels), cols=1, subplot_titles=titles, vertical_spacing=0.6 / len(panels))
    for row, (_, comp) in enumerate(panels, start=1):
        idx = _shown(comp, max_bins)
        x = [_display(comp.labels[i], i) for i in idx]
        series = (
            ("speculative", frequencies(comp.spec)),
            ("autoregressive", frequencies(comp.ar)),
            ("target p", comp.p),
        )
        bars = [(name, x, [ys[i] for i in idx]) for name, ys in series]
        add_bar_group(fig, row, bars)
        tallest = max((y for _, _, ys in bars for y in ys), default=1.0) or 1.0
        # a fixed range with room on top: no bar ends at the plot's edge
        fig.axis("y", row, title={"text": "probability"}, range=[0, 1.15 * tallest])
    n = ", ".join(sorted({str(r.n) for r in results}))
    if several:
        verdicts = "; ".join(f"{_what(r)} {_verdict(r)}" for r in results)
        title = f"Distribution checks (N = {n} each): {verdicts}"
    else:
        title = f"Distribution check ({_what(results[0])}, N = {n} each): {_verdict(results[0])}"
    title = wrapped(title)
    # the figure's title, then the first panel's, in the top margin
    top = 30 + 15 * (lines_of(title) + lines_of(titles[0]) if titles else lines_of(title))
    more = {
        "title": {"text": title},
        "height": 400 * len(panels) + 80 + top,
        "margin": {"t": top},
        "legend": LEGEND,
    }
    return fig.figure({"barmode": "group"}, more)


def _what(result: CheckResult) -> str:
    return "exact match" if result.verifier == "exact match" else f"{result.rule} rule"


def _verdict(result: CheckResult) -> str:
    return "passes" if result.passed else "FAILS"


def _shown(comp: Comparison, max_bins: int) -> list[int]:
    """The most likely bins (up to max_bins) and always "other"."""
    last = len(comp.labels) - 1
    return [*range(min(max_bins, last)), last]


def _display(text: str, i: int) -> str:
    """A bar label: whitespace made visible, and unique (bars with equal text would merge)."""
    return text if text == OTHER else f"{i + 1}. {label(text)}"
