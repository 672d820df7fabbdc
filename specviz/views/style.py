"""The one style of every figure specviz draws: plotly's "plotly_white" template.

A template named in a figure's layout is validated and deep-copied each time it is set:
about 15 ms a figure on a 2-core CPU, and a page frame builds several. The default template
is given to each new figure as plotly's own, already validated, object, in well under a
millisecond. So the style is not named in any layout: :func:`figure` and :func:`grid` build
every figure, and the first call makes plotly_white the process's default
template (plotly's documented way to theme every figure; specviz draws all the figures its
processes draw).

Each update_layout (or update_xaxes, add_hline) on a figure validates its edit again, about
3 ms where go.Figure validates a whole plain layout in well under one; so the figures of a
page frame are built as plain data and layout dicts and made a figure once.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
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


def grid(**kwargs: Any) -> Grid:
    """make_subplots' figure (its arguments) as plain JSON, to be filled with traces,
    annotations and axis settings and made a figure once (Grid.figure)."""
    titles = list(kwargs.pop("subplot_titles", None) or [])
    kept, grid_ref = _grid(kwargs, titles)
    # the template left out: go.Figure gives a new figure the default one, validated already
    layout = copy.deepcopy({key: value for key, value in kept.items() if key != "template"})
    for note, text in zip(layout.get("annotations", []), [t for t in titles if t], strict=True):
        note["text"] = text
    return Grid(layout, grid_ref)


def _grid(kwargs: dict[str, Any], titles: list[str]) -> tuple[dict[str, Any], Any]:
    """make_subplots' layout (titles "-") and grid_ref, made once per shape: make_subplots
    validates the whole layout it builds (8 ms for three rows on a 2-core CPU), and its
    result depends on the shape alone, and on the titles only through their text."""
    _styled()
    key = repr(sorted(kwargs.items())) + repr([bool(t) for t in titles])
    made = _grids.get(key)
    if made is None:
        shaped = make_subplots(**kwargs, subplot_titles=[t and "-" for t in titles] or None)
        # grid_ref: the axes of each cell, what add_trace(row=, col=) reads
        made = _grids[key] = (shaped.layout.to_plotly_json(), shaped._grid_ref)
    return made


_grids: dict[str, tuple[dict[str, Any], Any]] = {}


def merge(into: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Write more into into, dict values key by key (as update_layout merges them), other
    values replaced; the dicts of more are copied, never shared. Returns into."""
    for key, value in more.items():
        if isinstance(value, dict):
            if not isinstance(into.get(key), dict):
                into[key] = {}
            merge(into[key], value)
        else:
            into[key] = value
    return into


def merged(*layouts: dict[str, Any]) -> dict[str, Any]:
    """A new dict with the layouts merged in, in order (:func:`merge`); none is changed."""
    out: dict[str, Any] = {}
    for more in layouts:
        merge(out, more)
    return out


@dataclass
class Grid:
    """A subplot figure's data and layout as plain JSON, made a figure once.

    The calls mirror plotly's with row= and col=: add (add_trace), place (add_annotation,
    add_shape), axis (update_xaxes, update_yaxes); each edit of a plotly figure validates
    again (update_layout: about 3 ms), where :meth:`figure` validates all of it in one
    go.Figure. The figure is the one those calls build (tests/test_plots.py compares them).
    """

    layout: dict[str, Any]
    refs: Any
    data: list[dict[str, Any]] = field(default_factory=list)

    def _cell(self, row: int, col: int) -> Any:
        return self.refs[row - 1][col - 1][0]

    def add(self, trace: dict[str, Any], row: int, col: int = 1) -> None:
        """A trace (its "type" given) on a cell's axes."""
        self.data.append({**trace, **self._cell(row, col).trace_kwargs})

    def place(self, kind: str, item: dict[str, Any], row: int, col: int = 1) -> None:
        """An annotation or shape (kind "annotations", "shapes") on a cell's axes; a ref
        that names "domain" refers to that axis's domain."""
        refs = {}
        for letter, key in zip("xy", self._cell(row, col).layout_keys, strict=True):
            ref = key.replace("axis", "")
            refs[f"{letter}ref"] = ref + (
                " domain" if "domain" in item.get(f"{letter}ref", "") else ""
            )
        self.layout.setdefault(kind, []).append({**item, **refs})

    def axis(self, letter: str, row: int, col: int = 1, **props: Any) -> None:
        """Settings of a cell's x or y axis (letter "x" or "y")."""
        key = self._cell(row, col).layout_keys["xy".index(letter)]
        merge(self.layout.setdefault(key, {}), props)

    def figure(self, *layouts: dict[str, Any]) -> go.Figure:
        """The figure, with the layouts' keys merged in, in order."""
        for more in layouts:
            merge(self.layout, more)
        return figure(data=self.data, layout=self.layout)
