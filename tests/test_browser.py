"""The app in a real browser: Debian's chromium driven by Playwright. The untouched run is
on the offline pair, end to end against the command line; the page's own logic runs on
tiny networks over the offline pair's tokenizer (conftest's ui_url), whose runs take no time.

Set SPECVIZ_SCREENSHOT_DIR to also write the README's screenshots there.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from specviz import ui
from tests.conftest import slow_target

pytestmark = pytest.mark.browser

MARKUP = "Repeat: <img src=x onerror=alert(1)> and <script>alert(1)</script>"


@contextmanager
def opened(browser, url: str, width: int, height: int, query: str = ""):
    """A page of the app at width x height in a new context of the module's browser, once
    the pair is ready."""
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = context.new_page()
        page.dialogs = []  # type: ignore[attr-defined]
        page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
        page.goto(url + query)
        page.wait_for_selector("#sv-models table", timeout=120_000)  # the pair is ready
        yield page
    finally:
        context.close()


@pytest.fixture()
def page(browser, ui_url):
    with opened(browser, ui_url, 1500, 1100) as page:
        yield page


@pytest.fixture()
def real_page(browser, app_url):
    """A page of the app on the offline pair."""
    with opened(browser, app_url, 1500, 1100) as page:
        yield page


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


# gradio's tracker on the status line, hidden once the event's answer has come: the page's
# "done" comes with the run's last frame, a moment before the answer, and gradio drops a
# click on Run while the Run before it is unanswered (a click event fires once at a time)
ANSWERED = (
    "(() => { const t = document.querySelector('#sv-status [data-testid=status-tracker]');"
    " return !t || t.classList.contains('hide'); })()"
)


def press_run(page) -> None:
    """Press Run and wait until the run is done and gradio has its answer (so that Run
    may be pressed again)."""
    t0 = time.perf_counter()
    page.click("#sv-run")
    page.wait_for_selector("#sv-tokens [data-status]", timeout=120_000)
    print(f"first token span in the browser {time.perf_counter() - t0:.2f} s after Run")
    page.wait_for_function(
        "document.querySelector('#sv-status').innerText.includes('done')", timeout=300_000
    )
    page.wait_for_function(ANSWERED, timeout=60_000)


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
    # every handler the click reached ran: no error toast, no "Error" badge
    page.wait_for_timeout(1000)
    assert page.locator(".toast-body.error").count() == 0
    assert page.get_by_text("Error", exact=True).count() == 0
    page.locator("#sv-inspector").screenshot(path=str(shots[1]))
    assert all(p.stat().st_size > 10_000 for p in shots)
    target = os.environ.get("SPECVIZ_SCREENSHOT_DIR")
    if target:
        page.locator("#sv-token-row").screenshot(path=str(Path(target) / "token-view.png"))
        page.locator("#sv-inspector").screenshot(path=str(Path(target) / "inspector.png"))
    open_tab(page, "Speed")
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
    open_tab(page, "Acceptance")  # the log's prompt column is text too
    page.locator("#sv-log").filter(has_text="Repeat: <img src=x").wait_for(timeout=30_000)
    assert page.evaluate("() => document.querySelectorAll('img[src=\"x\"]').length") == 0
    assert page.dialogs == []


def open_tab(page, name: str) -> None:
    """Select a tab (the tab row wraps: every tab has its button on the page)."""
    page.get_by_role("tab", name=name, exact=True).click()


def exported_trace(page, name: str = "specviz-trace.json") -> dict:
    """The session's trace through the page's own Export button."""
    open_tab(page, "Data")
    page.get_by_role("button", name="Export trace (JSON) and rounds (CSV)").click()
    link = page.locator(f"a[href*='{name}']").first
    link.wait_for(timeout=30_000)
    return page.request.get(link.get_attribute("href")).json()


CLI_TOKENS = 24  # the reference run's length: the page's run is compared on its prefix


def cli_trace(capsys) -> dict:
    """`python -m specviz generate --prompt DEFAULT_PROMPT --json --max-new-tokens 24`, in
    process: every other setting is the command line's default."""
    from specviz.cli import main as cli

    capsys.readouterr()
    argv = ["generate", "--prompt", ui.DEFAULT_PROMPT, "--json"]
    assert cli.main([*argv, "--max-new-tokens", str(CLI_TOKENS)]) == 0
    return json.loads(capsys.readouterr().out)


