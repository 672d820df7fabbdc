"""The one style of every figure specviz draws: plotly's "plotly_white" template.

A template named in a figure's layout is validated and deep-copied each time it is set:
about 15 ms a figure on a 2-core CPU, and a page frame builds several. The default template
is given to each new figure as plotly's own, already validated, object, in well under a
millisecond. So the style is not named in any layout: :func:`figure` and :func:`subplots`
build every figure, and the first call makes plotly_white the process's default template
(plotly's documented way to theme every figure; specviz draws all the figures its
processes draw).
"""

from __future__ import annotations

import copy
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

TEMPLATE = "plotly_white"


def _styled() -> None:
    if pio.templates.default != TEMPLATE:
        pio.templates.default = TEMPLATE


def figure(*args: Any, **kwargs: Any) -> go.Figure:
    """go.Figure in the page's style."""
    _styled()
    return go.Figure(*args, **kwargs)


def subplots(**kwargs: Any) -> go.Figure:
    """plotly's make_subplots in the page's style, from a grid made once per shape.

    make_subplots validates the whole layout it builds (8 ms for three rows on a 2-core
    CPU, more than half of a decision chart's cost). Its result depends on the shape alone,
    and on the titles only through their text, so the first figure of a shape (the same
    arguments, titles aside) keeps its layout, and each later one copies that layout, known
    valid, without validating it again, then writes its own titles into the title
    annotations. Later edits validate as usual. The figure is the one make_subplots would
    build (tests/test_plots.py compares them)."""
    _styled()
    titles = list(kwargs.pop("subplot_titles", None) or [])
    key = repr(sorted(kwargs.items())) + repr([bool(t) for t in titles])
    grid = _grids.get(key)
    if grid is None:
        shaped = make_subplots(**kwargs, subplot_titles=[t and "-" for t in titles] or None)
        grid = _grids[key] = (
            shaped.layout.to_plotly_json(),
            shaped._grid_ref,  # what add_trace(row=, col=) reads
            shaped._grid_str,
        )
    layout, grid_ref, grid_str = grid
    fig = go.Figure(layout=copy.deepcopy(layout), _validate=False)
    fig._grid_ref, fig._grid_str = grid_ref, grid_str
    fig._validate = fig._layout_obj._validate = True
    for note, text in zip(fig.layout.annotations, [t for t in titles if t], strict=True):
        note.text = text
    return fig


_grids: dict[str, tuple[dict[str, Any], Any, Any]] = {}
