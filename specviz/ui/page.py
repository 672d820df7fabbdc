"""The built page as each section's wiring sees it: the app context, the per-visitor session
state, the controls and every other component by name, and the event options shared by all
sections.

Handlers yield or return :data:`~specviz.ui.state.Changes` dicts keyed by component name;
:meth:`Page.keyed` is the one place that maps those names onto components, and
:meth:`Page.stream` and :meth:`Page.once` turn handlers into gradio event functions through
it and show a ValueError as one line. A name the page does not have is a KeyError (a bug,
caught by the tests that drive each event), never dropped; an update that names nothing
becomes ``gr.skip()``, never an empty dict (which gradio would take as one output value).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import gradio as gr

from specviz.ui.context import AppContext
from specviz.ui.errors import user_errors
from specviz.ui.state import FORM_FIELDS, Changes, Form

# The page's own events stay callable (tests, gradio_client) but off the API page, which
# documents the one named endpoint, /generate; events no client needs are private.
HIDDEN: dict[str, Any] = {"api_visibility": "undocumented"}
INTERNAL: dict[str, Any] = {"api_visibility": "private"}


@dataclass
class Page:
    """What the sections of the page share once every component exists, by name: the left
    column's controls (what a request sends, and what a lesson step sets), the components
    the page's events update (the live view, the tabs' figures, buttons and choices, the
    models line), and the lesson's panel (updated by the lesson's own events only)."""

    ctx: AppContext
    concurrency: int
    session: Any  # gr.State holding a specviz.ui.state.Session
    controls: dict[str, Any]
    components: dict[str, Any]
    lesson: dict[str, Any]
    blocks: Any  # the gr.Blocks being built (its load event opens the pair)

    def __post_init__(self) -> None:
        """A name means one component: a view named as a control would take the values a
        handler (a lesson step, a preset) meant for the control."""
        named = (self.controls, self.components, self.lesson)
        for i, a in enumerate(named):
            for b in named[i + 1 :]:
                for name in set(a) & set(b):
                    if a[name] is not b[name]:
                        raise ValueError(f"two components of the page are named {name!r}")

    @property
    def inputs(self) -> list[Any]:
        """The controls in Form field order: what Run, Step and the check send."""
        return [self.controls[name] for name in FORM_FIELDS]

    @property
    def outputs(self) -> list[Any]:
        """What Run, Step and the other page events may update (not the lesson's panel)."""
        return list(self.components.values())

    @property
    def model_queue(self) -> dict[str, Any]:
        """Every event that runs a model shares one queue and its concurrency limit."""
        return {"concurrency_id": "model", "concurrency_limit": self.concurrency}

    @property
    def waiting(self) -> dict[str, Any]:
        """Where a model-running event shows its wait: gradio's tracker on the status line
        alone, which reads "queue: 2/3 | 4.1/12.0s" while the event waits behind others
        (its place, the seconds waited, and once an event of its kind has finished in this
        process, gradio's estimate), and a full queue's line."""
        return {"show_progress": "full", "show_progress_on": [self.components["status"]]}

    @property
    def live(self) -> dict[str, Any]:
        return {**self.waiting, **self.model_queue, **HIDDEN}

    @property
    def quiet(self) -> dict[str, Any]:
        return {"show_progress": "hidden", "concurrency_limit": None, **HIDDEN}

    def form(self, values: tuple[Any, ...]) -> Form:
        return Form(**dict(zip(FORM_FIELDS, values, strict=True)))

    def component(self, name: str) -> Any:
        """The component of that name (a control or any other); KeyError if there is none."""
        for named in (self.components, self.lesson, self.controls):
            if name in named:
                return named[name]
        raise KeyError(f"no component named {name!r} on this page")

    def keyed(self, out: Changes) -> dict[Any, Any]:
        """The handler's update by component; gr.skip() when it names none. An unknown name
        is a KeyError: the tests that drive each event catch it."""
        if not out:
            return gr.skip()
        return {self.component(k): value for k, value in out.items()}

    def stream(
        self, handler: Callable[..., Generator[Changes, None, Any]]
    ) -> Callable[..., Iterator[Any]]:
        """A generator event function from a handler that yields views. When gradio closes
        it (the visitor left, or the event was cancelled) the handler is closed at once, so
        that its work is stopped (specviz.ui.worker)."""

        @user_errors
        def event(*args: Any) -> Iterator[dict[Any, Any]]:
            with closing(handler(*args)) as updates:
                for out in updates:
                    yield self.keyed(out)

        return event

    def once(self, handler: Callable[..., Changes]) -> Callable[..., dict[Any, Any]]:
        """An event function from a handler that returns views."""

        @user_errors
        def event(*args: Any) -> dict[Any, Any]:
            return self.keyed(handler(*args))

        return event
