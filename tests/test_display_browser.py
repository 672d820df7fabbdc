"""The page as a hall and a phone see it, in a real browser (Debian's chromium through
Playwright, on conftest's ui_url: tiny networks over the offline pair's tokenizer): after a
Run no bare literal ("false", "true", "None") and no text cut at a box's right edge on any
tab, the check's result included; no token broken inside itself; the figures' legends clear
of their axes' titles and the reliability diagram on [0, 1]; a clicked token's decision
beside the tokens, scrolled to on a phone; the presentation mode's one screen at 1024x768
(the speed line, the tokens, the decision's p/q bars with u, the narration's own area) in
type of 20 px or more; the tokens at 18 px or more in a 1920x1080 window.

Set SPECVIZ_SCREENSHOT_DIR to also write display-*.png and present-1024x768.png there (the
README's presentation-mode screenshot, on the offline pair while the screenshots are written).
"""

from __future__ import annotations

import re

import pytest

from tests.test_browser import open_tab, opened, press_run, wait_text
from tests.test_layout_browser import inside, shot

pytestmark = pytest.mark.browser

BARE = re.compile(r"\b(false|true|None)\b")
TABS = ("Decision", "Speed", "Acceptance", "Theory", "Exactness", "Data", "Prompt set")

# Every box that shows a result, a verdict or a table: its content wider than itself is cut
# (or hidden behind a scroll bar) at its right edge.
CLIPPED = """() => {
  const boxes = document.querySelectorAll(
    '#sv-right .html-container, #sv-right pre, #sv-right table, .sv-verdict, .sv-dp, '
    + '.sv-status, .sv-speedline');
  return [...boxes].filter((e) => e.offsetParent !== null && e.clientWidth > 0
      && e.scrollWidth > e.clientWidth + 1)
    .map((e) => [(e.closest('[id]') || {}).id, e.className, e.scrollWidth, e.clientWidth]);
}"""

# Token spans drawn on more than one line although they hold no newline.
BROKEN_TOKENS = """() => [...document.querySelectorAll('#sv-tokens .sv-tok')]
  .filter((t) => !t.textContent.includes('\\u21b5') && t.getClientRects().length > 1)
  .map((t) => t.textContent)"""

# The token view's line boxes: how many lines its tokens fill (the test must see wrapping).
LINES = """() => new Set([...document.querySelectorAll('#sv-tokens .sv-tok')]
  .map((t) => Math.round(t.getBoundingClientRect().top))).size"""

# Each drawn plot's legend against its axis titles, tick labels, title and annotations.
LEGEND_OVERLAPS = """() => {
  const box = (e) => e.getBoundingClientRect();
  const hit = (a, b) => a.left < b.right - 1 && b.left < a.right - 1
    && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const out = [];
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    if (plot.offsetParent === null) continue;
    const legend = plot.querySelector('g.legend');
    if (!legend || box(legend).width === 0) continue;
    const others = plot.querySelectorAll(
      '.g-xtitle, .g-ytitle, .g-x2title, .g-y2title, .g-gtitle, .xtick, .ytick, .annotation');
    for (const o of others) {
      if (box(o).width > 0 && hit(box(legend), box(o))) {
        out.push([(plot.closest('[id]') || {}).id, o.getAttribute('class')]);
      }
    }
  }
  return out;
}"""

FONT_PX = "(sel) => parseFloat(getComputedStyle(document.querySelector(sel)).fontSize)"

# The element lies wholly inside the viewport (the page may still be scrolling to it).
IN_SIGHT = """(sel) => { const b = document.querySelector(sel).getBoundingClientRect();
  return b.top >= 0 && b.bottom <= window.innerHeight && b.left >= 0
    && b.right <= window.innerWidth; }"""


def run(page, tokens: int) -> None:
    page.fill("#sv-max-new input[type=number]", str(tokens))
    page.press("#sv-max-new input[type=number]", "Enter")
    page.evaluate("window.scrollTo(0, 0)")
    press_run(page)


