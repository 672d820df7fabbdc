"""Live runs: Run streams the speculative run and its autoregressive baseline (same
prompt, settings and seed), Step takes one round per press and narrates it, Stop ends a
run where it stands. A finished Run is logged and counted for calibration (runs_changes).

Where the models run is the context's runner (specviz.ui.runners: this process's model
thread, or ZeroGPU), chosen when the app was built; the handlers here never ask which. On
the model thread both runs advance in turn (specviz.engine.interleave: the one with fewer
tokens next), driven by a Worker that never waits for the page, so both meet the same load,
the baseline makes as many tokens as the speculative run, and each trace's own clock (t_s)
counts its own work only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from specviz.config import Settings
from specviz.trace import Round, Trace, round_number
from specviz.ui import lesson_replay, share
from specviz.ui.context import AppContext
from specviz.ui.frames import (
    final_frame,
    live_plot,
    narration_hint,
    round_changes,
    story_of,
    sync_rounds,
    time_html,
    tree_frame,
)
from specviz.ui.page import Page
from specviz.ui.pairs import pair_label
from specviz.ui.state import Changes, Form, Session
from specviz.views import decision_panel, markup, timing
from specviz.views.narration import narration_html


def run_updates(session: Session, form: Form, ctx: AppContext) -> Iterator[Changes]:
    """Run: load, warm, then stream the speculative run and the baseline; end with all views."""
    settings = ctx.settings(form)
    session.start(None, None, "run")
    yield {
        "status": markup.status_html(f"loading pair {pair_label(form)!r} ...", "busy"),
        "narration": narration_hint(),
        "decision": decision_panel.hint_html(),
        "tree_view": "",
    }
    yield from ctx.runner.run(session, form, ctx, settings)


def complete_traces(ctx: AppContext, form: Form, settings: Settings) -> tuple[Trace, Trace | None]:
    """The speculative run and (with compare) the baseline, each to the end, with no live
    frames: the named API's path."""
    return ctx.runner.complete(ctx, form, settings)


def step_update(session: Session, form: Form, ctx: AppContext) -> Changes:
    """Step: one round of a speculative run (a new one when the controls changed); on a
    shared run with the controls untouched, its next stored round (specviz.ui.share); on a
    recorded lesson, its next round or step (specviz.ui.lesson_replay)."""
    if lesson_replay.walks(session, form):
        return lesson_replay.step_changes(session)
    if share.walks(session, form):
        return share.step_changes(session)
    settings = ctx.settings(form)
    key = (form.pair, form.custom_draft, form.custom_target, form.dtype, form.prompt, settings)
    rnd, out = ctx.runner.step(session, form, ctx, settings, key)
    return _step_changes(session, settings, rnd, out)


def _step_changes(session: Session, settings: Settings, rnd: Round | None, out: Changes) -> Changes:
    """The views after a step: the text so far, the round taken (in the narration and the
    inspector, whose round numbers match the status line's and the round table's), and at
    the end every view."""
    assert session.spec is not None
    done = session.spec.stop_reason not in ("running", "stopped")
    sync_rounds(session)
    if done:
        out.update(final_frame(session, settings.gamma))
    else:  # this run's figures so far, never the previous run's
        out["speedline"] = markup.speedline_html(story_of(session.spec, session.ar))
    out["tokens"] = markup.tokens_html(session.spans, session.spec.prompt)
    out["rounds"] = markup.rounds_html(session.rows)
    out["time_split"] = live_plot(timing.breakdown_spec(session.spec))
    out["time_totals"] = time_html(session.spec, session.mode)
    if rnd is not None:
        out.update(round_changes(session.spec, rnd))
        out["narration"] = narration_html(rnd, session.spec.settings)
    out["tree_view"] = tree_frame(session.spec, rnd.index if rnd is not None else None)
    n = round_number(rnd.index) if rnd is not None else len(session.spec.rounds)
    made = len(session.spec.token_ids)
    msg = f"step mode: round {n} done, {made} token{'' if made == 1 else 's'}"
    msg += " (finished: Step again starts over)" if done else ""
    out["status"] = markup.status_html(msg, "info")
    return out


def stop_session(session: Session) -> str:
    """Stop: the worker finishes its current round and the run is shown as it stands."""
    session.stop.set()
    if session.mode == "step":
        session.close_stepper()
    return markup.status_html("stopping ...", "busy")


def wire(page: Page) -> None:
    """Run, Step and Stop."""
    controls, sess = page.controls, page.session
    run = page.stream(lambda s, *values: run_updates(s, page.form(values), page.ctx))
    step = page.once(lambda s, *values: step_update(s, page.form(values), page.ctx))
    controls["run"].click(run, [sess, *page.inputs], page.outputs, api_name="run", **page.live)
    controls["step"].click(step, [sess, *page.inputs], page.outputs, api_name="step", **page.live)
    status: Any = [page.components["status"]]
    controls["stop"].click(stop_session, [sess], status, api_name="stop", **page.quiet)
