"""The frames the page is sent for a session's traces: the rounds' HTML cached in the
session, the cheap live frame sent after each round, the final frame with every view (and
the logged one after a Run), the summaries, the decision inspector, and the views across a
session's runs (log and calibration). Everything here reads stored traces only (no model
call) and renders through specviz.views.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import gradio as gr
import pandas as pd
from gradio.components.plot import PlotData

from specviz import metrics
from specviz.analysis import calibration
from specviz.analysis.runlog import LOG_COLUMNS
from specviz.config import Settings
from specviz.costs import SpeedStory, speed_story
from specviz.modelthread import MODEL_THREAD
from specviz.threads import machine_lines
from specviz.trace import Round, Trace, decision_at, round_number, target_dtype
from specviz.ui.state import IMPORTED, Changes, Session
from specviz.views import (
    across_runs,
    decision_panel,
    figures,
    markup,
    theory_figures,
    timing,
    tree_view,
)

NO_ALPHA = "alpha was not measured (a minimal trace, or no verified drafts): no theory curve"
NARRATION_HINT = (
    "Press Step to take one round at a time: each round is told here in numbered "
    "sentences (the draft's proposal, the one target call, each decision, the added token)."
)
NEEDS_COMPARE = "the race replay needs a compared run: tick Compare and press Run"


def models_html(trace: Trace) -> str:
    """The models table of a run: the pair's models as its trace names them, the drafter
    that drafted included (what "auto" picked, where it was asked for)."""
    return markup.models_html({k: str(value) for k, value in trace.models.items()})


def narration_hint() -> str:
    return markup.status_html(NARRATION_HINT)


def sync_rounds(session: Session, upto: int | None = None) -> int:
    """Render the rounds the session has not cached yet (up to `upto`) into its token spans
    and round rows; return how many were new."""
    if session.spec is None:
        return 0
    with session.lock:
        rounds = session.spec.rounds[: upto if upto is not None else len(session.spec.rounds)]
        new = rounds[len(session.spans) :]
        for r in new:
            session.spans.append(markup.round_spans(r, session.shading))
            session.rows.append(markup.round_row(r))
    return len(new)


def set_shade(session: Session, on: bool) -> None:
    """Switch the overlap shading and re-render the token spans already cached."""
    with session.lock:
        session.shade = bool(on)
        if session.spec is not None:
            done = session.spec.rounds[: len(session.spans)]
            session.spans = [markup.round_spans(r, session.shading) for r in done]


# Live frames come at most this often, during the speculative run and the baseline alike:
# the browser redraws each one on the same cores the models run on, so both runs must pay
# the same share, or the measured speedup would carry the page's cost.
FRAME_S = 0.5


def live_frame(session: Session, last: float, gap: float = FRAME_S) -> tuple[Changes, float]:
    """The cheap update while a run streams (new spans, new rows, the speedup chart, a
    status line), at most once per gap seconds; last is when the previous one was made.
    Where a round's time goes is drawn when the run ends (and after each Step)."""
    t0 = time.perf_counter()
    if t0 - last < gap:
        return {}, last
    new = sync_rounds(session)
    spec, ar = session.spec, session.ar
    out: Changes = {}
    if new:
        out["tokens"] = markup.tokens_html(session.spans, spec.prompt if spec else "")
        out["rounds"] = markup.rounds_html(session.rows)
        if spec is not None and spec.rounds[-1].nodes is not None:
            out["tree_view"] = tree_frame(spec)
    if new or (ar is not None and ar.timeline):
        out["speed"] = live_plot(figures.speedup_spec(spec, ar))
        out["speedline"] = markup.speedline_html(story_of(spec, ar))
        out["status"] = markup.status_html(_progress(spec, ar), "busy")
    if out:
        session.ui_ms.append((time.perf_counter() - t0) * 1e3)
        last = t0
    return out, last


