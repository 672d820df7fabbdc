"""The built page as each part's wiring sees it: the app context, the per-visitor session
state, the controls and every view by name, and the event options shared by all parts.

Handlers yield or return :data:`~specviz.ui.state.View` dicts keyed by view name;
:meth:`Page.stream` and :meth:`Page.once` turn them into gradio event functions that map
names onto components and show a ValueError as one line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from specviz.ui.errors import user_errors
from specviz.ui.pairs import AppContext
from specviz.ui.state import FORM_FIELDS, Form, View

# The page's own events stay callable (tests, gradio_client) but off the API page, which
# documents the one named endpoint, /generate; events no client needs are private.
HIDDEN: dict[str, Any] = {"api_visibility": "undocumented"}
INTERNAL: dict[str, Any] = {"api_visibility": "private"}
# What some handlers return beside their views, for the lesson to state: no component shows
# them. The distribution check's result, and the sweep's rows.
DATA = frozenset({"check_result", "sweep_rows"})


@dataclass
class Page:
    """What the parts of the page share once every component exists."""

    ctx: AppContext
    concurrency: int
    session: Any  # gr.State holding a specviz.ui.state.Session
    controls: dict[str, Any]
    views: dict[str, Any]
    blocks: Any  # the gr.Blocks being built (its load event opens the pair)

    @property
    def inputs(self) -> list[Any]:
        """The controls in Form field order: what Run, Step and the check send."""
        return [self.controls[name] for name in FORM_FIELDS]

    @property
    def outputs(self) -> list[Any]:
        return list(self.views.values())

    @property
    def model_queue(self) -> dict[str, Any]:
        """Every event that runs a model shares one queue and its concurrency limit."""
        return {"concurrency_id": "model", "concurrency_limit": self.concurrency}

    @property
    def live(self) -> dict[str, Any]:
        return {"show_progress": "minimal", **self.model_queue, **HIDDEN}

    @property
    def quiet(self) -> dict[str, Any]:
        return {"show_progress": "hidden", "concurrency_limit": None, **HIDDEN}

    def form(self, values: tuple[Any, ...]) -> Form:
        return Form(**dict(zip(FORM_FIELDS, values, strict=True)))

    def keyed(self, out: View) -> dict[Any, Any]:
        """The handler's views by component; a name the page has no view for is an error,
        except the results in DATA, which no component shows."""
        unknown = [k for k in out if k not in self.views and k not in DATA]
        if unknown:
            raise KeyError(f"no view named {', '.join(map(repr, unknown))} on this page")
        return {self.views[k]: v for k, v in out.items() if k not in DATA}

    def stream(self, handler: Callable[..., Iterator[View]]) -> Callable[..., Iterator[Any]]:
        """A generator event function from a handler that yields views."""

        @user_errors
        def event(*args: Any) -> Iterator[dict[Any, Any]]:
            for out in handler(*args):
                yield self.keyed(out)

        return event

    def once(self, handler: Callable[..., View]) -> Callable[..., dict[Any, Any]]:
        """An event function from a handler that returns views."""

        @user_errors
        def event(*args: Any) -> dict[Any, Any]:
            return self.keyed(handler(*args))

        return event
