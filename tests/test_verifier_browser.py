"""Play the verifier in a real browser (Debian's chromium through Playwright, on conftest's
ui_url: tiny networks over the offline pair's tokenizer), in the presentation mode at
1280x720: Run, the Decision tab's mode switch, one round played with clicks and keys, and
its score on the board.

Set SPECVIZ_SCREENSHOT_DIR to also write play-1280x720.png there.
"""

from __future__ import annotations

import pytest

from tests.test_browser import generate, open_tab, opened
from tests.test_layout_browser import shot

pytestmark = pytest.mark.browser

BOARD = "#sv-play-board .sv-play"
# The token view's blur and the veil's words.
VEILED = """() => getComputedStyle(document.querySelector('#sv-tokens')).filter
  + getComputedStyle(document.querySelector('#sv-token-row'), '::after').content"""
# The number of the first round in the round table that kept a draft (0: none did).
FIRST_KEPT = """() => {
  for (const row of document.querySelectorAll('#sv-rounds tr')) {
    const n = row.querySelector('.sv-rn');
    if (n && row.querySelector('[data-kind=accepted]')) return Number(n.innerText);
  }
  return 0;
}"""


def phase(page, name: str, at: int) -> None:
    """Wait until the board shows the draft `at` in phase `name`."""
    page.wait_for_selector(f'{BOARD}[data-phase="{name}"][data-at="{at}"]', timeout=30_000)


def test_one_round_played_with_clicks_and_keys(browser, ui_url) -> None:
    with opened(browser, ui_url, 1280, 720, "?view=present") as page:  # the older URL spelling
        # a hot draft against the target's 0.7 makes a rejection in some round near certain
        generate(page, "The capital of France is", 40, draft_temperature="1.8")
        open_tab(page, "Decision")
        page.get_by_label("Play the verifier").check()
        page.click("#sv-play-deal")
        phase(page, "guess", 0)
        board = page.locator(BOARD)
        tested = board.locator(".sv-play-line .sv-play-tok").count()
        assert tested >= 1 and "p(x)" in board.inner_text() and "u = " not in board.inner_text()
        veiled = page.evaluate(VEILED)
        assert "blur" in veiled and "hidden while you play" in veiled  # no verdicts shown
        # the visitor chooses a round: the first that kept a draft, so that two are played
        chosen = page.evaluate(FIRST_KEPT)
        assert chosen > 0
        page.fill("#sv-play-round input[type=number]", str(chosen))
        page.click("#sv-play-deal")
        page.locator(BOARD).filter(has_text=f"Round {chosen} of").wait_for(timeout=30_000)
        phase(page, "guess", 0)
        page.locator("#sv-play-view").scroll_into_view_if_needed()
        shot(page, "play-guess-1280x720.png")
        at = 0
        while True:  # each draft: a prediction, its draw, the verdict; keys and clicks mixed
            if at % 2 == 0:  # a number, said with the button
                page.fill("#sv-play-guess input[type=number]", "0.8")
                page.click("#sv-play-say")
            else:  # a call, with the key
                page.locator("#sv-play-deal").focus()
                page.keyboard.press("k")
            phase(page, "drawn", at)
            assert "You said" in board.inner_text()
            page.keyboard.press("n")  # focus on a button, not in a field: the key counts
            phase(page, "verdict", at)
            text = board.inner_text()
            assert "Kept" in text or "Rejected" in text
            if at == 0:
                shot(page, "play-1280x720.png")
            page.click("#sv-play-next")
            page.wait_for_function(
                f"() => {{ const b = document.querySelector('{BOARD}');"
                f" return b.dataset.phase === 'done' || b.dataset.at === '{at + 1}'; }}",
                timeout=30_000,
            )
            if board.get_attribute("data-phase") == "done":
                break
            at += 1
        assert "blur" not in page.evaluate(VEILED)  # the round decided: the colours are back
        final = page.locator(f"{BOARD} .sv-play-final")
        assert final.inner_text().startswith(f"Score {board.get_attribute('data-points')} of ")
        assert at >= 1 and f"of {at + 1}" in final.inner_text()
        assert board.locator(".sv-play-score tr").count() == at + 2  # header + one per draft
        shot(page, "play-done-1280x720.png")
        assert page.dialogs == []