def live_plot(spec: dict[str, Any]) -> PlotData:
    """A plotly JSON spec handed to gr.Plot as is, skipping figure validation."""
    return PlotData(type="plotly", plot=json.dumps(spec))


def _progress(spec: Trace | None, ar: Trace | None) -> str:
    text = ""
    if spec is not None:
        text = f"speculative: round {len(spec.rounds)}, {len(spec.token_ids)} tokens"
    if ar is not None and ar.token_ids:
        text += f" · autoregressive baseline: {len(ar.token_ids)} tokens"
    return text or "generating ..."


def final_frame(session: Session, gamma: int, measure: bool = True) -> Changes:
    """Every view, from the session's traces alone (measure: the roofline may measure the
    device's bandwidth, once per process; a shared run's page never does)."""
    sync_rounds(session)
    spec, ar = session.spec, session.ar
    main = spec or ar
    story = story_of(spec, ar)
    guard = story.guard() if story is not None else None
    out: Changes = {
        "speedline": markup.speedline_html(story),
        "tokens": markup.trace_tokens_html(main)
        if spec is None
        else markup.tokens_html(session.spans, spec.prompt),
        "rounds": markup.rounds_html(session.rows),
        "speed": figures.speedup_figure(spec, ar),
        "summary": summary_html(session),
        "table1": table1_html(spec, ar, guard, story.measured if story else None),
        "greedy_check": greedy_html(session),
        # the guard's sentence, and the busy line where the rest of the machine was measured
        # busy during the run
        "status": done_status(main, _and(guard, busy_line(main)), session.imported),
        "race": race_hint(spec, ar),
        "time_split": timing.breakdown_figure(spec)
        if spec is not None and spec.rounds
        else figures.empty_figure("no speculative rounds"),
        "time_totals": time_html(spec, session.mode, measure=measure),
        "tree_view": tree_frame(spec),
        "tree_compare": tree_compare_html(spec, ar),
    }
    if session.imported:  # said beside the speed as long as the run is shown
        out["speedline"] = imported_html() + out["speedline"]
    if main is not None:
        out["models"] = models_html(main)
        out["exact_note"] = exact_note(main)
    out.update(charts(spec, ar, gamma))
    out.update(default_inspection(spec))
    return out


def logged_frame(session: Session, spec: Trace, ar: Trace | None, settings: Settings) -> Changes:
    """A finished run: logged and counted for calibration, then every view."""
    session.record(spec, ar)
    return {**final_frame(session, settings.gamma), **runs_changes(session)}


def tree_frame(trace: Trace | None, round_index: int | None = None) -> str:
    """The tree panel: the chosen round's tree, else the last tree round's; "" for a run
    without tree rounds (the panel then takes no room)."""
    if not tree_view.tree_rounds(trace):
        return ""
    return tree_view.trace_tree_html(trace, round_index)


def tree_compare_html(spec: Trace | None, ar: Trace | None) -> str:
    """The Theory tab's tree against chain at the same verify width ("" without a tree)."""
    rows, note = tree_view.compare_rows(spec, ar)
    if not rows:
        return ""
    return markup.table_html(rows, "tree against a chain at the same verify width") + (
        markup.status_html(note)
    )


def time_html(spec: Trace | None, mode: str = "idle", measure: bool = False) -> str:
    """The run's draft, verify and rest: ms and share of its wall time, and each call
    against the memory's floor (timing.trace_roofline_rows; measure: the bandwidth may be
    measured now, once per process, which a finished run's frame allows)."""
    if spec is None or not spec.rounds:
        return markup.status_html("Where the time goes needs a speculative run: press Run.")
    caption = "this run's time: draft, verify and the rest, as shares of its wall time"
    if mode == "step":
        caption += " (Step: the rest includes the pauses between presses)"
    roofline = timing.trace_roofline_rows(spec)
    if not roofline and measure and timing.roofline_device(spec) is not None:
        # the bandwidth, measured once per process, on the model thread: torch's parallel
        # sum on this thread would leave a second OpenMP team beside the model thread's,
        # and every later model step would slow (specviz.modelthread)
        roofline = MODEL_THREAD.call(lambda: timing.trace_roofline_rows(spec, measure=True))
    return markup.table_html(timing.totals_rows(spec) + roofline, caption)


