"""The guided lesson in a real browser (Debian's chromium through Playwright): at 1280x720
the lesson and Run are on screen when the page opens, and step 1's button runs and states
the run's numbers; presses queued behind a run or a load keep to their own steps; step 6
catches the wrong rule on the offline pair and charts both checks; the tabs a step's run
filled show it; one click restores the controls a step changed. The steps other than 6
run on conftest's ui_pair (tiny networks over the offline pair's tokenizer, unless the
screenshots are being written).

Set SPECVIZ_SCREENSHOT_DIR to also write lesson-1280x720.png there.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time

import pytest

from tests.conftest import need_chromium, serve, slow_target
from tests.test_browser import open_tab, opened
from tests.test_layout_browser import inside, shot

pytestmark = pytest.mark.browser


def test_the_lesson_and_run_on_screen_and_step_one_states_its_run(
    browser, ui_url, short_url
) -> None:
    # runs capped at 24 tokens, unless the README's screenshot is being written
    url = ui_url if os.environ.get("SPECVIZ_SCREENSHOT_DIR") else short_url
    with opened(browser, url, 1280, 720) as page:
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
        assert not page.locator("#sv-lesson-changed").is_visible()  # the defaults: no line
        page.evaluate("window.scrollTo(0, 0)")
        page.mouse.move(0, 0)
        inside(page, "#sv-lesson")
        inside(page, "#sv-run")
        shot(page, "lesson-1280x720.png")
        # the tabs the step's run filled show it, though none was open while it ran
        open_tab(page, "Theory")
        for chart in ("#sv-theory-plot", "#sv-projection-plot"):
            page.wait_for_selector(f"{chart} .js-plotly-plot", timeout=30_000)
        open_tab(page, "Decision")
        # Next shows step 2 with its own button; the first step's statement waits there.
        page.click("#sv-lesson-next")
        page.locator("#sv-lesson").filter(has_text="step 2 of 7").wait_for(timeout=30_000)
        assert "temperature 1.5" in page.inner_text("#sv-lesson-go")
        page.click("#sv-lesson-prev")
        said.filter(has_text="target calls").wait_for(timeout=30_000)
        assert page.dialogs == []


STEP_ONE = re.compile(r"\d+ tokens from \d+ target calls")
# Text nodes that are a bare false, true or None: a value meant for a control shown as text.
BARE_TEXT = """() => {
  const out = [], walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const t = walk.currentNode.textContent.trim();
    if (["false", "true", "None"].includes(t)) out.push(t);
  }
  return out;
}"""


def no_error_shown(page) -> None:
    """No "Error" badge or toast anywhere, and a status line that is not an error."""
    assert page.get_by_text("Error", exact=True).count() == 0
    assert "sv-status-error" not in page.inner_html("#sv-status")
    assert page.dialogs == []


# The short app's loader waits while LOADS is cleared, as a first load does (LOADING says
# that one has begun): the events a press queues behind it wait in the model queue too.
LOADS, LOADING = threading.Event(), threading.Event()
LOADS.set()


def short_app(pair):
    """The app on `pair` with runs capped at 24 tokens (the lesson's steps keep within the
    deployment's limits), so that two steps' runs stay short."""
    from specviz.config import Limits

    def load(name: str, dtype: str):
        LOADING.set()
        assert LOADS.wait(120), "a held load was never let go"
        return pair

    return serve(pair, loader=load, limits=Limits(max_new_tokens=24))


@pytest.fixture(scope="module")
def short_url(ui_pair):
    demo = short_app(ui_pair)
    yield demo.local_url
    demo.close()


@pytest.fixture(scope="module")
def real_short_url(offline_pair):
    """The short app on the offline pair (step 6's end-to-end test)."""
    need_chromium()
    demo = short_app(offline_pair)
    yield demo.local_url
    demo.close()


def test_clicking_ahead_keeps_each_statement_on_its_own_step(browser, short_url, ui_pair) -> None:
    """Step 1's button, Next while it runs, then step 2's button (queued behind it): step
    1's statement lands on step 1, step 2's on step 2, and nothing shows an error. Each
    target call takes 0.15 s or more meanwhile, so that step 1 is still running when step
    2's button is pressed.

    Set SPECVIZ_SCREENSHOT_DIR to also write lesson-click-ahead.png there (the end state)."""
    from specviz.modelthread import MODEL_THREAD

    with slow_target(ui_pair, 0.15) as slowed, opened(browser, short_url, 1280, 720) as page:
        page.click("#sv-lesson-go")
        # the busy line is in the panel (gradio may hide an output while its event runs)
        page.wait_for_function(
            "() => document.querySelector('#sv-lesson-said').textContent"
            ".includes('step 1: running')",
            timeout=120_000,
        )
        page.click("#sv-lesson-next")
        page.locator("#sv-lesson").filter(has_text="step 2 of 7").wait_for(timeout=30_000)
        assert "temperature 1.5" in page.inner_text("#sv-lesson-go")
        assert not MODEL_THREAD.idle(), "step 1 still runs when step 2's button is pressed"
        with page.expect_response("**/queue/join*"):  # the server holds the press
            page.click("#sv-lesson-go")
        assert not MODEL_THREAD.idle(), "step 2's press is queued behind step 1's run"
        slowed.release()  # nothing needs the runs to last any more
        said = page.locator("#sv-lesson-said .sv-lesson-said")
        # Step 2 is shown: its own statement arrives there, after step 1's run ended.
        said.filter(has_text="draft temperature 1.5").wait_for(timeout=900_000)
        assert not STEP_ONE.search(said.inner_text())
        page.wait_for_function(
            "() => !document.querySelector('#sv-status .sv-status-busy')", timeout=60_000
        )
        no_error_shown(page)
        page.evaluate("window.scrollTo(0, 0)")
        page.mouse.move(0, 0)
        shot(page, "lesson-click-ahead.png")
        # Step 1 kept its own statement.
        page.click("#sv-lesson-prev")
        page.locator("#sv-lesson").filter(has_text="step 1 of 7").wait_for(timeout=30_000)
        said.filter(has_text=STEP_ONE).wait_for(timeout=30_000)
        assert "draft temperature 1.5" not in said.inner_text()
        no_error_shown(page)
        # step 2 left the draft's own temperature on: a line says so; one click restores
        changed = page.locator("#sv-lesson-changed")
        changed.filter(has_text="draft temperature 1.5 (default off)").wait_for(timeout=30_000)
        assert page.is_checked("#sv-own-draft-temp input")
        page.click("#sv-lesson-restore")
        changed.wait_for(state="hidden", timeout=30_000)
        assert not page.is_checked("#sv-own-draft-temp input")
        assert "restored to the page's defaults" in page.inner_text("#sv-status")
        assert page.evaluate(BARE_TEXT) == []


def test_next_then_the_button_before_the_server_answers_next(browser, short_url, ui_pair) -> None:
    """A busy server answers Next late: here its answers (the requests to show the step
    moved to) are held until the next step's button has been pressed, 1.5 to 2.5 s after
    Next, as on two loaded cores. The press carries out the step moved to (step 2; then
    step 4 after two quick Nexts, none lost), each statement lands on its own step, and no
    "Error" shows. Each target call takes 0.15 s or more, so that a run outlasts the
    presses around it."""
    held: list = []
    holding = [False]

    def hold(route) -> None:
        if holding[0]:
            held.append(route)
        else:
            route.continue_()

    def answered_late() -> None:
        """Once Next has asked the server, let everything held through."""
        deadline = time.monotonic() + 30
        while not held and time.monotonic() < deadline:
            page.wait_for_timeout(100)
        assert held, "Next never asked the server to show its step"
        holding[0] = False
        while held:
            held.pop(0).continue_()

    with slow_target(ui_pair, 0.15) as slowed, opened(browser, short_url, 1280, 720) as page:
        page.route("**/run/predict*", hold)
        said = page.locator("#sv-lesson-said .sv-lesson-said")
        for steps, shown, statement in (
            (1, "step 2 of 7", "draft temperature 1.5"),
            (2, "step 4 of 7", "This run's target"),
        ):
            holding[0] = True
            slowed.seconds = 0.15
            for _ in range(steps):
                page.click("#sv-lesson-next")
            page.wait_for_timeout(random.uniform(1500, 2500))
            page.click("#sv-lesson-go")  # before the server has answered Next
            answered_late()
            page.locator("#sv-lesson").filter(has_text=shown).wait_for(timeout=30_000)
            slowed.release()  # the presses are in: the run may end at its own speed
            said.filter(has_text=statement).wait_for(timeout=300_000)
        page.wait_for_function(
            "() => !document.querySelector('#sv-status .sv-status-busy')", timeout=60_000
        )
        no_error_shown(page)
        # step 2 kept its own statement; step 3 (never pressed) has none
        page.click("#sv-lesson-prev")
        page.locator("#sv-lesson").filter(has_text="step 3 of 7").wait_for(timeout=30_000)
        assert page.locator("#sv-lesson-said .sv-lesson-said").count() == 0
        page.click("#sv-lesson-prev")
        said.filter(has_text="draft temperature 1.5").wait_for(timeout=30_000)
        no_error_shown(page)


def test_a_press_queued_behind_the_load_runs_the_step_it_was_pressed_on(browser, short_url) -> None:
    """On a page that is still loading its pair: step 1's button, Next 3 s later, step 2's
    button 2 s after Next, all queued behind the load. The first press runs step 1 (the
    step shown when it was pressed, not the one shown when its turn came), the second step
    2, which compares itself with step 1's run; no error anywhere.

    Set SPECVIZ_SCREENSHOT_DIR to also write lesson-click-ahead-queued.png there."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    LOADING.clear()
    LOADS.clear()
    try:
        page = context.new_page()
        page.dialogs = []  # type: ignore[attr-defined]
        page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
        page.goto(short_url)
        assert LOADING.wait(60), "the page's load event never asked for the pair"
        page.click("#sv-lesson-go")
        page.wait_for_timeout(3000)
        page.click("#sv-lesson-next")
        page.locator("#sv-lesson").filter(has_text="step 2 of 7").wait_for(timeout=30_000)
        page.wait_for_timeout(2000)
        page.click("#sv-lesson-go")
        page.wait_for_timeout(500)
        LOADS.set()  # the pair is ready: the load, then both presses, in turn
        said = page.locator("#sv-lesson-said .sv-lesson-said")
        said.filter(has_text="draft temperature 1.5").wait_for(timeout=900_000)
        assert "Against step 1's run" in said.inner_text()  # step 1 ran first, as step 1
        page.wait_for_function(
            "() => !document.querySelector('#sv-status .sv-status-busy')", timeout=60_000
        )
        no_error_shown(page)
        page.evaluate("window.scrollTo(0, 0)")
        page.mouse.move(0, 0)
        shot(page, "lesson-click-ahead-queued.png")
        page.click("#sv-lesson-prev")
        page.locator("#sv-lesson").filter(has_text="step 1 of 7").wait_for(timeout=30_000)
        said.filter(has_text=STEP_ONE).wait_for(timeout=30_000)
        no_error_shown(page)
    finally:
        LOADS.set()
        context.close()


def test_step_six_catches_the_wrong_rule_and_passes_the_rejection_rule(
    browser, real_short_url
) -> None:
    """The distribution-check step as a class meets it: Next to step 6, its button, and the
    statement of both checks on the offline pair; the check's own view fills in too."""
    with opened(browser, real_short_url, 1280, 720) as page:
        for n in range(2, 7):
            page.click("#sv-lesson-next")
            page.locator("#sv-lesson").filter(has_text=f"step {n} of 7").wait_for(timeout=30_000)
        assert "Run both checks" in page.inner_text("#sv-lesson-go")
        t0 = time.perf_counter()
        page.click("#sv-lesson-go")
        said = page.locator("#sv-lesson-said .sv-lesson-said")
        said.filter(has_text="with the rejection rule it").wait_for(timeout=300_000)
        print(f"step 6 in the browser: {time.perf_counter() - t0:.1f} s from its button")
        text = said.inner_text()
        assert re.search(r"With resample-from-p the check fails \(smallest p-value", text), text
        assert re.search(r"with the rejection rule it passes \(smallest p-value", text), text
        page.wait_for_selector("#sv-check-plot .js-plotly-plot", timeout=30_000)
        chart = page.inner_text("#sv-check-plot")  # both checks drawn, each with its verdict
        assert "resample-from-p rule FAILS" in chart and "rejection rule passes" in chart
        page.wait_for_function(
            "() => !document.querySelector('#sv-status .sv-status-busy')", timeout=60_000
        )
        no_error_shown(page)
        assert page.evaluate(BARE_TEXT) == []
        shot(page, "lesson-step6.png")
