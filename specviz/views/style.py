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
    """plotly's make_subplots in the page's style."""
    _styled()
    return make_subplots(**kwargs)