def race_hint(spec: Trace | None, ar: Trace | None) -> str:
    """What the race replay offers for these traces (the last replay is cleared)."""
    if spec is None or ar is None or not spec.token_ids or not ar.token_ids:
        return markup.status_html(NEEDS_COMPARE[0].upper() + NEEDS_COMPARE[1:] + ".")
    return markup.status_html("Replay race: both texts fill on one clock from measured timings.")


def exact_note(trace: Trace) -> str:
    """The sentence under the text: what it is distributed as, for this trace's settings
    and the dtype its target ran in."""
    names = {"ngram": "the n-gram drafter", "eagle": "the EAGLE head"}
    drafter = names.get(str(trace.models.get("drafter")), "the draft")
    return markup.exact_note_html(trace.settings, drafter, target_dtype(trace))


def story_of(spec: Trace | None, ar: Trace | None) -> SpeedStory | None:
    """The speed story of the session's runs (costs.speed_story), None before a round."""
    if spec is None or not spec.rounds:
        return None
    return speed_story(spec, ar)


def busy_line(trace: Trace | None) -> str | None:
    """The one line a run that met a busy machine is shown with (specviz.threads)."""
    return (machine_lines(trace.machine)[1] or None) if trace is not None else None


def _and(*sentences: str | None) -> str | None:
    said = " ".join(x.rstrip(".") + "." for x in sentences if x)
    return said.rstrip(".") or None


def done_status(main: Trace | None, guard: str | None, imported: bool = False) -> str:
    """The status line after a run: done, and the guard's sentence when it speaks; an
    imported run says first that this server did not run it."""
    message = f"this run was {IMPORTED}. {_done_message(main)}" if imported else _done_message(main)
    if guard:
        return markup.status_html(f"{message}. {guard}", "warn")
    return markup.status_html(message, "warn" if imported else "info")


def imported_html() -> str:
    """The line an imported run is shown with (above its speed line)."""
    return markup.status_html(f"this run was {IMPORTED}", "warn")


def _done_message(trace: Trace | None) -> str:
    if trace is None:
        return "nothing generated"
    s = trace.stats
    return (
        f"done ({trace.stop_reason}): {s.new_tokens} tokens in {s.wall_s:.2f} s; "
        "click any token to inspect its decision"
    )


def charts(spec: Trace | None, ar: Trace | None, gamma: int, c_user: float = 0.1) -> Changes:
    """Acceptance charts, theory against measurement, and the projection."""
    if spec is None or not spec.rounds:
        blank = figures.empty_figure("no speculative rounds")
        return {k: blank for k in ("acc_round", "acc_hist", "acc_pos", "theory", "projection")}
    _, alpha = metrics.expected_acceptance(spec)  # sum p q under exact match
    c = metrics.cost_ratio(spec, ar) if ar is not None and ar.token_ids else 0.0
    measured = metrics.speedup(ar, spec) if ar is not None and ar.token_ids else None
    out = {
        "acc_round": figures.acceptance_per_round_figure(spec),
        "acc_hist": figures.accepted_histogram_figure(spec),
        "acc_pos": figures.acceptance_by_position_figure(spec),
    }
    if alpha is None:
        return {**out, "theory": no_alpha_figure(), "projection": no_alpha_figure()}
    return {
        **out,
        "theory": theory_figures.theory_figure(
            alpha, c, gamma, measured, metrics.verify_steps(spec, ar) if ar else None
        )
        if c
        else figures.empty_figure(
            "theory needs c, measured against the autoregressive baseline (tick Compare)"
        ),
        "projection": theory_figures.projection_figure(alpha, c_user, gamma),
    }


