"""A shared run: "Share this run" stores the session's finished run (specviz.sharestore) and
gives a link, ``?run=ID``; that link opens the run for anyone, read from the store with no
model call: the tokens, every decision, the narration hint, the Speed and Acceptance
figures. It is a stored trace shown again, as the Data tab's import and the log's "load"
show one (frames.final_frame).

A page opens through one load event (:func:`open_page`), off the model queue: without
``?run=`` it sets the hidden ``pair_go`` number, whose change loads the pair as before
(specviz.ui.controls); with it, it shows the stored run and loads nothing, so a class
opening one link waits for no run and puts nothing on the model thread. A malformed id or a
run no longer kept is one line in the status line, and the page serves as usual.

A shared run is read-only. Step with the controls as the link opened them walks its stored
rounds, one per press (presentation mode's Space and → included), each narrated, and starts
over after the last; a Step after any change, Run, a lesson step, anything else starts a
run of the visitor's own. The rendered views of the last few runs opened are kept in
memory, so sixty visitors opening one link render it once.

A run imported from a file (the Data tab) may be shared, but never as this server's: the
record keeps the session's flag (Session.imported, set by the server when it read the
file), and the opened page says "imported from a file, not run on this server" in its
status line and above its speed line, as the importing page did; sharing it again from
there keeps the flag.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import gradio as gr

from specviz.lesson_record import PARAM as LESSON_PARAM
from specviz.sharestore import SharedRuns, check_id
from specviz.trace import Trace, round_number
from specviz.ui import lesson_replay
from specviz.ui.errors import user_errors
from specviz.ui.frames import final_frame
from specviz.ui.page import INTERNAL, Page
from specviz.ui.state import IMPORTED, Changes, Form, Session
from specviz.views import markup

PARAM = "run"  # the query parameter of a shared run's link
CONCURRENCY = 4  # shared pages rendered at once (their own queue, never the model's)
VIEWS_KEPT = 8  # shared runs whose rendered views are kept in memory


def layout(controls: dict[str, Any]) -> None:
    """The share button and its link, and the hidden number that loads the pair."""
    controls["share"] = gr.Button("Share this run", size="sm", elem_id="sv-share")
    controls["share_link"] = gr.HTML("", js_on_load=None, elem_id="sv-share-link")
    # set by the page's load event where the page is not a shared run: its change loads
    # the pair (specviz.ui.controls)
    controls["pair_go"] = gr.Number(0, precision=0, visible="hidden", elem_id="sv-pair-go")


class Views:
    """The views of shared runs rendered lately, by id (at most VIEWS_KEPT)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[Trace | None, Trace | None, Session, Changes]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def get(self, store: SharedRuns, run_id: str) -> tuple[Session, Changes]:
        """A session showing the run (its traces and cached rows) and its final frame."""
        with self._lock:
            if run_id in self._kept:
                self._kept.move_to_end(run_id)
                *_, shown, frame = self._kept[run_id]
                return shown, frame
        run = store.load(run_id)
        shown = Session()
        shown.start(run.spec, run.ar, "shared", imported=run.imported)
        main = run.spec or run.ar
        assert main is not None
        frame = final_frame(shown, main.settings.gamma, measure=False)
        with self._lock:
            self._kept[run_id] = (run.spec, run.ar, shown, frame)
            while len(self._kept) > VIEWS_KEPT:
                self._kept.popitem(last=False)
        return shown, frame


VIEWS = Views()


