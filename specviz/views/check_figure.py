"""The distribution check's figure: per view, the speculative and the autoregressive
frequencies beside the exact target probabilities (Plotly; no gradio)."""

from __future__ import annotations

from typing import Any

from specviz.analysis.binning import OTHER, CheckView
from specviz.analysis.chisquare import frequencies
from specviz.analysis.distribution_check import CheckResult
from specviz.views.figures import add_bar_group, label
from specviz.views.style import subplots


def check_figure(result: CheckResult, max_bins: int = 20) -> Any:
    """Plotly figure: per view, speculative and autoregressive frequencies beside exact p."""
    titles = [
        f"{v.name}: TV(spec, p) {v.tv_spec:.3f}, p-value {v.spec_test.p_text}"
        f" | TV(AR, p) {v.tv_ar:.3f}, p-value {v.ar_test.p_text}"
        for v in result.views
    ]
    fig = subplots(rows=len(result.views), cols=1, subplot_titles=titles)
    for row, v in enumerate(result.views, start=1):
        idx = _shown(v, max_bins)
        x = [_display(v.labels[i], i) for i in idx]
        series = (
            ("speculative", frequencies(v.spec)),
            ("autoregressive", frequencies(v.ar)),
            ("exact p", v.exact),
        )
        add_bar_group(fig, row, [(name, x, [ys[i] for i in idx]) for name, ys in series])
        fig.update_yaxes(title_text="probability", row=row, col=1)
    verdict = "passes" if result.passed else "FAILS"
    what = "exact match" if result.verifier == "exact match" else f"{result.rule} rule"
    fig.update_layout(
        barmode="group",
        title=f"Distribution check ({what}, N = {result.n} each): {verdict}",
        height=360 * len(result.views) + 80,
        legend={"orientation": "h", "y": -0.12},
    )
    return fig


def _shown(v: CheckView, max_bins: int) -> list[int]:
    """The most likely bins (up to max_bins) and always "other"."""
    last = len(v.labels) - 1
    return [*range(min(max_bins, last)), last]


def _display(text: str, i: int) -> str:
    """A bar label: whitespace made visible, and unique (bars with equal text would merge)."""
    return text if text == OTHER else f"{i + 1}. {label(text)}"