def no_alpha_figure() -> Any:
    """The theory and projection figures where alpha was not measured."""
    return figures.empty_figure(NO_ALPHA)


def default_inspection(spec: Trace | None) -> Changes:
    """Open the inspector on the first rejection (else the first token)."""
    if spec is None or not spec.rounds:
        return {}
    target = next(
        (
            (r.index, r.start + i)
            for r in spec.rounds
            for i, d in enumerate(r.drafted)
            if d.status == "rejected"
        ),
        (0, 0),
    )
    try:
        return inspect_changes(spec, *target)
    except ValueError:
        return {}


def inspect_changes(trace: Trace | None, round_index: int | None, pos: int | None) -> Changes:
    """Inspector views for (round, pos) from the stored trace: no model call. round_index is
    the trace's 0-based index (None: the round that placed pos); the view shows the round's
    number, from 1 (round_number)."""
    if trace is None or not trace.rounds:
        raise ValueError("no speculative trace yet: press Run or Step, or import a trace")
    if pos is None:
        raise ValueError("choose a position")
    r = None if round_index is None or round_index < 0 else int(round_index)
    dec = decision_at(trace, r, int(pos))
    return {
        "insp_round": round_number(dec.round.index),
        "insp_pos": dec.pos,
        "insp_plot": figures.decision_figure(dec),
        "verdict": markup.verdict_html(dec),
        "decision": decision_panel.decision_panel_html(dec),  # beside the tokens
    }


def latest_position(rnd: Round) -> int:
    """The output position of a round's latest decision on a draft: its rejected draft, else
    its last accepted one; a round that tried no draft has its added token's."""
    return rnd.start + max(0, len(rnd.verified) - 1)


def round_changes(trace: Trace, rnd: Round) -> Changes:
    """The inspector and the decision panel on a round just taken (a Step, or a shared
    run's next stored round): its latest decision on a draft, with p, q and u."""
    return inspect_changes(trace, rnd.index, latest_position(rnd))


def summary_html(session: Session) -> str:
    """The run's figures, each with its definition where it has one."""
    spec, ar = session.spec, session.ar
    rows: list[tuple[str, str]] = []
    if spec is not None and spec.rounds:
        s = spec.stats
        d = metrics.DEFINITIONS
        rows += [
            ("new tokens / rounds", f"{s.new_tokens} / {s.rounds}"),
            ("tokens per target call", f"{s.tokens_per_call:.2f}  ({d['tokens per call']})"),
            *metrics.acceptance_rows(spec),
            metrics.out_tv_row(spec),
            (
                "mean accepted per round",
                f"{metrics.mean_accepted(spec):.2f} drafts, "
                f"{metrics.mean_accepted(spec, with_added=True):.2f} with the added token",
            ),
            ("draft ms / verify ms", f"{s.draft_ms:.0f} / {s.verify_ms:.0f}"),
        ]
        if ar is None or not ar.token_ids:
            rows.append(("speculative ms/token", f"{s.ms_per_token:.1f}"))
    if ar is not None and ar.token_ids:
        if spec is not None and spec.rounds:
            row = metrics.table1_row(ar, spec)  # over the tokens both made, as Table 1
            rows.append(("speculative ms/token", f"{row['spec_ms_per_token']:.1f}"))
            rows.append(("autoregressive ms/token", f"{row['ar_ms_per_token']:.1f}"))
            rows.append(("c", f"{metrics.cost_ratio(spec, ar):.3f}  ({metrics.DEFINITIONS['c']})"))
        else:
            rows.append(("autoregressive ms/token", f"{ar.stats.ms_per_token:.1f}"))
    rows += _ui_cost_rows(session)
    return markup.table_html(rows, "this run") if rows else ""


