"""The guided lesson in a real browser (Debian's chromium through Playwright, on the offline
pair): at 1280x720 the lesson and Run are on screen when the page opens, and step 1's button
runs and states the run's numbers.

Set SPECVIZ_SCREENSHOT_DIR to also write lesson-1280x720.png there.
"""

from __future__ import annotations

import re

import pytest

from tests.test_browser import opened
from tests.test_layout_browser import inside, shot

pytestmark = pytest.mark.browser


def test_the_lesson_and_run_on_screen_and_step_one_states_its_run(browser, app_url) -> None:
    with opened(browser, app_url, 1280, 720) as page:
        page.evaluate("window.scrollTo(0, 0)")
        for selector in ("#sv-lesson", "#sv-lesson-go", "#sv-lesson-next", "#sv-run"):
            inside(page, selector)
        assert "step 1 of 7" in page.inner_text("#sv-lesson")
        page.click("#sv-lesson-go")
        said = page.locator("#sv-lesson-said .sv-lesson-said")
        said.wait_for(timeout=600_000)
        text = said.inner_text()
        assert re.search(r"\d+ tokens from \d+ target calls, \d+\.\d\d tokens per call", text)
        assert re.search(r"\d+ accepted, \d+ rejected, \d+ resampled, \d+ bonus", text)
        assert re.search(r"Speedup \d+\.\d\dx", text), text
        assert "done" in page.inner_text("#sv-status")
        page.evaluate("window.scrollTo(0, 0)")
        page.mouse.move(0, 0)
        inside(page, "#sv-lesson")
        inside(page, "#sv-run")
        shot(page, "lesson-1280x720.png")
        # Next shows step 2 with its own button; the first step's statement waits there.
        page.click("#sv-lesson-next")
        page.locator("#sv-lesson").filter(has_text="step 2 of 7").wait_for(timeout=30_000)
        assert "temperature 1.5" in page.inner_text("#sv-lesson-go")
        page.click("#sv-lesson-prev")
        said.filter(has_text="target calls").wait_for(timeout=30_000)
        assert page.dialogs == []
