"""Export and import (the Data tab): the session's traces as JSON and its rounds as CSV
(rounds numbered from 1, as on the page); a JSON trace file read back (size-capped,
schema-checked, refused whole when inconsistent) and replayed round by round at its
recorded pace, with no model. An imported run is marked so by the server (Session.imported),
shown as "imported from a file, not run on this server", and shared as such."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gradio as gr

from specviz import metrics
from specviz.trace import Trace
from specviz.ui import downloads
from specviz.ui.errors import failure, user_errors
from specviz.ui.frames import final_frame, sync_rounds
from specviz.ui.page import HIDDEN, Page
from specviz.ui.state import IMPORTED, Changes, Session
from specviz.views import markup

MAX_IMPORT_BYTES = 5_000_000  # a trace file for import: 5 MB


REPLAY_SECONDS = 3.0  # an imported trace replays in at most this long


def read_trace(path: str | None) -> Trace:
    """A trace from an uploaded JSON file (ValueError with one line when it is not one)."""
    if not path:
        raise ValueError("choose a JSON trace file first")
    with open(path, "rb") as f:
        data = f.read(MAX_IMPORT_BYTES + 1)
    if len(data) > MAX_IMPORT_BYTES:
        raise ValueError(f"trace file is larger than {MAX_IMPORT_BYTES // 1_000_000} MB")
    try:
        trace = Trace.from_json(data)
    except RecursionError:
        raise ValueError("not a JSON trace: nested too deeply") from None
    check_renders(trace)
    return trace


def check_renders(trace: Trace) -> None:
    """A schema-valid trace whose parts disagree (positions, rounds) is refused whole."""
    spec, ar = (trace, None) if trace.method == "spec" else (None, trace)
    try:
        final_frame(Session(spec=spec, ar=ar), trace.settings.gamma)
    except Exception as exc:
        raise ValueError(f"trace file is inconsistent: {failure(exc, 'rendering')}") from None


def replay_updates(session: Session, trace: Trace | None = None) -> Iterator[Changes]:
    """Replay a stored trace round by round at its recorded pace (capped), no model call:
    the session's, or `trace`, read from a file, which the session then holds as imported
    (not run on this server, whatever the file says)."""
    if trace is not None:
        spec, ar = (trace, None) if trace.method == "spec" else (None, trace)
        session.start(spec, ar, "replay", imported=True)
        session.decode = None
    spec = session.spec
    if spec is None and session.ar is None:
        raise ValueError("nothing to replay: press Run, or import a JSON trace")
    gamma = (spec or session.ar).settings.gamma  # type: ignore[union-attr]
    if spec is not None and spec.rounds:
        session.spans, session.rows = [], []
        delay = min(0.25, REPLAY_SECONDS / len(spec.rounds))
        for i in range(1, len(spec.rounds) + 1):
            sync_rounds(session, upto=i)
            message = f"replaying round {i} of {len(spec.rounds)}"
            if session.imported:
                message += f" ({IMPORTED})"
            yield {
                "tokens": markup.tokens_html(session.spans, spec.prompt),
                "rounds": markup.rounds_html(session.rows),
                "status": markup.status_html(message, "busy"),
            }
            time.sleep(delay)
    yield final_frame(session, gamma)


def import_updates(session: Session, path: str | None) -> Iterator[Changes]:
    """Import a JSON trace and replay it."""
    yield from replay_updates(session, read_trace(path))


def export_files(session: Session) -> list[str]:
    """The speculative trace as JSON and CSV, and the baseline trace as JSON."""
    if session.spec is None and session.ar is None:
        raise ValueError("nothing to export yet: press Run first")
    out = downloads.new_folder("export-")
    files = []
    if session.spec is not None:
        files.append(out / "specviz-trace.json")
        files[-1].write_text(session.spec.to_json(indent=1), encoding="utf-8")
        files.append(out / "specviz-rounds.csv")
        metrics.rounds_frame(session.spec).to_csv(files[-1], index=False)
    if session.ar is not None:
        files.append(out / "specviz-ar-trace.json")
        files[-1].write_text(session.ar.to_json(indent=1), encoding="utf-8")
    return [str(f) for f in files]


def layout(views: dict[str, Any]) -> None:
    """The Data tab's components, into the page's components by name."""
    views["export"] = gr.Button("Export trace (JSON) and rounds (CSV)")
    views["files"] = gr.File(label="exported files", file_count="multiple", interactive=False)
    views["upload"] = gr.File(
        label="import a JSON trace (replayed with no model)",
        file_types=[".json"],
        type="filepath",
    )
    views["replay"] = gr.Button("Replay the current trace")


def wire(page: Page) -> None:
    views, sess = page.components, page.session
    views["export"].click(
        user_errors(export_files), [sess], [views["files"]], api_name="export", **page.quiet
    )
    views["upload"].upload(
        page.stream(import_updates),
        [sess, views["upload"]],
        page.outputs,
        api_name="import",
        **HIDDEN,
    )
    views["replay"].click(
        page.stream(replay_updates), [sess], page.outputs, api_name="replay", **HIDDEN
    )