def plots_drawn(page) -> None:
    """Wait until every plot of the tab shown has been drawn."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot')]"
        ".filter((p) => p.offsetParent !== null).every((p) => p.querySelector('.main-svg'))",
        timeout=30_000,
    )


def nothing_wrong_shown(page, where: str) -> None:
    text = page.evaluate("document.body.innerText")
    bare = [text[max(0, m.start() - 40) : m.end() + 40] for m in BARE.finditer(text)]
    assert not bare, (where, bare)
    assert page.evaluate(CLIPPED) == [], where


def shown_decision(page, token) -> str:
    """Click a token; the panel's text once it shows that token's round and position."""
    where = f"round {int(token.get_attribute('data-round')) + 1} · position "
    where += token.get_attribute("data-pos")
    token.click()
    wait_text(page, "#sv-decision", where, timeout=30_000)
    return page.inner_text("#sv-decision")


def a_draft_token(page):
    """A rejected draft where the run has one (the offline pair's first 32 tokens of the
    screenshots' run have none), else an accepted one: either shows p, q and p/q."""
    rejected = page.locator("#sv-tokens [data-status=rejected]")
    return (
        rejected if rejected.count() else page.locator("#sv-tokens [data-status=accepted]")
    ).first


def test_a_run_shows_no_bare_literal_no_cut_text_and_legends_clear_of_axes(browser, ui_url) -> None:
    with opened(browser, ui_url, 1280, 720) as page:
        run(page, 32)
        for tab in TABS:
            open_tab(page, tab)
            plots_drawn(page)
            nothing_wrong_shown(page, tab)
            assert page.evaluate(LEGEND_OVERLAPS) == [], tab
            if tab == "Acceptance":  # the reliability diagram stays on the probabilities
                page.wait_for_selector("#sv-calib .main-svg", timeout=30_000)
                lo, hi = page.evaluate(
                    "document.querySelector('#sv-calib .js-plotly-plot')._fullLayout.xaxis.range"
                )
                assert -0.05 <= lo and hi <= 1.05, (lo, hi)
        # the distribution check's result (fixed-width text) wraps inside its box
        open_tab(page, "Exactness")
        page.click("#sv-check-run")
        page.wait_for_selector("#sv-check-summary pre.sv-check", timeout=120_000)
        plots_drawn(page)
        nothing_wrong_shown(page, "the check's result")
        assert page.evaluate(LEGEND_OVERLAPS) == [], "the check's figure"
        # a clicked token's decision shows beside the tokens, on the screen
        page.evaluate("window.scrollTo(0, 0)")
        token = a_draft_token(page)
        text = shown_decision(page, token)
        assert "p(x)" in text and "q(x)" in text and "p/q = " in text
        page.wait_for_function(IN_SIGHT, arg="#sv-decision .sv-dp-keep", timeout=10_000)
        inside(page, f"#sv-tokens [data-pos='{token.get_attribute('data-pos')}']")
        nothing_wrong_shown(page, "after the click")
        shot(page, "display-1280x720.png")
        assert page.dialogs == []


def test_a_phone_keeps_each_token_whole_and_scrolls_to_its_decision(browser, ui_url) -> None:
    with opened(browser, ui_url, 390, 844) as page:
        run(page, 64)
        assert page.evaluate(LINES) >= 8  # lines break often at this width
        assert page.evaluate(BROKEN_TOKENS) == []
        page.evaluate("window.scrollTo(0, 0)")
        token = a_draft_token(page)
        token.scroll_into_view_if_needed()
        text = shown_decision(page, token)
        assert "p/q = " in text
        # the page has scrolled to the panel, which sits under the token view here
        page.wait_for_function(IN_SIGHT, arg="#sv-decision .sv-dp-keep", timeout=10_000)
        shot(page, "display-390x844.png")
        assert page.dialogs == []


def test_the_presentation_mode_holds_the_speed_the_tokens_and_the_decision(browser, ui_url) -> None:
    with opened(browser, ui_url, 1024, 768, "?mode=present") as page:
        run(page, 64)
        page.evaluate("document.activeElement && document.activeElement.blur()")
        page.evaluate("window.scrollTo(0, 0)")
        page.mouse.move(0, 0)
        page.wait_for_selector("#sv-speedline .sv-speedline", timeout=30_000)
        for selector in (
            "#sv-speedline",
            "#sv-tokens",
            "#sv-tokens .sv-tok >> nth=-1",  # the newest token: the view follows the end
            "#sv-decision .sv-dp-row >> nth=0",  # p(x)
            "#sv-decision .sv-dp-row >> nth=1",  # q(x)
            "#sv-decision .sv-dp-keep",  # min(1, p/q), u marked on it
            "#sv-narration",
        ):
            inside(page, selector)
        assert page.locator("#sv-decision .sv-dp-keep[data-u]").count() >= 1
        for selector in (
            "#sv-tokens .sv-output",
            "#sv-status .sv-status",
            "#sv-speedline .sv-speedline",
            "#sv-legend .sv-legend",
            "#sv-decision .sv-dp",
            "#sv-rounds table",
            "#sv-narration .sv-status",
        ):
            assert page.evaluate(FONT_PX, selector) >= 20, selector
        shot(page, "present-1024x768.png")
        # Steps: the narration keeps its own height and place, scrolling inside itself, and
        # each round's decision shows beside the tokens
        seen = []
        for n in range(1, 5):
            page.click("#sv-step")
            wait_text(page, "#sv-status", f"step mode: round {n} done")
            wait_text(page, "#sv-decision", f"round {n} · position")
            page.evaluate("document.activeElement.blur(); window.scrollTo(0, 0)")
            below = page.locator("#sv-exact-note").bounding_box()["y"]  # what follows it
            seen.append((page.locator("#sv-narration").bounding_box(), below))
        assert page.evaluate(FONT_PX, "#sv-narration .sv-narration") >= 20
        assert page.locator("#sv-narration li").count() >= 3  # the round told in full
        assert seen[-1] == seen[0], seen  # no taller, no lower, and nothing under it pushed
        inside(page, "#sv-narration")
        inside(page, "#sv-decision .sv-dp-row >> nth=0")
        assert page.dialogs == []


def test_a_hall_window_shows_the_tokens_at_18_px(browser, ui_url) -> None:
    with opened(browser, ui_url, 1920, 1080) as page:
        assert page.evaluate(FONT_PX, "#sv-tokens .sv-tokens") >= 18
