"""The page's layout in a real browser (Debian's chromium through Playwright, on conftest's
ui_url: tiny networks over the offline pair's tokenizer, or the offline pair itself while
the screenshots are written): the tab row at 1280x720, one round number after Steps, the
presentation mode at 1024x768 with its keys, a phone at 390x844.

Set SPECVIZ_SCREENSHOT_DIR to also write the layout screenshots there (app-1280x720.png,
present-steps-1024x768.png, phone-390x844.png; the README's present-1024x768.png, taken
after a Run, is tests/test_display_browser.py's).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.conftest import slow_target
from tests.test_browser import open_tab, opened, press_run, wait_text

pytestmark = pytest.mark.browser


def shot(page, name: str) -> None:
    """The viewport as assets' screenshot `name`, when SPECVIZ_SCREENSHOT_DIR is set."""
    target = os.environ.get("SPECVIZ_SCREENSHOT_DIR")
    if target:
        page.screenshot(path=str(Path(target) / name))


def inside(page, selector: str) -> dict:
    """The element's box, asserted to lie wholly inside the viewport."""
    box = page.locator(selector).first.bounding_box()
    size = page.viewport_size
    assert box is not None, selector
    assert box["x"] >= 0 and box["y"] >= 0, (selector, box)
    assert box["x"] + box["width"] <= size["width"], (selector, box, size)
    assert box["y"] + box["height"] <= size["height"], (selector, box, size)
    return box


# The round table's view has scrolled to its last row (autoscroll): the row lies in the
# view, or, where the row is taller than the view (long tokens wrap in its narrow columns),
# the view has scrolled to its end and shows the row's last lines.
SCROLLED_TO_LAST_ROW = """() => {
  const box = document.querySelector('#sv-rounds .html-container');
  const view = box.getBoundingClientRect();
  const row = document.querySelector('#sv-rounds tr:last-child').getBoundingClientRect();
  if (view.top <= row.top && row.bottom <= view.bottom + 1) return true;
  const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 1;
  return row.height > view.height && atEnd && row.bottom <= view.bottom + 1;
}"""


def run(page) -> None:
    """Press Run: untouched when the README's screenshots are written, else with 16 new
    tokens (the layout is the same; the untouched run is tests/test_browser.py's)."""
    if not os.environ.get("SPECVIZ_SCREENSHOT_DIR"):
        page.fill("#sv-max-new input[type=number]", "16")
        page.press("#sv-max-new input[type=number]", "Enter")
        page.evaluate("window.scrollTo(0, 0)")
    press_run(page)


def step(page, n: int, key: str | None = None) -> None:
    """Press Step (or the key, with the focus on nothing) and wait for round n."""
    if key is None:
        page.click("#sv-step")
    else:
        page.evaluate("document.activeElement && document.activeElement.blur()")
        page.keyboard.press(key)
    wait_text(page, "#sv-status", f"step mode: round {n} done")


def tabs_all_show(page) -> None:
    """Every tab's button is on the page, within its width; no "More tabs" menu."""
    page.locator("#sv-tabs").scroll_into_view_if_needed()
    names = [t.inner_text() for t in page.locator("#sv-tabs [role=tab]").all()]
    assert names == ["Decision", "Speed", "Acceptance", "Theory", "Exactness", "Data", "Prompt set"]
    width = page.viewport_size["width"]
    for tab in page.locator("#sv-tabs [role=tab]").all():
        box = tab.bounding_box()
        assert tab.is_visible() and box is not None and box["x"] + box["width"] <= width
    assert not page.locator("button[aria-label='More tabs']").is_visible()


def test_the_tab_row_at_1280x720_and_where_the_time_goes(browser, ui_url) -> None:
    with opened(browser, ui_url, 1280, 720) as page:
        tabs_all_show(page)
        page.evaluate("window.scrollTo(0, 0)")
        run(page)
        page.mouse.move(0, 0)
        inside(page, "#sv-run")
        inside(page, "#sv-status")
        shot(page, "app-1280x720.png")
        tabs_all_show(page)
        open_tab(page, "Speed")
        page.wait_for_selector("#sv-time .js-plotly-plot", timeout=30_000)
        assert "where a round's time goes" in page.inner_text("#sv-time")
        totals = page.inner_text("#sv-time-totals")
        assert "verify (one target call)" in totals and "wall time" in totals
        assert page.dialogs == []


