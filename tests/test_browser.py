"""The app in a real browser: Debian's chromium driven by Playwright, on the offline pair.

Set SPECVIZ_SCREENSHOT_DIR to also write the README's screenshots there.
"""

from __future__ import annotations

import json
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
    if draft_temperature:
        page.check("#sv-own-draft-temp input")
        page.fill("#sv-draft-temp input[type=number]", draft_temperature)
        page.press("#sv-draft-temp input[type=number]", "Enter")
    page.fill("#sv-max-new input[type=number]", str(max_new))
    page.press("#sv-max-new input[type=number]", "Enter")
    page.fill("#sv-gamma input[type=number]", "2")
    page.press("#sv-gamma input[type=number]", "Enter")
    press_run(page)


def press_run(page) -> None:
    """Press Run and wait until the run is done."""
    t0 = time.perf_counter()
    page.click("#sv-run")
    page.wait_for_selector("#sv-tokens [data-status]", timeout=120_000)
    print(f"first token span in the browser {time.perf_counter() - t0:.2f} s after Run")
    page.wait_for_function(
        "document.querySelector('#sv-status').innerText.includes('done')", timeout=300_000
    )


def test_statuses_click_and_inspector(page, tmp_path) -> None:
    # A draft at temperature 1.8 against a target at 0.7 makes rejections near certain;
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


def open_tab(page, name: str) -> None:
    """Select a tab, through the "More tabs" menu where the tab row overflows."""
    tab = page.get_by_role("tab", name=name)
    if tab.count():
        tab.click()
        return
    page.click("button[aria-label='More tabs']")
    page.locator(".overflow-dropdown button", has_text=name).click()


def exported_trace(page, name: str = "specviz-trace.json") -> dict:
    """The session's trace through the page's own Export button."""
    open_tab(page, "Export and import")
    page.get_by_role("button", name="Export trace (JSON) and rounds (CSV)").click()
    link = page.locator(f"a[href*='{name}']").first
    link.wait_for(timeout=30_000)
    return page.request.get(link.get_attribute("href")).json()


def cli_trace(seed: int, capsys) -> dict:
    """`python -m specviz generate --prompt DEFAULT_PROMPT --json --seed S`, in process."""
    from specviz import cli

    capsys.readouterr()
    assert cli.main(["generate", "--prompt", ui.DEFAULT_PROMPT, "--json", "--seed", str(seed)]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_untouched_run_uses_the_cli_defaults(page, capsys, tmp_path) -> None:
    press_run(page)  # nothing touched: the controls as the page first sends them
    page.screenshot(path=str(tmp_path / "untouched.png"), full_page=True)
    trace = exported_trace(page)
    reference = cli_trace(0, capsys)
    # every setting, field by field: the next control whose browser value differs from
    # its Python default fails here by name
    for key, value in reference["settings"].items():
        assert trace["settings"][key] == value, key
    assert trace["settings"].keys() == reference["settings"].keys()
    assert trace["prompt"] == reference["prompt"] == ui.DEFAULT_PROMPT
    assert trace["models"] == reference["models"]
    # acceptance like the CLI's on the same prompt and seed, within the spread of seeds 0-2
    cli_rates = [reference["stats"]["acceptance_rate"]]
    cli_rates += [cli_trace(s, capsys)["stats"]["acceptance_rate"] for s in (1, 2)]
    rate = trace["stats"]["acceptance_rate"]
    assert min(cli_rates) - 0.1 <= rate <= max(cli_rates) + 0.1, (rate, cli_rates)
    open_tab(page, "Live speedup")
    table = page.inner_text("#sv-table1")
    print(f"untouched run: acceptance {rate:.3f} (CLI seeds 0-2: {cli_rates}); {table}")
    note = page.inner_text("#sv-exact-note")
    assert "temperature 0.7, top-p 0.9, top-k off" in note
    target = os.environ.get("SPECVIZ_SCREENSHOT_DIR")
    if target:
        page.screenshot(path=str(Path(target) / "untouched-run.png"), full_page=True)
    assert page.dialogs == []
