"""Presentation mode, for a projector: the controls fold to one line above the token
view, the tokens, the round table and the narration come in large type, and Space or the
right arrow presses Step.

It is a class on the page's root element, ``html.sv-present-mode``, which
assets/specviz.css lays out. The URL ``?mode=present`` opens the page in it, and the toggle
under Run/Step/Stop switches it (keeping the URL in step, so a reload stays where it was).
All of it runs in the browser: no event here reaches Python. The scripts are
assets/present-*.js.
"""

from __future__ import annotations

from specviz.ui import queue_watch
from specviz.ui.assets import script
from specviz.ui.page import INTERNAL, Page

ROOT_CLASS = "sv-present-mode"

# Focus in one of these: keys belong to it (typing, moving a slider, switching tabs).
FIELDS = (
    "input, textarea, select, [contenteditable]:not([contenteditable=false]), [role=slider], "
    "[role=tab], [role=tablist], [role=listbox], [role=option], [role=radiogroup], [role=menu]"
)
# Focus on one of these: Space presses it, as a browser does.
PRESSABLE = "button, a[href], summary, [role=button], [role=checkbox]"


def page_js() -> str:
    """The page script (launch(js=...)), run once when the page loads: the mode from the
    URL, and the keys (assets/present-page.js); then the watch on a pressed Run
    (specviz.ui.queue_watch)."""
    return script(
        "present-page",
        FROM_URL=script("present-from-url"),
        ROOT_CLASS=ROOT_CLASS,
        FIELDS=FIELDS,
        PRESSABLE=PRESSABLE,
        QUEUE_WATCH=queue_watch.page_js(),
    )


def wire(page: Page) -> None:
    """The toggle starts as the URL says and switches the mode; both in the browser only."""
    toggle = page.controls["present"]
    from_url = script("present-from-url")
    page.blocks.load(None, None, [toggle], js=from_url, queue=False, **INTERNAL)
    toggle_js = script("present-toggle", ROOT_CLASS=ROOT_CLASS)
    toggle.change(None, [toggle], None, js=toggle_js, queue=False, **INTERNAL)