def test_three_steps_one_round_number(browser, ui_url) -> None:
    with opened(browser, ui_url, 1280, 900) as page:
        for n in (1, 2, 3):
            step(page, n)
        rows = page.locator("#sv-rounds .sv-rn").all_inner_texts()
        assert rows == ["1", "2", "3"]
        assert page.inner_text("#sv-narration b") == "Round 3"
        assert page.input_value("#sv-insp-round input") == "3"
        assert page.inner_text("#sv-verdict b").startswith("round 3, position ")
        title = page.locator("#sv-tokens [data-round='2']").first.get_attribute("title")
        assert "round 3 · position" in title
        assert page.dialogs == []


def test_presentation_mode_fits_a_round_on_1024x768_and_steps_by_key(browser, ui_url) -> None:
    with opened(browser, ui_url, 1024, 768, "?mode=present") as page:
        assert page.is_checked("#sv-present-toggle input")  # the URL ticks the toggle
        assert "sv-present-mode" in page.evaluate("document.documentElement.className")
        for n in range(1, 5):
            step(page, n)
        step(page, 5, key="ArrowRight")
        step(page, 6, key=" ")
        page.evaluate("document.activeElement.blur(); window.scrollTo(0, 0)")
        page.mouse.move(0, 0)
        page.wait_for_function(SCROLLED_TO_LAST_ROW, timeout=10_000)  # the view follows
        for selector in ("#sv-tokens", "#sv-narration", "#sv-step", "#sv-run", "#sv-prompt"):
            inside(page, selector)
        inside(page, "#sv-rounds tr:last-child")  # the round's row
        assert page.locator("#sv-rounds tr:last-child .sv-rn").inner_text() == "6"
        # the round's latest decision beside the tokens: p and q, the draw against a(x)
        assert "round 6 · position" in page.inner_text("#sv-decision")
        inside(page, "#sv-decision .sv-dp-row")
        size = page.evaluate(
            "parseFloat(getComputedStyle(document.querySelector('#sv-tokens .sv-output')).fontSize)"
        )
        assert size >= 20  # large type
        shot(page, "present-steps-1024x768.png")
        page.focus("#sv-prompt textarea")  # in a text field the keys stay with the field
        page.keyboard.press("ArrowRight")
        page.wait_for_timeout(1500)
        assert "round 6 done" in page.inner_text("#sv-status")
        page.uncheck("#sv-present-toggle input")  # back to the normal layout, URL too
        page.wait_for_function("!document.documentElement.classList.contains('sv-present-mode')")
        assert not re.search(r"mode=present", page.url)
        assert page.dialogs == []


def test_a_phone_sees_run_and_the_token_view_first(browser, ui_url, ui_pair) -> None:
    # each target call takes a second or more: the untouched run still runs when Stop is
    # pressed, however long the click takes on a loaded machine (Stop ends it within a
    # round, so the test waits a round, not the run)
    with slow_target(ui_pair, 1.0), opened(browser, ui_url, 390, 844) as page:
        inside(page, "#sv-run")
        top = page.locator("#sv-tokens").bounding_box()
        assert top is not None and 0 <= top["y"] < 844 - 40  # its start, on the first screen
        if os.environ.get("SPECVIZ_SCREENSHOT_DIR"):
            press_run(page)  # nothing touched: what a phone's visitor meets, to the end
        else:
            # nothing touched, and stopped once the first round shows (the untouched run to
            # its end is tests/test_browser.py's): Stop ends it where it stands
            page.click("#sv-run")
            page.wait_for_selector("#sv-tokens [data-status]", timeout=120_000)
            page.click("#sv-stop")
            status = page.locator("#sv-status")
            try:
                status.filter(has_text="done (").wait_for(timeout=120_000)
            finally:  # what it said instead, when it ended otherwise or not at all
                assert "done (stopped)" in status.inner_text(), status.inner_text()
        page.evaluate("window.scrollTo(0, 0)")
        page.mouse.move(0, 0)
        inside(page, "#sv-run")
        assert page.locator("#sv-tokens [data-status]").first.bounding_box()["y"] < 844
        shot(page, "phone-390x844.png")
        assert page.dialogs == []


