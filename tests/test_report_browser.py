"""The Prompt set tab in a real browser (Debian's chromium through Playwright) on ui_url:
tiny networks over the offline pair's tokenizer (the offline pair itself while
SPECVIZ_SCREENSHOT_DIR is set). One small upload runs to its end, with its figures and
files; a malformed file is refused with one line on the page while the app keeps serving."""

from __future__ import annotations

import json

import pytest

from tests.test_browser import open_tab, opened

pytestmark = pytest.mark.browser

STATUS = "#sv-report-status"


def wait_status(page, text: str, timeout: int = 180_000) -> None:
    page.wait_for_function(
        f"document.querySelector('{STATUS}').innerText.includes({json.dumps(text)})",
        timeout=timeout,
    )


def upload(page, path) -> None:
    """Choose a file through the upload area's own file chooser."""
    with page.expect_file_chooser() as chooser:
        page.click("#sv-report-file button.upload-container")
    chooser.value.set_files(str(path))


def clear_upload(page) -> None:
    page.click("#sv-report-file button[aria-label='Clear']")


def test_an_upload_runs_to_a_report_and_a_bad_file_is_refused(browser, ui_url, tmp_path):
    good = tmp_path / "two.jsonl"
    lines = [
        {"prompt": "Translate into French: good morning.", "category": "translation"},
        {"prompt": "What is 2 + 3? <b>Explain</b>.", "category": "math", "id": "sum"},
    ]
    good.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": "unclosed\n')
    with opened(browser, ui_url, 1400, 1000) as page:
        page.fill("#sv-max-new input[type=number]", "4")
        page.press("#sv-max-new input[type=number]", "Enter")
        open_tab(page, "Prompt set")
        upload(page, bad)
        wait_status(page, "refused: line 2: not JSON")
        assert page.locator(f"{STATUS}").inner_text().count("\n") == 0  # one line
        clear_upload(page)
        upload(page, good)
        wait_status(page, "2 prompts in 2 categories")  # the app still serves
        page.click("#sv-report-run")
        wait_status(page, "report done: 2 prompts")
        for name in ("acceptance", "speedup", "conditional", "histogram", "kinds"):
            page.wait_for_selector(f"#sv-report-{name} .js-plotly-plot", timeout=30_000)
        table = page.inner_text("#sv-report-table")
        assert "translation" in table and "math" in table and "overall" in table
        links = page.locator("#sv-report-files a")
        links.first.wait_for(timeout=30_000)
        hrefs = [links.nth(i).get_attribute("href") or "" for i in range(links.count())]
        assert any("report.html" in h for h in hrefs) and any("report.json" in h for h in hrefs)
        report = page.request.get(next(h for h in hrefs if "report.json" in h)).json()
        assert list(report["deterministic"]["categories"]) == ["translation", "math"]
        assert page.evaluate("() => document.querySelectorAll('#sv-report-table b b').length") == 0
        assert page.dialogs == []
