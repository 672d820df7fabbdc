"""The once-per-process warm-up of a pair before its first measured run (engine.warm_up:
first-call set-up, and on the compiled path the compilation of the run's shapes), for the
handlers that time what they run.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Protocol

from specviz.config import Settings
from specviz.engine import warm_up
from specviz.modelthread import MODEL_THREAD
from specviz.pair import LoadedModel, ModelPair
from specviz.ui.errors import model_failures
from specviz.ui.pairs import pair_label
from specviz.ui.state import Form


class Models(Protocol):
    """What the runners and the warm-up use of the app's context (specviz.ui.context.
    AppContext): the form's settings under the deployment's limits, the form's pair (loaded
    once per process) and the loader that says what may load."""

    loader: Any

    def settings(self, form: Form) -> Settings: ...

    def pair(self, form: Form) -> ModelPair: ...


_warm_lock = threading.Lock()
# The targets of the pairs that have run once in this process, held weakly: an entry lives as
# long as its target, so no other object takes its id meanwhile, and a pair that
# specviz.models released is not kept alive here
_warmed: weakref.WeakValueDictionary[tuple[int, str | None], LoadedModel] = (
    weakref.WeakValueDictionary()
)


def running(form: Form) -> str:
    """What the app was doing, for a failure's one line."""
    return f"running pair {pair_label(form)!r}"


def warmed_pair(ctx: Models, form: Form) -> ModelPair:
    """The form's pair, loaded, and warmed (engine.warm_up) once per process."""
    settings = ctx.settings(form)
    pair = ctx.pair(form)
    with _warm_lock:
        key = (id(pair.target), pair.compile_backend)  # a compiled copy warms on its own
        if key not in _warmed:
            with model_failures(running(form)):
                MODEL_THREAD.call(lambda: warm_up(pair, form.prompt, settings))
            _warmed[key] = pair.target
    return pair
