"""The presentation view, for a projector: the controls fold to one line above the token
view, the tokens, the round table and the narration come in large type, and Space or the
right arrow presses Step.

It is a class on the page's root element, ``html.sv-present-view``, which
assets/specviz.css lays out. The URL ``?view=present`` opens the page in it, and the toggle
under Run/Step/Stop switches it (keeping the URL in step, so a reload stays where it was).
All of it runs in the browser: no event here reaches Python.
"""

from __future__ import annotations

from specviz.ui.page import INTERNAL, Page

ROOT_CLASS = "sv-present-view"

# Whether the page's URL asks for the presentation view.
FROM_URL = "new URLSearchParams(window.location.search).get('view') === 'present'"

# Focus in one of these: keys belong to it (typing, moving a slider, switching tabs).
FIELDS = (
    "input, textarea, select, [contenteditable]:not([contenteditable=false]), [role=slider], "
    "[role=tab], [role=tablist], [role=listbox], [role=option], [role=radiogroup], [role=menu]"
)
# Focus on one of these: Space presses it, as a browser does.
PRESSABLE = "button, a[href], summary, [role=button], [role=checkbox]"

# Run once when the page loads (launch(js=...)): the view from the URL, and the keys.
PAGE_JS = f"""() => {{
  const root = document.documentElement;
  if ({FROM_URL}) root.classList.add('{ROOT_CLASS}');
  document.addEventListener('keydown', (e) => {{
    if (!root.classList.contains('{ROOT_CLASS}')) return;
    if (e.key !== ' ' && e.key !== 'ArrowRight') return;
    if (e.altKey || e.ctrlKey || e.metaKey || e.shiftKey || e.isComposing) return;
    const t = e.target instanceof Element ? e.target : null;
    if (t && t.closest('{FIELDS}')) return;
    if (e.key === ' ' && t && t.closest('{PRESSABLE}')) return;
    const step = document.getElementById('sv-step');
    if (!step) return;
    e.preventDefault();
    if (!e.repeat) step.click();
  }});
}}"""

# The toggle: the root's class and the URL follow it.
TOGGLE_JS = f"""(on) => {{
  document.documentElement.classList.toggle('{ROOT_CLASS}', Boolean(on));
  const url = new URL(window.location.href);
  if (on) url.searchParams.set('view', 'present');
  else url.searchParams.delete('view');
  window.history.replaceState(window.history.state, '', url);
}}"""


def wire(page: Page) -> None:
    """The toggle starts as the URL says and switches the view; both in the browser only."""
    toggle = page.controls["present"]
    page.blocks.load(None, None, [toggle], js=f"() => {FROM_URL}", queue=False, **INTERNAL)
    toggle.change(None, [toggle], None, js=TOGGLE_JS, queue=False, **INTERNAL)
