"""The app in a real browser: Debian's chromium driven by Playwright, on the offline pair.

Set SPECVIZ_SCREENSHOT_DIR to also write the README's screenshots there.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from specviz import ui

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
MARKUP = "Repeat: <img src=x onerror=alert(1)> and <script>alert(1)</script>"


@pytest.fixture(scope="module")
def app_url(offline_pair):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip("Debian's chromium is not installed (scripts/setup.sh --dev installs it)")
    demo = ui.build_app(loader=lambda pair, dtype: offline_pair, pairs=["default"])
    demo.queue().launch(
        prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **ui.launch_options()
    )
    yield demo.local_url
    demo.close()


@pytest.fixture()
def page(app_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.dialogs = []  # type: ignore[attr-defined]
        page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
        page.goto(app_url)
        page.wait_for_selector("#sv-models table", timeout=120_000)  # the pair is ready
        yield page
        browser.close()


def generate(page, prompt: str, max_new: int, draft_temperature: str = "") -> None:
    """Fill the controls, press Run and wait until the run is done."""
    page.fill("#sv-prompt textarea", prompt)
    page.fill("#sv-draft-temp input", draft_temperature)
    page.fill("#sv-max-new input[type=number]", str(max_new))
    page.press("#sv-max-new input[type=number]", "Enter")
    page.fill("#sv-gamma input[type=number]", "2")
    page.press("#sv-gamma input[type=number]", "Enter")
    t0 = time.perf_counter()
    page.click("#sv-run")
    page.wait_for_selector("#sv-tokens [data-status]", timeout=120_000)
    print(f"first token span in the browser {time.perf_counter() - t0:.2f} s after Run")
    page.wait_for_function(
        "document.querySelector('#sv-status').innerText.includes('done')", timeout=300_000
    )


def test_statuses_click_and_inspector(page, tmp_path) -> None:
    # A draft at temperature 1.8 against a target at 1.0 makes rejections near certain;
    # with gamma 2 over 40 tokens, full accepts (bonus tokens) are too.
    generate(page, ui.PRESETS["chat"]["prompt"], 40, draft_temperature="1.8")
    tokens = page.locator("#sv-tokens")
    for status in ("accepted", "rejected", "resampled", "bonus"):
        assert tokens.locator(f"[data-status={status}]").count() > 0, status
    span = tokens.locator("[data-status=rejected]").first
    assert "line-through" in span.evaluate("e => getComputedStyle(e).textDecorationLine")
    shots = [tmp_path / "token-view.png", tmp_path / "inspector.png"]
    page.locator("#sv-tokens").screenshot(path=str(shots[0]))

    span.click()
    verdict = page.locator("#sv-verdict")
    verdict.filter(has_text="rejected: u =").wait_for(timeout=30_000)
    page.wait_for_selector("#sv-insp-plot .js-plotly-plot", timeout=30_000)
    chart = page.inner_text("#sv-insp-plot")
    assert "q (draft)" in chart and "drafted" in chart and "residual" in chart
    page.locator("#sv-inspector").screenshot(path=str(shots[1]))
    assert all(p.stat().st_size > 10_000 for p in shots)
    target = os.environ.get("SPECVIZ_SCREENSHOT_DIR")
    if target:
        page.locator("#sv-token-row").screenshot(path=str(Path(target) / "token-view.png"))
        page.locator("#sv-inspector").screenshot(path=str(Path(target) / "inspector.png"))
    page.get_by_role("tab", name="Live speedup").click()
    summary = page.locator("#sv-summary")
    summary.filter(has_text="page update per round").wait_for(timeout=30_000)
    assert "speedup" in page.inner_text("#sv-speed")
    print(summary.inner_text())
    assert page.dialogs == []


def test_markup_in_the_prompt_renders_as_text(page) -> None:
    generate(page, MARKUP, 6)
    injected = page.evaluate(
        '() => document.querySelectorAll(\'img[src="x"], #sv-tokens script, '
        "#sv-rounds script, #sv-tokens img').length"
    )
    assert injected == 0
    shown = page.inner_text("#sv-tokens .sv-prompt")
    assert "<img" in shown and "<script>alert(1)</script>" in shown.replace("·", " ")
    assert page.dialogs == []
