"""The queue in a real browser (Debian's chromium through Playwright), on tiny networks
over the offline pair's tokenizer whose target is slowed while one visitor's run holds the
queue: a second visitor's Run shows its place in the queue, the seconds waited and gradio's
estimate on the status line; a third, with the queue full, gets one line saying so.

Set SPECVIZ_SCREENSHOT_DIR to also write queue-waiting.png and queue-full.png there."""

from __future__ import annotations

import re

import pytest

from specviz import ui
from tests.conftest import need_chromium, slow_target
from tests.test_browser import opened, press_run
from tests.test_share_browser import shot

pytestmark = pytest.mark.browser

QUEUE_SIZE = 1  # one Run may wait behind the running one; the next is turned away


@pytest.fixture(scope="module")
def queued_url(text_pair):
    """The app on text_pair, one model-running event at a time, at most one waiting. It
    opens once the process's model thread is idle: a run an earlier module's closed tab
    left going there would hold this app's pair loading behind it."""
    import time

    from specviz.modelthread import MODEL_THREAD

    need_chromium()
    deadline = time.monotonic() + 400
    while not MODEL_THREAD.idle():
        assert time.monotonic() < deadline, "the model thread stayed busy for 400 s"
        time.sleep(0.2)
    demo = ui.build_app(loader=lambda name, dtype: text_pair, pairs=["default"])
    demo.queue(default_concurrency_limit=1, max_size=QUEUE_SIZE).launch(
        prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **ui.launch_options()
    )
    yield demo.local_url
    demo.close()


def set_max_new(page, n: int) -> None:
    page.fill("#sv-max-new input[type=number]", str(n))
    page.press("#sv-max-new input[type=number]", "Enter")


def test_a_waiting_run_shows_its_place_and_a_full_queue_says_so(
    browser, queued_url, text_pair
) -> None:
    with (
        opened(browser, queued_url, 1500, 1000) as first,
        opened(browser, queued_url, 1500, 1000) as second,
        opened(browser, queued_url, 1500, 1000) as third,
    ):
        for page in (first, second, third):
            set_max_new(page, 40)
        press_run(first)  # a finished Run gives gradio its estimate of the next
        with slow_target(text_pair, 0.6):  # about 24 s of target calls per run
            first.click("#sv-run")
            first.locator("#sv-status").filter(has_text="speculative: round").wait_for(
                timeout=30_000
            )
            second.click("#sv-run")
            status = second.locator("#sv-status")
            status.filter(has_text="queue: 1/1").wait_for(timeout=30_000)
            line = status.inner_text()
            # its place, the seconds it has waited, and the estimate
            assert re.search(r"queue: 1/1 \| \d+\.\d/\d+\.\ds", line), line
            shot(second, "queue-waiting.png")
            third.click("#sv-run")
            toast = third.locator(".toast-body")
            toast.filter(has_text="currently busy").wait_for(timeout=30_000)
            assert toast.count() == 1
            assert "This application is currently busy. Please try again." in toast.inner_text()
            shot(third, "queue-full.png")
        # the waiting Run is served once the first is done (the target at its own speed
        # again: the queue's lines are read, nothing needs the runs to last any more)
        second.locator("#sv-status").filter(has_text="done").wait_for(timeout=120_000)