def cli_default(name: str):
    """The command line's default for one setting (no model loaded)."""
    from specviz.cli import main as cli

    parser = cli.build_parser()
    return vars(parser.parse_args(["generate", "--prompt", "x"]))[name]


def test_an_untouched_run_uses_the_cli_defaults(real_page, capsys) -> None:
    page = real_page
    press_run(page)  # nothing touched: the controls as the page first sends them
    trace = exported_trace(page)
    reference = cli_trace(capsys)
    # every setting, field by field: the next control whose browser value differs from
    # its Python default fails here by name (the reference run is shorter, by its flag)
    assert trace["settings"].keys() == reference["settings"].keys()
    for key, value in reference["settings"].items():
        if key == "max_new_tokens":
            assert trace["settings"][key] == cli_default("max_new_tokens")
        else:
            assert trace["settings"][key] == value, key
    assert trace["prompt"] == reference["prompt"] == ui.DEFAULT_PROMPT
    assert trace["models"] == reference["models"]
    # the same run: a round drafts min(gamma, budget left - 1) tokens, so every round that
    # starts at most CLI_TOKENS - gamma - 1 tokens in drafts, draws and decides as in the
    # page's longer run; the tokens those rounds emit are the page's, token for token
    same = CLI_TOKENS - trace["settings"]["gamma"] - 1
    assert len(reference["token_ids"]) > same and len(trace["token_ids"]) > same
    assert trace["token_ids"][:same] == reference["token_ids"][:same]
    rate = trace["stats"]["acceptance_rate"]
    open_tab(page, "Speed")
    table = page.inner_text("#sv-table1")
    print(f"untouched run: acceptance {rate:.3f}; {table}")
    note = page.inner_text("#sv-exact-note")
    assert "temperature 0.7 and top-p 0.9" in note
    target = os.environ.get("SPECVIZ_SCREENSHOT_DIR")
    if target:
        page.screenshot(path=str(Path(target) / "untouched-run.png"), full_page=True)
    assert page.dialogs == []


def wait_text(page, selector: str, text: str, timeout: int = 60_000) -> None:
    page.locator(selector).filter(has_text=text).first.wait_for(timeout=timeout)


def test_shading_race_log_calibration_and_reload(page) -> None:
    generate(page, ui.PRESETS["chat"]["prompt"], 16, draft_temperature="1.8")
    first = page.locator("#sv-tokens [data-pos]").count()
    # overlap shading: every shown draft carries its overlap, and the legend appears
    page.check("#sv-shade input")
    page.wait_for_selector("#sv-tokens [data-overlap]", timeout=30_000)
    page.wait_for_selector("#sv-overlap-legend .sv-overlap-legend", timeout=30_000)
    shaded = page.locator("#sv-tokens [data-overlap]").count()
    drafts = page.locator("#sv-tokens [data-status=accepted], #sv-tokens [data-status=rejected]")
    assert shaded == drafts.count() > 0
    # the race replay fills both sides; at 2x a short run ends within seconds
    open_tab(page, "Speed")
    page.locator("#sv-race-speed label", has_text="2x").click()
    page.click("#sv-race-play")
    wait_text(page, "#sv-race", "Replay of measured timings at 2x")
    assert page.locator("#sv-race .sv-race-side").count() == 2
    page.wait_for_function(
        "[...document.querySelectorAll('#sv-race .sv-race-tok')].every("
        "e => getComputedStyle(e).opacity === '1')",
        timeout=60_000,
    )
    # the log, its chart and the calibration after one run
    open_tab(page, "Acceptance")
    wait_text(page, "#sv-log", "spec + ar")
    wait_text(page, "#sv-calib-summary", "verified drafts with a drawn u over 1 run(s)")
    for chart in ("#sv-log-chart", "#sv-calib"):
        page.wait_for_selector(f"{chart} .js-plotly-plot", timeout=30_000)
    assert "calibrated" in page.inner_text("#sv-calib")
    # a second, shorter run; then run 1 loads back, still shaded
    page.fill("#sv-max-new input[type=number]", "8")
    page.press("#sv-max-new input[type=number]", "Enter")
    press_run(page)
    wait_text(page, "#sv-calib-summary", "over 2 run(s)")
    assert page.locator("#sv-tokens [data-pos]").count() < first
    page.click("#sv-log-pick input")
    page.get_by_role("option", name="1", exact=True).click()
    page.click("#sv-log-load")
    wait_text(page, "#sv-status", "run 1 loaded")
    assert page.locator("#sv-tokens [data-pos]").count() == first
    assert page.locator("#sv-tokens [data-overlap]").count() == shaded
    page.click("#sv-log-export")
    link = page.locator("#sv-log-file a[href*='specviz-runs.csv']").first
    link.wait_for(timeout=30_000)
    lines = page.request.get(link.get_attribute("href")).text().strip().splitlines()
    assert lines[0].startswith("run,method,changed") and len(lines) == 3
    assert page.dialogs == []


