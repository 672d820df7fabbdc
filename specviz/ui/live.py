"""Live runs: Run streams the speculative run and then the autoregressive baseline (same
prompt, settings and seed), Step takes one round per press and narrates it, Stop ends a
run where it stands. A finished Run is logged and counted for calibration (runs_views).
The pair is warmed once per process before its first run (specviz.ui.warm).

Both runs execute back to back on the model thread (specviz.modelthread), driven by a
:class:`Worker` that never waits for the page, so each trace's own clock (t_s) measures
generation only. The handler polls the live traces, renders only the rounds that are new
and yields.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from specviz.config import Settings
from specviz.engine import Run, Update, generate
from specviz.metrics import summarize
from specviz.modelthread import MODEL_THREAD
from specviz.trace import Round, Trace, round_number
from specviz.ui import zerogpu
from specviz.ui.errors import model_failures
from specviz.ui.page import Page
from specviz.ui.pairs import AppContext, PairSource, pair_label, zero_gpu
from specviz.ui.state import Form, Session, View
from specviz.ui.views import (
    exact_note,
    final_frame,
    inspect_view,
    live_frame,
    live_plot,
    narration_hint,
    runs_views,
    sync_rounds,
    time_html,
)
from specviz.ui.warm import running, warmed_pair
from specviz.ui.worker import Worker
from specviz.views import markup, timing
from specviz.views.narration import narration_html


def run_updates(session: Session, form: Form, ctx: AppContext) -> Iterator[View]:
    """Run: load, warm, then stream the speculative run and the baseline; end with all views."""
    t_click = time.perf_counter()
    settings = ctx.settings(form)
    session.start(None, None, "run")
    yield {
        "status": markup.status_html(f"loading pair {pair_label(form)!r} ...", "busy"),
        "narration": narration_hint(),
    }
    if zero_gpu():
        yield from zero_run(session, form, ctx, settings)
        return
    pair = warmed_pair(ctx, form)
    spec_run = Run(pair, form.prompt, settings)
    ar_run = Run(pair, form.prompt, settings.with_(method="ar")) if form.compare else None
    session.start(spec_run.trace, ar_run.trace if ar_run else None, "run")
    session.decode = pair.decode
    worker = Worker([spec_run] + ([ar_run] if ar_run else []), session.stop)
    yield {
        "models": markup.models_html(pair.describe()),
        "tokens": markup.tokens_html([]),
        "exact_note": exact_note(spec_run.trace),
    }
    last_speed = 0.0
    for _ in worker.polls():
        frame, last_speed = live_frame(session, last_speed)
        if frame:
            if session.first_round_s is None and session.parts:
                session.first_round_s = time.perf_counter() - t_click
            yield frame
    if worker.error is not None:
        # no half-finished trace to export or inspect
        with model_failures(running(form), lambda: session.start(None, None, "idle")):
            raise worker.error
    yield logged_frame(session, spec_run.trace, ar_run.trace if ar_run else None, settings)


def zero_run(session: Session, form: Form, ctx: AppContext, settings: Settings) -> Iterator[View]:
    """ZeroGPU: both runs stream out of one GPU call, round by round, then every view."""
    traces: dict[str, Trace] = {}
    last_speed = 0.0
    for event in zero_events(ctx, form, settings, lambda: session.stop.is_set()):
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


def logged_frame(session: Session, spec: Trace, ar: Trace | None, settings: Settings) -> View:
    """A finished run: logged and counted for calibration, then every view."""
    session.record(spec, ar)
    return {**final_frame(session, settings.gamma), **runs_views(session)}


def zero_events(
    ctx: AppContext, form: Form, settings: Settings, stopped: Callable[[], bool] | None = None
) -> Iterator[zerogpu.Event]:
    """The events of one ZeroGPU call; once `stopped()` is true the call is closed after the
    current target call, and its unfinished runs end as stopped."""
    if isinstance(ctx.loader, PairSource):
        ctx.loader.check(form.pair, form.custom_draft, form.custom_target)
    events = zerogpu.on_gpu(zerogpu.stream)(form, settings)
    traces: dict[str, Trace] = {}  # the runs begun; the caller applies every event to them
    with model_failures(running(form)):
        for event in events:
            if isinstance(event, Trace):
                traces[event.method] = event
            yield event
            if stopped is not None and stopped():
                events.close()
                break
    for tr in traces.values():
        if tr.stop_reason == "running":
            end = tr.timeline[-1][0] if tr.timeline else 0.0
            yield zerogpu.Done(tr.method, "stopped", "".join(tr.token_texts), summarize(tr, end))


def complete_traces(ctx: AppContext, form: Form, settings: Settings) -> tuple[Trace, Trace | None]:
    """The speculative run and (with compare) the baseline, each to the end, with no live
    frames: the named API's path."""
    if zero_gpu():
        traces: dict[str, Trace] = {}
        for event in zero_events(ctx, form, settings):
            zerogpu.apply(traces, event)
        return traces["spec"], traces.get("ar")
    pair = warmed_pair(ctx, form)

    def both() -> tuple[Trace, Trace | None]:
        spec = generate(pair, form.prompt, settings)
        ar = generate(pair, form.prompt, settings.with_(method="ar")) if form.compare else None
        return spec, ar

    with model_failures(running(form)):
        return MODEL_THREAD.call(both)


