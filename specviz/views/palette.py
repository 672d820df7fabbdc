"""The colours of every page and figure, and the glyphs that make whitespace visible in
token text, defined once. Imports nothing from the package.

``COLORS`` names a colour by what it means: the token statuses (each also has a cue beyond
colour, see assets/specviz.css), the target's and the draft's distributions p and q, the
residual, the two methods and the uniform draw. specviz.views.markup writes them as CSS
variables and specviz.views.figures colours its figures with them.

``SERIES`` colours, in order, series that mean nothing beyond their name: the benchmark's
prompts and modes, the distribution check's three curves.

:func:`show_whitespace` is the one place spaces, tabs and newlines become glyphs: the HTML
views (specviz.views.markup) wrap each glyph in a span, the figures (specviz.views.figures)
use it plain.
"""

from __future__ import annotations

from collections.abc import Callable

# Status and chart colours, with a cue beyond colour for each status (see assets/specviz.css).
COLORS: dict[str, str] = {
    "accepted": "#1a7f37",  # green, plain
    "rejected": "#cf222e",  # red, struck through
    "resampled": "#c2410c",  # orange, wavy underline and a small marker
    "bonus": "#0550ae",  # blue, double underline and a small marker
    "discarded": "#8c959f",  # grey, per-round view only
    "p": "#0550ae",  # the target's distribution
    "q": "#bf8700",  # the draft's distribution
    "residual": "#c2410c",  # norm(max(0, p - q))
    "out": "#1b7c83",  # a verification's computed output distribution at one position
    "spec": "#1a7f37",
    "ar": "#57606a",
    "u": "#6f42c1",  # the uniform draw
    "disagreement": "#bf3989",  # overlap shading: 1 - sum_x min(p, q)
    "rest": "#afb8c1",  # a round's time outside its draft and verify calls
}

# Figure furniture: axis grid lines, the zero line, and the outline of a highlighted bar.
GRID = "#eaeef2"
ZERO_LINE = "#d0d7de"
OUTLINE = "#000"

# D3's category10, a Plotly colorway: series i takes SERIES[i % len(SERIES)].
SERIES: tuple[str, ...] = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)

# The glyph that stands for each whitespace character in token text, and for no text at all.
WHITESPACE: dict[str, str] = {" ": "·", "\t": "→", "\n": "↵"}
EMPTY = "∅"


def _glyph(glyph: str, char: str) -> str:
    return glyph


def show_whitespace(text: str, mark: Callable[[str, str], str] = _glyph) -> str:
    """text with each space, tab and newline replaced by mark(glyph, char), and EMPTY's mark
    (with char "") when nothing is left; by default the glyph alone stands for the char."""
    shown = text.translate({ord(ch): mark(g, ch) for ch, g in WHITESPACE.items()})
    return shown or mark(EMPTY, "")