def _ui_cost_rows(session: Session) -> list[tuple[str, str]]:
    """First-round latency and the page-update cost next to the round it follows."""
    rows = []
    if session.first_round_s is not None:
        rows.append(("first round shown after Run", f"{session.first_round_s:.2f} s"))
    spec = session.spec
    if session.ui_ms and spec is not None and spec.rounds:
        round_ms = statistics.median(r.draft_ms + r.verify_ms for r in spec.rounds)
        rows.append(
            (
                "page update per round (median)",
                f"{statistics.median(session.ui_ms):.1f} ms, against {round_ms:.1f} ms "
                "per round of generation",
            )
        )
    return rows


def table1_html(
    spec: Trace | None,
    ar: Trace | None,
    guard: str | None = None,
    paired: metrics.Speedup | None = None,
) -> str:
    """Chen et al.'s Table 1 row for this prompt: ms/token both ways and the speedup (paired:
    the runs' measured speedup where the caller has it already), and the guard's sentence
    under it when it speaks."""
    if spec is None or ar is None or not spec.token_ids or not ar.token_ids:
        return markup.status_html("Table 1 needs both runs: tick Compare and press Run.")
    row = metrics.table1_row(ar, spec)
    paired = paired or metrics.paired_speedup(ar, spec)
    note = markup.status_html(guard, "warn") if guard else ""
    threads, busy = machine_lines(spec.machine or ar.machine)
    note += markup.status_html(busy, "warn") if busy else ""
    speed = f"{paired.text()} middle 90 % over {paired.stretches} rounds" if paired else "-"
    return note + markup.table_html(
        [
            ("ArS (autoregressive) ms/token", f"{row['ar_ms_per_token']:.1f}  (1x)"),
            ("SpS (speculative) ms/token", f"{row['spec_ms_per_token']:.1f}"),
            ("speedup", speed),
            *([("threads", threads)] if threads else []),
        ],
        "Chen et al. Table 1 columns, measured here (batch size 1)",
    )


def greedy_html(session: Session) -> str:
    """In greedy mode: do both methods give the same text, and if not, where do they part?"""
    spec, ar = session.spec, session.ar
    if spec is None or ar is None:
        return markup.status_html("The greedy check compares both runs: tick Compare.")
    if not spec.settings.is_greedy:
        return markup.status_html(
            "Greedy check: switch on Greedy (or temperature 0). When sampling, the two runs "
            "consume random numbers differently, so only their distributions agree."
        )
    verdict = markup.greedy_check(spec, ar, session.decode)
    kind = "info" if verdict.startswith("identical") else "error"
    return markup.status_html(f"Greedy check: {verdict}", kind)


def log_display(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The log's rows for the table: figures to 3 decimals, missing ones blank."""
    frame = pd.DataFrame(rows, columns=list(LOG_COLUMNS)).round(3)
    return frame.astype(object).where(frame.notna(), "")


def calibration_html(result: dict[str, Any]) -> str:
    """How many drafts and runs, and how many judged bins lie within their error bars."""
    drafts = result["drafts"]
    head = f"{drafts} verified drafts with a drawn u over {result['traces']} run(s). "
    if not result["summary"]["drafts"]["judged"]:
        tail = f"No bin has {result['min_n']} drafts yet: run more (or longer) sampled runs."
    else:
        tail = calibration.summary_line(result) + "."
    if result["summary"]["residual"]["judged"]:
        tail += " Resampled tokens: " + calibration.summary_line(result, "residual") + "."
    return markup.status_html(head + tail)


def runs_changes(session: Session) -> Changes:
    """The log's table, chart and run picker, and the calibration, from the session."""
    rows = session.log.rows
    result = session.calibration.to_dict()
    runs = [r["run"] for r in rows]
    return {
        "log_table": log_display(rows),
        "log_chart": across_runs.runs_figure(rows),
        "log_pick": gr.Dropdown(choices=runs, value=runs[-1] if runs else None),
        "calib_summary": calibration_html(result),
        "calib_plot": across_runs.reliability_figure(result),
    }
