"""No queued Run lost without a word: the page's watch on its pressed Run
(assets/queue-watch.js, run once when the page loads, with the presentation script).

gradio tells a page nothing when its queued event goes away on the server: the queue drops
a session's events once its stream to the page closes (``clean_events``), and gradio's client
waits on for an answer when that stream ends without the server's ``close_stream`` message,
which keeps the Run button pressed (a click event waits for its answer before it fires
again). A stream that breaks makes gradio draw the page again, which forgets the Run. A full
queue turns the Run away with a toast that goes after a few seconds and an "Error" badge on
the status. In each case the page writes one line under the status (:data:`TEXT`), which
stays until Run is pressed again.
"""

from __future__ import annotations

from specviz.ui.assets import Js, script

KEY = "specviz-run"  # the pressed Run, in the tab's sessionStorage
NOTE_ID = "sv-run-note"  # the line under the status

TEXT = {
    "closed": (
        "your Run was dropped: the connection to the server closed while it waited. "
        "Reload the page and press Run again."
    ),
    "reload": (
        "your Run was dropped: the page lost its connection to the server (or was reloaded) "
        "before the Run finished. Press Run again."
    ),
    "full": "your Run was turned away: the queue is full. Press Run again in a minute.",
    "refused": "your Run did not start: ",
    "error": "the server refused it.",
}


def page_js() -> Js:
    """The watch, as a function the page script calls once."""
    return script("queue-watch", KEY=KEY, NOTE_ID=NOTE_ID, TEXT=TEXT)
