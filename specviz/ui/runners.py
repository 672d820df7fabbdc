"""Where the models run for this app, chosen once when its context is built
(:func:`choose_runner`, the one place that asks whether this is a ZeroGPU Space):

- :class:`LocalRunner`: the pair stays loaded in this process and every model call runs on
  the model thread (specviz.modelthread); a Run is driven by a Worker that never waits for
  the page and stops between rounds when asked (Stop, or the visitor leaving).
- :class:`ZeroGpuRunner`: each event is one ``spaces.GPU`` call (specviz.ui.zerogpu); a Run
  streams out of it round by round, a Step replays the run to one round more, and nothing
  stays loaded between calls, so there is no compiled path and no sweep.

Handlers (specviz.ui.live, the sweep) call the context's runner and never ask which it is.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch

from specviz.config import Deployment, Settings
from specviz.engine import Run, Update, interleave
from specviz.metrics import summarize
from specviz.modelthread import MODEL_THREAD
from specviz.pair import ModelPair
from specviz.threads import Load, policy
from specviz.trace import Round, Trace
from specviz.ui import pairs, zerogpu
from specviz.ui.errors import model_failures
from specviz.ui.frames import exact_note, live_frame, logged_frame, models_html
from specviz.ui.state import Changes, Form, Session
from specviz.ui.warm import Models, running, warmed_pair
from specviz.ui.worker import Worker
from specviz.views import markup

StepKey = tuple[Any, ...]  # what a Step's run was started with (a change starts a new one)


class Runner(Protocol):
    """How this app runs the models: a live Run, one Step, a whole run for the named API."""

    name: str
    attaches_gpu: bool  # a GPU is attached per call (the pair menu puts GPU pairs first)
    compiles: bool  # the compiled path is offered (the compile box is shown)
    keeps_models: bool  # a pair stays loaded between events (the sweep needs it)

    def preload(self, dep: Deployment) -> ModelPair | None:
        """At start-up: load what must be loaded before the first event (None: nothing)."""
        ...

    def run(
        self, session: Session, form: Form, ctx: Models, settings: Settings
    ) -> Iterator[Changes]:
        """Both runs streamed into the session (the baseline with compare), then every view."""
        ...

    def step(
        self, session: Session, form: Form, ctx: Models, settings: Settings, key: StepKey
    ) -> tuple[Round | None, Changes]:
        """One round more of the session's Step run (a new run when key changed): the round
        taken (None: the run ended without one) and the views the runner itself sets."""
        ...

    def complete(self, ctx: Models, form: Form, settings: Settings) -> tuple[Trace, Trace | None]:
        """The speculative run and (with compare) the baseline, each to its end."""
        ...


def _stamp(load: Load | None, *traces: Trace | None) -> None:
    """Each trace records the machine its run met (the threads, the rest's CPU use)."""
    if load is not None:
        for t in traces:
            if t is not None:
                t.machine = load.to_dict()


def decoder(pair: ModelPair) -> Callable[[list[int]], str]:
    """The pair's decode for a session to keep: its tokenizer's, not a bound method of the
    pair, which would keep the pair's models alive after specviz.models released them."""
    return functools.partial(pair.tokenizer.decode, skip_special_tokens=True)


class LocalRunner:
    """The models in this process, on the model thread."""

    name = "local"
    attaches_gpu = False
    compiles = True
    keeps_models = True

    def preload(self, dep: Deployment) -> ModelPair | None:
        return None  # the page's load event opens the pair

    def run(
        self, session: Session, form: Form, ctx: Models, settings: Settings
    ) -> Iterator[Changes]:
        t_click = time.perf_counter()
        pair = warmed_pair(ctx, form)
        spec_run = Run(pair, form.prompt, settings)
        ar_run = Run(pair, form.prompt, settings.with_(method="ar")) if form.compare else None
        session.start(spec_run.trace, ar_run.trace if ar_run else None, "run")
        session.decode = decoder(pair)
        # with the baseline, both advance in turn on the model thread (engine.interleave),
        # so that each meets the same load and the speedup compares equal lengths
        worker = Worker([interleave([spec_run, ar_run]) if ar_run else spec_run], session.stop)
        yield {
            "models": models_html(spec_run.trace),
            "tokens": markup.tokens_html([]),
            "exact_note": exact_note(spec_run.trace),
        }
        last_speed = 0.0
        for _ in worker.polls():
            frame, last_speed = live_frame(session, last_speed)
            if frame:
                if session.first_round_s is None and session.spans:
                    session.first_round_s = time.perf_counter() - t_click
                yield frame
        if worker.error is not None:
            # no half-finished trace to export or inspect
            with model_failures(running(form), lambda: session.start(None, None, "idle")):
                raise worker.error
        _stamp(worker.load, spec_run.trace, ar_run.trace if ar_run else None)
        yield logged_frame(session, spec_run.trace, ar_run.trace if ar_run else None, settings)

    def step(
        self, session: Session, form: Form, ctx: Models, settings: Settings, key: StepKey
    ) -> tuple[Round | None, Changes]:
        out: Changes = {}
        if session.stepper is None or session.step_key != key or session.mode != "step":
            # warmed as a Run's pair is, so that the first round's times are the round's
            pair = warmed_pair(ctx, form)
            run = Run(pair, form.prompt, settings)
            session.start(run.trace, None, "step")
            session.stepper, session.step_key = iter(run), key
            session.decode = decoder(pair)
            out["models"] = models_html(run.trace)
        assert session.stepper is not None and session.spec is not None
        with model_failures(running(form), lambda: session.start(None, None, "idle")):
            upd = MODEL_THREAD.call(lambda: _next_round(session, settings))
        if session.spec.stop_reason != "running":
            session.stepper = None
        return (upd.round if upd is not None else None), out

    def complete(self, ctx: Models, form: Form, settings: Settings) -> tuple[Trace, Trace | None]:
        pair = warmed_pair(ctx, form)

        def both() -> tuple[Trace, Trace | None]:
            spec = Run(pair, form.prompt, settings)
            ar = Run(pair, form.prompt, settings.with_(method="ar")) if form.compare else None
            threads = policy()
            with threads.watch() as load:  # the thread count follows the machine
                for _ in interleave([spec, ar]) if ar else spec:
                    threads.pace()
            _stamp(load, spec.trace, ar.trace if ar else None)
            return spec.trace, ar.trace if ar else None

        with model_failures(running(form)):
            return MODEL_THREAD.call(both)


def _next_round(session: Session, settings: Settings) -> Update | None:
    """One round from the session's stepper (on the model thread)."""
    assert session.stepper is not None and session.spec is not None
    upd = next(session.stepper, None)
    if upd is not None and (upd.round is None or _is_last(upd, settings, session.spec)):
        next(session.stepper, None)  # let the run finish and record its stop reason
        upd = upd if upd.round is not None else None
    return upd


def _is_last(upd: Update, settings: Settings, spec: Trace) -> bool:
    r = upd.round
    assert r is not None
    return (
        upd.n_tokens >= settings.max_new_tokens or r.added is None or spec.stop_reason != "running"
    )


class ZeroGpuRunner:
    """One ``spaces.GPU`` call per event (specviz.ui.zerogpu)."""

    name = "zerogpu"
    attaches_gpu = True
    compiles = False  # no torch.compile at run time: compiled ahead of time at start-up
    keeps_models = False

    def preload(self, dep: Deployment) -> ModelPair | None:
        """The first pair this Space offers, loaded once per process (onto 'cuda'), its
        calls compiled ahead of time (the compile box is shown where that worked)."""
        pair = zerogpu.preload(dep)
        self.compiles = zerogpu.compiled_ahead(pair)
        return pair

    def run(
        self, session: Session, form: Form, ctx: Models, settings: Settings
    ) -> Iterator[Changes]:
        traces: dict[str, Trace] = {}
        last_speed = 0.0
        for event in self.events(ctx, form, settings, lambda: session.stop.is_set()):
            zerogpu.apply(traces, event)
            if isinstance(event, Trace) and event.method == "spec":
                session.start(event, None, "run")
            elif isinstance(event, Trace):
                session.ar = event
            # The models run in the GPU call's process, not beside the page: no throttle
            frame, last_speed = live_frame(session, last_speed, gap=0.0)
            if frame:
                yield frame
        assert session.spec is not None
        yield logged_frame(session, session.spec, session.ar, settings)

    def events(
        self,
        ctx: Models,
        form: Form,
        settings: Settings,
        stopped: Callable[[], bool] | None = None,
    ) -> Iterator[zerogpu.Event]:
        """The events of one GPU call; once `stopped()` is true (or this iterator is
        closed) the call is closed after the current target call, and its unfinished runs
        end as stopped."""
        if isinstance(ctx.loader, pairs.PairSource):
            ctx.loader.check(form.pair, form.custom_draft, form.custom_target)
        events = zerogpu.on_gpu(zerogpu.stream)(form, settings)
        traces: dict[str, Trace] = {}  # the runs begun; the caller applies every event
        try:
            with model_failures(running(form)):
                for event in events:
                    if isinstance(event, Trace):
                        traces[event.method] = event
                    yield event
                    if stopped is not None and stopped():
                        break
        finally:
            events.close()
        for tr in traces.values():
            if tr.stop_reason == "running":
                end = tr.timeline[-1][0] if tr.timeline else 0.0
                text = "".join(tr.token_texts)
                yield zerogpu.Done(tr.method, "stopped", text, summarize(tr, end))

    def step(
        self, session: Session, form: Form, ctx: Models, settings: Settings, key: StepKey
    ) -> tuple[Round | None, Changes]:
        """Replay the run to one round more than the session shows, in one GPU call."""
        if isinstance(ctx.loader, pairs.PairSource):
            ctx.loader.check(form.pair, form.custom_draft, form.custom_target)
        spec = session.spec
        going = session.mode == "step" and session.step_key == key and spec is not None
        n = len(spec.rounds) + 1 if going and spec.stop_reason == "stopped" else 1
        with model_failures(running(form)):
            trace = zerogpu.on_gpu(zerogpu.step_trace)(form, settings, n)
        session.start(trace, None, "step")
        session.step_key = key
        return (trace.rounds[-1] if trace.rounds else None), {}

    def complete(self, ctx: Models, form: Form, settings: Settings) -> tuple[Trace, Trace | None]:
        traces: dict[str, Trace] = {}
        for event in self.events(ctx, form, settings):
            zerogpu.apply(traces, event)
        return traces["spec"], traces.get("ar")


def choose_runner() -> Runner:
    """ZeroGPU on a ZeroGPU Space (SPACES_ZERO_GPU set and ``spaces`` importable), the
    local model thread anywhere else."""
    return ZeroGpuRunner() if pairs.zero_gpu() else LocalRunner()


def has_gpu(runner: Runner | None = None) -> bool:
    """A CUDA device here, or one the runner attaches per call (ZeroGPU)."""
    return torch.cuda.is_available() or (runner or choose_runner()).attaches_gpu