def test_step_narration_and_a_measured_sweep(page) -> None:
    page.fill("#sv-max-new input[type=number]", "8")
    page.press("#sv-max-new input[type=number]", "Enter")
    page.click("#sv-step")
    wait_text(page, "#sv-narration", "One target call scored")
    assert page.locator("#sv-narration li").count() >= 3
    open_tab(page, "Theory")
    for gamma in ("4", "8"):  # keep gammas 1 and 2
        page.locator("#sv-sweep-gammas label", has_text=gamma).click()
    page.fill("#sv-sweep-reps input[type=number]", "1")
    page.press("#sv-sweep-reps input[type=number]", "Enter")
    page.click("#sv-sweep-run")
    wait_text(page, "#sv-sweep-status", "sweep done: 3 runs, 2 cells", timeout=180_000)
    page.wait_for_selector("#sv-sweep-plot .js-plotly-plot", timeout=30_000)
    chart = page.inner_text("#sv-sweep-plot")
    assert "measured" in chart and "formula" in chart
    assert page.inner_text("#sv-sweep-table").count("\n") == 2
    assert page.dialogs == []


def test_a_closed_tab_frees_the_model_thread(browser, ui_url, ui_pair) -> None:
    """A tab closed during a long Run: the model thread stops that run within a round or
    two of target calls (counted, not timed: this machine's load sets a round's time), and
    the next visitor's Run starts and finishes. Each target call takes 0.3 s or more
    meanwhile, so that the 400 tokens are still running when the tab closes."""
    from specviz.modelthread import MODEL_THREAD

    calls: list[int] = []
    hook = ui_pair.target.model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        with slow_target(ui_pair, 0.3):
            with opened(browser, ui_url, 1280, 900) as gone:
                gone.fill("#sv-max-new input[type=number]", "400")
                gone.press("#sv-max-new input[type=number]", "Enter")
                gone.click("#sv-run")
                gone.wait_for_selector("#sv-tokens [data-status]", timeout=120_000)
                assert not MODEL_THREAD.idle()
            at_close = len(calls)
            deadline = time.monotonic() + 120
            while not MODEL_THREAD.idle():
                assert time.monotonic() < deadline, "the closed tab's run kept the model busy"
                time.sleep(0.05)
        # the round in progress, the one that told gradio the page had gone, one more at
        # most; the rest of 400 tokens and the whole baseline never ran
        assert len(calls) - at_close <= 3, (at_close, len(calls))
    finally:
        hook.remove()
    with opened(browser, ui_url, 1280, 900) as page:
        page.fill("#sv-max-new input[type=number]", "8")
        page.press("#sv-max-new input[type=number]", "Enter")
        page.click("#sv-run")
        page.wait_for_function(
            "document.querySelector('#sv-status').innerText.includes('done')", timeout=120_000
        )
        assert "done (" in page.inner_text("#sv-status")
        assert page.dialogs == []
