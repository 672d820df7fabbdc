"""A recorded lesson in a real browser (Debian's chromium through Playwright), on tiny
networks over the offline pair's tokenizer: "Record the lesson" in one browser context gives
a link; opened in a second context, the link plays all seven steps (each step's statement,
its run's tokens with a clickable decision, the sweep's chart, the checks' charts, the dealt
round) while the server's model thread is asked for nothing, and presentation mode's Space
walks a step's rounds and then the next step at 1024x768. "Download handout" writes one
HTML file that shows its tokens and figures in Chromium with every network request refused.

Set SPECVIZ_SCREENSHOT_DIR to also write the pages there (lesson-link-*.png)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specviz.config import Limits
from specviz.lesson import STEPS
from specviz.modelthread import MODEL_THREAD
from specviz.sharestore import SharedRuns
from tests.conftest import need_chromium, serve
from tests.test_browser import opened

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def lesson_url(text_pair, tmp_path_factory):
    """The app on text_pair, short runs, its shared runs and lessons in a folder of its own."""
    need_chromium()
    store = SharedRuns(tmp_path_factory.mktemp("lessons"), max_runs=4)
    demo = serve(text_pair, shared=store, limits=Limits(max_new_tokens=32))
    yield demo.local_url
    demo.close()


@pytest.fixture(scope="module")
def lesson_id(browser, lesson_url) -> str:
    """A lesson recorded through the page."""
    with opened(browser, lesson_url, 1280, 720) as page:
        page.click("#sv-record")
        link = page.locator("#sv-record-link a")
        page.wait_for_selector("#sv-record-link a, .toast-body.error", timeout=300_000)
        errors = page.locator(".toast-body.error")
        assert errors.count() == 0, errors.all_inner_texts()
        found = link.get_attribute("data-lesson")
        assert found and len(found) == 16 and link.inner_text().endswith(f"?lesson={found}")
        assert page.locator(".toast-body.error").count() == 0
    return found


def shot(page, name: str) -> None:
    where = os.environ.get("SPECVIZ_SCREENSHOT_DIR")
    if where:
        page.screenshot(path=str(Path(where) / name), full_page=False)


def open_link(browser, url: str, query: str, width: int, height: int):
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.dialogs = []  # type: ignore[attr-defined]
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.goto(url + query)
    return context, page


def on_step(page, number: int) -> None:
    page.locator(f"#sv-recorded [data-step='{number}']").wait_for(timeout=120_000)


def test_the_link_plays_all_seven_steps_with_no_model_call(browser, lesson_url, lesson_id) -> None:
    calls = MODEL_THREAD.calls
    context, page = open_link(browser, lesson_url, f"?lesson={lesson_id}", 1280, 720)
    try:
        on_step(page, 1)
        panel = page.locator("#sv-recorded")
        assert f"step 1 of 7: {STEPS[0].title}" in panel.inner_text()
        assert " thread" in panel.inner_text() and "measured" in panel.inner_text()
        # Step walks step 1's rounds: the first round's tokens, and a decision to click
        page.click("#sv-step")
        page.locator("#sv-status").filter(has_text="round 1 of").wait_for(timeout=120_000)
        page.locator("#sv-tokens [data-status]").first.click()
        page.locator("#sv-decision").filter(has_text="round 1 · position").wait_for(timeout=120_000)
        shot(page, "lesson-link-1280x720.png")
        for number in range(2, 8):
            page.click("#sv-recorded-next")
            on_step(page, number)
            text = panel.inner_text()
            assert f"step {number} of 7: {STEPS[number - 1].title}" in text
            if number == 5:
                page.wait_for_selector("#sv-sweep-plot .js-plotly-plot", timeout=120_000)
                assert "measured" in page.inner_text("#sv-sweep-plot")
            elif number == 6:
                page.wait_for_selector("#sv-check-plot .js-plotly-plot", timeout=120_000)
                assert page.inner_text("#sv-check-summary").strip()
            elif number == 7:
                page.locator("#sv-play-board .sv-play").first.wait_for(timeout=120_000)
                shot(page, "lesson-link-step7.png")
            elif number in (2, 4):
                assert page.locator("#sv-tokens [data-status]").count() == 0  # to be walked
        assert page.locator(".toast-body.error").count() == 0
        assert page.dialogs == []
        assert MODEL_THREAD.calls == calls, "playing a recorded lesson asked the model thread"
    finally:
        context.close()


def test_presentation_mode_walks_rounds_then_steps(browser, lesson_url, lesson_id) -> None:
    calls = MODEL_THREAD.calls
    query = f"?lesson={lesson_id}&mode=present"
    context, page = open_link(browser, lesson_url, query, 1024, 768)
    try:
        on_step(page, 1)
        status = page.locator("#sv-status")
        total = int(status.inner_text().split("Step walks its ")[1].split(" ")[0])
        page.mouse.click(5, 5)  # focus on the page, not in a field
        for i in range(1, total + 1):
            page.keyboard.press("Space")
            status.filter(has_text=f"round {i} of {total}").wait_for(timeout=120_000)
            if i == 1:
                shot(page, "lesson-link-present-1024x768.png")
        page.keyboard.press("Space")
        on_step(page, 2)
        assert page.evaluate("document.documentElement.classList.contains('sv-present-mode')")
        box = page.locator("#sv-recorded").bounding_box()
        assert box is not None and box["width"] <= 1024
        assert MODEL_THREAD.calls == calls
    finally:
        context.close()


def test_the_handout_opens_with_no_network(browser, lesson_url, lesson_id, tmp_path) -> None:
    context, page = open_link(browser, lesson_url, f"?lesson={lesson_id}", 1280, 720)
    try:
        on_step(page, 1)
        page.click("#sv-handout")
        link = page.locator("#sv-handout-file a").first
        link.wait_for(timeout=120_000)
        with page.expect_download() as got:
            link.click()
        path = tmp_path / "handout.html"
        got.value.save_as(path)
    finally:
        context.close()
    text = path.read_text(encoding="utf-8")
    assert "http://" not in text.split("<script", 1)[0]  # no stylesheet or font fetched
    offline = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
    asked: list[str] = []

    def refuse(route) -> None:
        if not route.request.url.startswith("file://"):
            asked.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    try:
        page = offline.new_page()
        page.route("**/*", refuse)
        page.goto(path.as_uri())
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=120_000)
        assert page.locator(".sv-tok[class*='sv-accepted']").count() > 0
        assert page.locator(".js-plotly-plot").count() >= 4  # speed, sweep, checks
        headings = page.locator("h2").all_inner_texts()
        assert [h.split(": ", 1)[1] for h in headings] == [s.title for s in STEPS]
        assert "min(1, p/q)" in page.inner_text("table.decisions")
        assert asked == [], asked
        shot(page, "lesson-link-handout.png")
    finally:
        offline.close()