# --- nothing clipped, nothing covered (four sizes) ----------------------------------------

# What the page shows at one size, read from the rendered page: text boxes that hide part
# of their text (overflow hidden, no scroll: "clipped"), the main views' painted boxes that
# overlap one another, and the prompt's box.
AUDIT = """() => {
  const vis = (el) => {
    const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return r.width > 2 && r.height > 2 && s.visibility !== 'hidden'
      && s.display !== 'none' && s.clipPath === 'none';
  };
  const name = (el) => (el.id ? '#' + el.id : '') + '.'
    + [...el.classList].slice(0, 2).join('.') + '<' + el.tagName;
  const hides = (o) => o === 'hidden' || o === 'clip';
  const clipped = [];
  for (const el of document.querySelectorAll('#sv-main *')) {
    if (!vis(el) || el.closest('.js-plotly-plot, .sr-only, [aria-hidden=true]')) continue;
    if (!(el.innerText || '').trim() || el.matches('textarea, input')) continue;
    const s = getComputedStyle(el);
    const wide = el.scrollWidth > el.clientWidth + 1;
    const tall = el.scrollHeight > el.clientHeight + 1;
    const cut = (wide && hides(s.overflowX) && s.textOverflow !== 'ellipsis')
      || (tall && hides(s.overflowY));
    if (cut) clipped.push([name(el), (el.innerText || '').slice(0, 50)]);
  }
  const sels = ['#sv-status .sv-status', '#sv-speedline .sv-speedline',
    '#sv-tokens .html-container', '#sv-decision .html-container',
    '#sv-rounds .html-container', '#sv-narration .html-container', '#sv-lesson',
    '#sv-quick', '#sv-legend', '#sv-exact-note', '#sv-tabs', '#sv-recorded'];
  const painted = (e) => {
    const r = e.getBoundingClientRect(), s = getComputedStyle(e);
    const w = s.overflowX === 'visible' ? Math.max(r.width, e.scrollWidth) : r.width;
    const h = s.overflowY === 'visible' ? Math.max(r.height, e.scrollHeight) : r.height;
    return {left: r.left, top: r.top, right: r.left + w, bottom: r.top + h};
  };
  const els = sels.map((s) => [s, document.querySelector(s)]).filter(([, e]) => e && vis(e));
  const overlaps = [];
  for (let i = 0; i < els.length; i++) {
    for (let j = i + 1; j < els.length; j++) {
      const [a, ea] = els[i], [b, eb] = els[j];
      if (ea.contains(eb) || eb.contains(ea)) continue;
      const ra = painted(ea), rb = painted(eb);
      const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
      const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
      if (w > 1 && h > 1) overlaps.push([a, b, Math.round(w), Math.round(h)]);
    }
  }
  const ta = document.querySelector('#sv-prompt textarea');
  const prompt = {sw: ta.scrollWidth, cw: ta.clientWidth, sh: ta.scrollHeight,
    ch: ta.clientHeight, w: ta.getBoundingClientRect().width};
  return {clipped, overlaps, prompt};
}"""

# The lines a text's characters stand on (their tops, rounded), for each text node of the
# element given.
LINES = """(e) => {
  const range = document.createRange(), tops = new Map();
  const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    for (let i = 0; i < node.length; i++) {
      range.setStart(node, i); range.setEnd(node, i + 1);
      const r = range.getClientRects()[0];
      if (!r || !node.data[i].trim()) continue;
      const top = Math.round(r.top / 4);
      tops.set(top, (tops.get(top) || '') + node.data[i]);
    }
  }
  return [...tops.values()];
}"""

SIZES = [(1024, 768, "?mode=present"), (1280, 720, ""), (1920, 1080, ""), (390, 844, "")]
LONG_PROMPT = (
    "Explain in two sentences why the sky is blue and why sunsets are red, for a class of "
    "students who have not met scattering before."
)