def open_page(store: SharedRuns, session: Session, form: Form, run: Any) -> Changes:
    """The page opening: without a run id, load the pair (pair_go); with one, the stored
    run in every view and no pair loaded; a bad id or a run no longer kept is one line."""
    if run is None:
        return {"pair_go": 1}
    try:
        run_id = check_id(run)
        shown, frame = VIEWS.get(store, run_id)
    except ValueError as exc:
        line = str(exc).splitlines()[0]
        return {
            "status": markup.status_html(line, "error"),
            "models": markup.status_html("no pair loaded yet: Run loads it"),
        }
    session.start(shown.spec, shown.ar, "shared", imported=shown.imported)
    with session.lock:
        session.spans, session.rows = list(shown.spans), list(shown.rows)
    session.decode = None
    session.shared_id, session.shared_form, session.shared_at = run_id, form, 0
    n = len(shown.spec.rounds) if shown.spec is not None else 0
    walk = f"Step walks its {n} rounds; " if n else ""
    origin = f"; this run was {IMPORTED}" if shown.imported else ""
    message = (
        f"shared run {run_id}, read from the server's store (no model call){origin}: click "
        f"any token to inspect its decision. {walk}Run, or Step after any change, starts a "
        "run of your own."
    )
    kind = "warn" if shown.imported else "info"
    return {**frame, "status": markup.status_html(message, kind)}


def walks(session: Session, form: Form) -> bool:
    """Whether a Step walks the shared run's rounds: a shared run with speculative rounds is
    shown, and the controls are as the link opened them."""
    spec = session.spec
    return (
        session.mode == "shared"
        and session.shared_form == form
        and spec is not None
        and bool(spec.rounds)
    )


def step_changes(session: Session) -> Changes:
    """One round more of the shared run (after the last, round 1 again): the text so far,
    the round's narration and decision, and at the end every view. No model call."""
    spec = session.spec
    assert spec is not None and spec.rounds
    n = len(spec.rounds)
    at = session.shared_at % n + 1
    session.shared_at = at
    out = lesson_replay.round_changes_at(session, at)  # as a recorded lesson walks a run
    rnd = spec.rounds[at - 1]
    msg = f"shared run {session.shared_id}: round {round_number(rnd.index)} of {n}, stored"
    msg += f" ({IMPORTED})" if session.imported else ""
    msg += " (the end: Step again starts over)" if at == n else " (Step for the next round)"
    out["status"] = markup.status_html(msg, "info")
    return out


def share_update(store: SharedRuns, session: Session, page_url: str) -> Changes:
    """Store the session's finished run, imported or run here as the session knows it, and
    show its link."""
    run_id = store.save(session.spec, session.ar, imported=session.imported)
    base = page_url.split("?", 1)[0].split("#", 1)[0]
    url = f"{base}?{PARAM}={run_id}" if base else f"?{PARAM}={run_id}"
    return {"share_link": markup.share_link_html(url, run_id)}


def page_address(request: gr.Request | None) -> str:
    """The page's own address as the browser sent it (the Referer of its request), or ""."""
    if request is None:
        return ""
    headers = getattr(request, "headers", None) or {}
    referer = headers.get("referer", "") if hasattr(headers, "get") else ""
    return referer if referer.startswith(("http://", "https://")) else ""


def wire(page: Page) -> None:
    """Share this run, and the page's load event (off the model queue)."""
    ctrls, sess, store = page.controls, page.session, page.ctx.shared

    def share(request: gr.Request, session: Session) -> dict[Any, Any]:
        return page.keyed(share_update(store, session, page_address(request)))

    ctrls["share"].click(
        user_errors(share), [sess], [ctrls["share_link"]], api_name="share", **page.quiet
    )

    def opened(request: gr.Request, session: Session, *values: Any) -> dict[Any, Any]:
        params = getattr(request, "query_params", None) or {}
        run = params.get(PARAM) if hasattr(params, "get") else None
        lesson = params.get(LESSON_PARAM) if hasattr(params, "get") else None
        if run is None and lesson is not None:  # a recorded lesson's link
            form = page.form(values)
            return page.keyed(lesson_replay.open_lesson(store, session, form, lesson))
        return page.keyed(open_page(store, session, page.form(values), run))

    page.blocks.load(
        opened,
        [sess, *page.inputs],
        # the lesson panel folds away on a recorded lesson's page (specviz.ui.lesson_replay)
        [*page.outputs, ctrls["pair_go"], page.lesson["lesson_box"]],
        show_progress="hidden",
        concurrency_id="pages",
        concurrency_limit=CONCURRENCY,
        **INTERNAL,
    )
