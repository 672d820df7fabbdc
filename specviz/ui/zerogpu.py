"""ZeroGPU, the way the Spaces documentation shows it: the Space's pair loads at start-up
(``torch.cuda`` reads as available there, so it lands on 'cuda' as the guide's module-level
``model.to('cuda')`` does), and each model-running event calls one function decorated with
``spaces.GPU``, its duration computed from the size of the run.

A run is a decorated generator, so it streams round by round as it does anywhere else.
Step replays the run up to its next round in one GPU call: no model state survives between
GPU calls, and the seed makes the replay the same run. Arguments and yields cross a process
boundary, so only forms, settings and trace pieces (plain dataclasses) go through; the pair
itself is found in the process-wide model cache, which the start-up load filled.

Off ZeroGPU (``spaces`` missing, or SPACES_ZERO_GPU unset) ``spaces.GPU`` returns the
function unchanged, and the app's runner (specviz.ui.runners) is the local one, which uses
none of this.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from specviz.config import Deployment, Settings
from specviz.engine import Run, warm_up
from specviz.pair import ModelPair
from specviz.trace import Round, Stats, Trace
from specviz.ui import pairs
from specviz.ui.state import Form

GPU_SECONDS_MAX = 120  # the longest one call may hold a GPU
SETUP_SECONDS = 15  # attaching the GPU, the warm-up, the first forward
SECONDS_PER_TOKEN = 0.1  # a generous budget per generated token (both methods count)


def duration(form: Form, settings: Settings, *_: Any) -> int:
    """Seconds to ask for: the set-up plus a budget per token of every run in the call
    (spaces calls this with the decorated function's own arguments)."""
    tokens = settings.max_new_tokens * (2 if form.compare else 1)
    return int(min(GPU_SECONDS_MAX, SETUP_SECONDS + SECONDS_PER_TOKEN * tokens))


def preload(dep: Deployment) -> ModelPair:
    """At start-up on ZeroGPU (specviz.ui.runners.ZeroGpuRunner): load the first pair this
    Space offers, once per process."""
    name = next(p for p in pairs.offered_pairs(dep, gpu_present=True) if p != pairs.CUSTOM)
    return pairs.default_loader(name, "auto")


@dataclass
class Piece:
    """One target call's worth of a run, as it crosses the process boundary."""

    method: str
    round: Round | None  # None for an autoregressive step
    new_ids: list[int]
    texts: list[str]
    t_s: float


@dataclass
class Done:
    """A run's end: what the finished trace adds to its pieces."""

    method: str
    stop_reason: str
    text: str
    stats: Stats


Event = Trace | Piece | Done  # a Trace starts each run (settings, prompt ids, models)


def stream(form: Form, settings: Settings) -> Iterator[Event]:
    """The speculative run then (with compare) the baseline, one event per target call."""
    pair = pairs.load_default(form)
    warm_up(pair, form.prompt, settings)
    methods = ("spec", "ar") if form.compare else ("spec",)
    for method in methods:
        run = Run(pair, form.prompt, settings.with_(method=method))
        yield _empty_copy(run.trace)
        for upd in run:
            texts = run.trace.token_texts[len(run.trace.token_texts) - len(upd.new_ids) :]
            yield Piece(method, upd.round, list(upd.new_ids), list(texts), upd.t_s)
        tr = run.trace
        yield Done(method, tr.stop_reason, tr.text, tr.stats)


def step_trace(form: Form, settings: Settings, rounds: int) -> Trace:
    """The speculative run replayed up to `rounds` rounds (fewer when it ends first)."""
    pair = pairs.load_default(form)
    run = Run(pair, form.prompt, settings)
    it = iter(run)
    for upd in it:
        r = upd.round
        last = r is None or r.added is None or r.added.id in pair.eos_ids
        if len(run.trace.rounds) >= rounds and not (
            last or upd.n_tokens >= settings.max_new_tokens
        ):
            it.close()  # finalises the trace as "stopped"
            break
    return run.trace


def apply(traces: dict[str, Trace], event: Event) -> None:
    """Rebuild the runs' traces from their events, as the engine built them."""
    if isinstance(event, Trace):
        traces[event.method] = event
        return
    tr = traces[event.method]
    if isinstance(event, Piece):
        tr.append_call(event.new_ids, event.texts, event.t_s, event.round)
    else:
        tr.stop_reason, tr.text, tr.stats = event.stop_reason, event.text, event.stats


def _empty_copy(trace: Trace) -> Trace:
    return Trace.from_dict({**trace.to_dict(), "rounds": [], "token_ids": [], "token_texts": []})


@functools.cache
def _decorated(fn: Callable[..., Any], spaces: Any) -> Callable[..., Any]:
    return spaces.GPU(duration=duration)(fn)


def on_gpu(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn decorated with ``spaces.GPU`` (duration from the run's size) when ``spaces`` is
    importable, decorated once per function; fn itself otherwise."""
    spaces = pairs.spaces_module()
    return fn if spaces is None else _decorated(fn, spaces)