def step_update(session: Session, form: Form, ctx: AppContext) -> View:
    """Step: one round of a speculative run (a new one when the controls changed)."""
    settings = ctx.settings(form)
    key = (form.pair, form.custom_draft, form.custom_target, form.dtype, form.prompt, settings)
    out: View = {}
    if zero_gpu():
        rnd = _zero_step(session, form, ctx, settings, key)
        return _step_views(session, settings, rnd, out)
    if session.stepper is None or session.step_key != key or session.mode != "step":
        pair = ctx.pair(form)
        run = Run(pair, form.prompt, settings)
        session.start(run.trace, None, "step")
        session.stepper, session.step_key = iter(run), key
        session.decode = pair.decode
        out["models"] = markup.models_html(pair.describe())
    assert session.stepper is not None and session.spec is not None
    with model_failures(running(form), lambda: session.start(None, None, "idle")):
        upd = MODEL_THREAD.call(lambda: _step(session, settings))
    if session.spec.stop_reason != "running":
        session.stepper = None
    return _step_views(session, settings, upd.round if upd is not None else None, out)


def _zero_step(
    session: Session, form: Form, ctx: AppContext, settings: Settings, key: tuple[Any, ...]
) -> Round | None:
    """ZeroGPU: replay the run to one round more than the session shows, in one GPU call."""
    if isinstance(ctx.loader, PairSource):
        ctx.loader.check(form.pair, form.custom_draft, form.custom_target)
    spec = session.spec
    going = session.mode == "step" and session.step_key == key and spec is not None
    n = len(spec.rounds) + 1 if going and spec.stop_reason == "stopped" else 1
    with model_failures(running(form)):
        trace = zerogpu.on_gpu(zerogpu.step_trace)(form, settings, n)
    session.start(trace, None, "step")
    session.step_key = key
    return trace.rounds[-1] if trace.rounds else None


def _step_views(session: Session, settings: Settings, rnd: Round | None, out: View) -> View:
    """The views after a step: the text so far, the round taken (in the narration and the
    inspector, whose round numbers match the status line's and the round table's), and at
    the end every view."""
    assert session.spec is not None
    done = session.spec.stop_reason not in ("running", "stopped")
    sync_rounds(session)
    if done:
        out.update(final_frame(session, settings.gamma))
    out["tokens"] = markup.tokens_html(session.parts, session.spec.prompt)
    out["rounds"] = markup.rounds_html(session.rows)
    out["time_split"] = live_plot(timing.breakdown_spec(session.spec))
    out["time_totals"] = time_html(session.spec, session.mode)
    if rnd is not None:
        out.update(
            inspect_view(session.spec, rnd.index, rnd.start + min(rnd.n_accepted, rnd.emitted))
        )
        out["narration"] = narration_html(rnd)
    n = round_number(rnd.index) if rnd is not None else len(session.spec.rounds)
    msg = f"step mode: round {n} done, {len(session.spec.token_ids)} tokens"
    msg += " (finished: Step again starts over)" if done else " (timings include the pauses)"
    out["status"] = markup.status_html(msg, "info")
    return out


def _step(session: Session, settings: Settings) -> Update | None:
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


def stop_session(session: Session) -> str:
    """Stop: the worker finishes its current round and the run is shown as it stands."""
    session.stop.set()
    if session.mode == "step":
        session.close_stepper()
    return markup.status_html("stopping ...", "busy")


def wire(page: Page) -> None:
    """Run, Step and Stop."""
    c, sess = page.controls, page.session
    run = page.stream(lambda s, *values: run_updates(s, page.form(values), page.ctx))
    step = page.once(lambda s, *values: step_update(s, page.form(values), page.ctx))
    c["run"].click(run, [sess, *page.inputs], page.outputs, api_name="run", **page.live)
    c["step"].click(step, [sess, *page.inputs], page.outputs, api_name="step", **page.live)
    status: Any = [page.views["status"]]
    c["stop"].click(stop_session, [sess], status, api_name="stop", **page.quiet)