def test_nothing_clipped_nothing_covered_at_four_sizes(browser, ui_url) -> None:
    for width, height, query in SIZES:
        with opened(browser, ui_url, width, height, query) as page:
            page.fill("#sv-prompt textarea", LONG_PROMPT)
            run(page)
            page.evaluate("window.scrollTo(0, 0)")
            page.mouse.move(0, 0)
            found = page.evaluate(AUDIT)
            where = f"{width}x{height}{query}"
            assert found["clipped"] == [], (where, found["clipped"])
            assert found["overlaps"] == [], (where, found["overlaps"])
            # the prompt whole, or elided with its whole text as a tooltip
            prompt = found["prompt"]
            if prompt["sh"] > prompt["ch"] + 1 or prompt["sw"] > prompt["cw"] + 1:
                page.hover("#sv-prompt textarea")
                title = page.get_attribute("#sv-prompt textarea", "title")
                assert title == LONG_PROMPT, where
            assert prompt["w"] >= min(250, width - 100), (where, prompt)
            # the latest tokens in view: the token box has followed the run to its end
            end = page.evaluate(
                "() => { const b = document.querySelector('#sv-tokens .html-container');"
                " return b.scrollTop + b.clientHeight >= b.scrollHeight - 2; }"
            )
            assert end, where
            if query:  # the queue's note over a waiting view, readable from the hall
                size = page.evaluate(
                    "() => { const n = document.createElement('div'); n.className = 'meta-text';"
                    " document.querySelector('#sv-status').appendChild(n);"
                    " const px = parseFloat(getComputedStyle(n).fontSize); n.remove(); return px; }"
                )
                assert size >= 20, (where, size)
            shot(page, f"fit-{width}x{height}.png")
            assert page.dialogs == []


def test_the_smaller_defects_read_from_the_page(browser, ui_url) -> None:
    """The run log's headers whole, no empty "log CSV" box, the prompt broken between
    words, and p and q with three figures beside min(1, p/q)."""
    with opened(browser, ui_url, 1280, 720) as page:
        page.fill("#sv-prompt textarea", LONG_PROMPT)
        run(page)
        # the prompt over the tokens breaks between words: each line ends at a space's mark
        lines = page.locator("#sv-tokens .sv-prompt").evaluate(LINES)
        assert len(lines) >= 1
        for line in lines[:-1]:
            assert line.endswith("·"), lines  # a line ends at a word's end
        # p and q beside min(1, p/q) with three significant figures
        # from another tab: the click's answer brings the Decision tab back, so that the
        # tab opened next is not switched away by an answer still on its way
        open_tab(page, "Speed")
        page.locator("#sv-tokens [data-status=rejected]").first.click()
        decision = page.get_by_role("tab", name="Decision", exact=True)
        expect(decision).to_have_attribute("aria-selected", "true", timeout=30_000)
        page.wait_for_selector("#sv-decision .sv-dp-keep", timeout=30_000)
        values = (
            page.locator("#sv-decision .sv-dp-part").first.locator(".sv-dp-val").all_inner_texts()
        )
        for v in values[:2]:  # p(x), q(x)
            digits = re.sub(r"^0\.0*|e.*$|\.", "", v)
            assert v == "0" or len(digits) == 3, values
        # the run log: its headers never broken inside a word, and no empty file box
        open_tab(page, "Acceptance")
        page.set_viewport_size({"width": 760, "height": 720})  # the columns squeezed
        page.wait_for_timeout(300)
        heads = page.locator("#sv-log th").all()
        assert heads
        for th in heads:
            lines = th.evaluate(LINES)
            if len("".join(lines)) > 1:  # one word (no space), one line
                assert len(lines) == 1 or " " in "".join(lines), lines
        assert not page.locator("#sv-log-file").is_visible()
        page.click("#sv-log-export")
        link = page.locator("#sv-log-file a[href*='specviz-runs.csv']").first
        link.wait_for(timeout=30_000)
        assert page.locator("#sv-log-file").is_visible()
        assert page.dialogs == []
