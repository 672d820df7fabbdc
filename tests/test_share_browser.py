"""A shared run in a real browser (Debian's chromium through Playwright), on tiny networks
over the offline pair's tokenizer: a run shared from one browser context opens in a second
with the same tokens, rounds and decisions and the Speed and Acceptance figures, while the
server's model thread is asked for nothing; presentation mode's Space walks its stored
rounds; a change of control starts a run of the visitor's own; a malformed id and a run no
longer kept are one line each, and the page keeps serving.

Set SPECVIZ_SCREENSHOT_DIR to also write shared-run pages there (share-*.png)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from specviz.modelthread import MODEL_THREAD
from specviz.sharestore import SharedRuns
from tests.conftest import need_chromium, serve
from tests.test_browser import generate, opened

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def share_url(text_pair, tmp_path_factory):
    """The app on text_pair with its shared runs kept in a folder of the test's own."""
    need_chromium()
    store = SharedRuns(tmp_path_factory.mktemp("shared-runs"), max_runs=3)
    demo = serve(text_pair, shared=store)
    yield demo.local_url
    demo.close()


def shot(page, name: str) -> None:
    where = os.environ.get("SPECVIZ_SCREENSHOT_DIR")
    if where:
        page.screenshot(path=str(Path(where) / name), full_page=False)


def token_marks(page) -> list[tuple[str, str]]:
    """Each token span's status and text, in order."""
    return page.eval_on_selector_all(
        "#sv-tokens [data-status]", "els => els.map(e => [e.dataset.status, e.textContent])"
    )


def shared_link(page) -> str:
    page.click("#sv-share")
    link = page.locator("#sv-share-link a")
    link.wait_for(timeout=30_000)
    run_id = link.get_attribute("data-run")
    assert run_id and len(run_id) == 16
    assert link.inner_text().endswith(f"?run={run_id}")
    return run_id


def open_shared(browser, url: str, query: str):
    """A page of the app in a new context, opened on a link; waits for its status line."""
    context = browser.new_context(viewport={"width": 1500, "height": 1100})
    page = context.new_page()
    page.dialogs = []  # type: ignore[attr-defined]
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.goto(url + query)
    return context, page


def test_a_shared_link_shows_the_same_run_and_makes_no_model_call(browser, share_url) -> None:
    with opened(browser, share_url, 1500, 1100) as first:
        generate(first, "Tell me a story about <b>a cat</b> & a dog.", 20, draft_temperature="1.8")
        marks = token_marks(first)
        rounds = first.inner_text("#sv-rounds")
        assert any(s == "rejected" for s, _ in marks) and rounds
        run_id = shared_link(first)
        calls = MODEL_THREAD.calls
        context, page = open_shared(browser, share_url, f"?run={run_id}")
        try:
            page.locator("#sv-status").filter(has_text=f"shared run {run_id}").wait_for(
                timeout=60_000
            )
            assert token_marks(page) == marks
            assert page.inner_text("#sv-rounds") == rounds
            # the markup in the prompt came through as text
            assert page.locator("#sv-tokens b").count() == 0
            assert "<b>a·cat</b>" in page.inner_text("#sv-tokens")
            # every decision opens from the stored trace: the first rejection, as in the first,
            # in the inspector and in the panel beside the tokens
            rejected = page.locator("#sv-tokens [data-status=rejected]").first
            rejected.click()
            page.locator("#sv-verdict").filter(has_text="rejected: u =").wait_for(timeout=30_000)
            where = f"round {int(rejected.get_attribute('data-round')) + 1} · position "
            panel = page.locator("#sv-decision").filter(has_text=where)
            panel.filter(has_text="rejected: u =").wait_for(timeout=30_000)
            page.wait_for_selector("#sv-insp-plot .js-plotly-plot", timeout=30_000)
            page.get_by_role("tab", name="Speed").click()
            page.wait_for_selector("#sv-speed .js-plotly-plot", timeout=30_000)
            assert "speedup" in page.inner_text("#sv-speed")
            shot(page, "share-speed.png")
            page.get_by_role("tab", name="Acceptance").click()
            page.wait_for_selector("#sv-acc-round .js-plotly-plot", timeout=30_000)
            shot(page, "share-acceptance.png")
            assert page.locator(".toast-body.error").count() == 0
            assert page.dialogs == []
            assert MODEL_THREAD.calls == calls, "opening a shared run asked the model thread"
        finally:
            context.close()


def test_presentation_mode_steps_through_a_shared_run_and_a_change_runs_anew(
    browser, share_url
) -> None:
    with opened(browser, share_url, 1500, 1100) as first:
        generate(first, "Count to ten.", 12)
        run_id = shared_link(first)
        n_rounds = first.locator("#sv-rounds tr").count() - 1
    assert n_rounds >= 2
    calls = MODEL_THREAD.calls
    context, page = open_shared(browser, share_url, f"?run={run_id}&mode=present")
    try:
        status = page.locator("#sv-status")
        status.filter(has_text=f"shared run {run_id}").wait_for(timeout=60_000)
        assert page.evaluate("document.documentElement.classList.contains('sv-present-mode')")
        page.mouse.click(5, 5)  # focus on the page, not in a field
        for i in (1, 2):
            shown = status.filter(has_text=f"round {i} of {n_rounds}")
            page.keyboard.press("Space")
            try:
                shown.wait_for(timeout=20_000)
            except PlaywrightTimeout:  # on a busy machine the key can beat the page's handler
                page.mouse.click(5, 5)
                page.keyboard.press("Space")
                shown.wait_for(timeout=60_000)
            assert page.locator("#sv-narration").inner_text().strip()
            # the round's latest decision beside the tokens, read from the stored run
            panel = page.locator("#sv-decision").filter(has_text=f"round {i} · position")
            panel.wait_for(timeout=30_000)
        shot(page, "share-present.png")
        assert MODEL_THREAD.calls == calls, "a Step through a shared run asked the model thread"
        # a change of control: Step starts a run of the visitor's own
        page.click("#sv-present-toggle input")  # leave presentation mode to reach the controls
        page.fill("#sv-gamma input[type=number]", "3")
        page.press("#sv-gamma input[type=number]", "Enter")
        page.click("#sv-step")
        status.filter(has_text="step mode: round 1 done").wait_for(timeout=60_000)
        assert MODEL_THREAD.calls > calls
    finally:
        context.close()


@pytest.mark.parametrize(
    ("query", "line"),
    [
        ("?run=..%2Fetc%2Fpasswd", "not a shared-run link"),
        ("?run=0123456789abcdef", "is no longer kept on this server"),
    ],
)
def test_a_bad_link_is_one_line_and_the_page_serves(browser, share_url, query, line) -> None:
    context, page = open_shared(browser, share_url, query)
    try:
        status = page.locator("#sv-status")
        status.filter(has_text=line).wait_for(timeout=60_000)
        assert len(status.inner_text().strip().splitlines()) == 1
        generate(page, "Hello", 6)  # the page still runs a run of its own
        assert token_marks(page)
    finally:
        context.close()
