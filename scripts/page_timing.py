"""How long the app's views of a long run take to render in Chromium, on the offline pair.

    PYTHONPATH=. .venv/bin/python scripts/page_timing.py [N]   (N new tokens, default 512)

A short run first (16 tokens) pays the page's one-time costs (Plotly's first chart); then a
run of N tokens with Compare on. Reported, from the browser's own clock:

- live frames: the longest main-thread task (PerformanceObserver "longtask") while the runs
  stream, and the page's own server-side "page update per round" figure;
- the final frame: from the status turning "done" (the frame applying) to the DOM settled
  (no mutation for 1 s), and the longest task meanwhile;
- the renderer's main thread over each run, from the click to the DOM settled (Chrome's
  Performance.getMetrics): seconds busy, and of them script, style recalculation and
  layout;
- clicks on the overlap-shading switch, Replay race at 2x and Load run 2 from the log:
  from the click to the DOM settled, and the longest task.

Serves on 127.0.0.1, port PORT (default 7935). Timings depend on the machine's load.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from playwright.sync_api import sync_playwright  # noqa: E402

from specviz import ui  # noqa: E402
from specviz.models import load_pair  # noqa: E402

PROMPT = "Tell me a very long story about a dragon who learns to cook, in many chapters."
OBSERVE = """() => {
  window.sv = {last: performance.now(), done: null, long: []};
  new MutationObserver(() => { window.sv.last = performance.now(); }).observe(document.body,
    {subtree: true, childList: true, characterData: true, attributes: true});
  new PerformanceObserver((l) => l.getEntries().forEach(
    (e) => window.sv.long.push([e.startTime, e.duration]))).observe({entryTypes: ['longtask']});
  const st = document.querySelector('#sv-status');
  new MutationObserver(() => {
    if (window.sv.done === null && st.innerText.includes('done')) {
      window.sv.done = performance.now();
    }
  }).observe(st, {subtree: true, childList: true, characterData: true});
}"""
STATUS = "document.querySelector('#sv-status').innerText"


def settle(page, quiet_ms: int = 1000) -> float:
    """Wait for no DOM mutation during quiet_ms; the time of the last one."""
    page.wait_for_function(f"performance.now() - window.sv.last > {quiet_ms}", timeout=600_000)
    return page.evaluate("window.sv.last")


def longest(page, t0: float, t1: float) -> float:
    tasks = page.evaluate("window.sv.long")
    return max((d for s, d in tasks if s + d >= t0 and s <= t1), default=0.0)


METRICS = {
    "TaskDuration": "busy",
    "ScriptDuration": "script",
    "RecalcStyleDuration": "style",
    "LayoutDuration": "layout",
}


def main_thread(cdp) -> dict[str, float]:
    """The renderer's main-thread seconds so far, by kind (METRICS)."""
    got = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return {name: got[key] for key, name in METRICS.items()}


def run(page, n: int) -> tuple[float, float, float]:
    """Run n tokens: (final frame ms to settle, its longest task, longest task while live)."""
    page.fill("#sv-max-new input[type=number]", str(n))
    page.press("#sv-max-new input[type=number]", "Enter")
    t0 = page.evaluate("performance.now()")
    page.click("#sv-run")
    page.wait_for_function(f"!{STATUS}.includes('done')", timeout=60_000)
    page.evaluate("window.sv.done = null")  # armed once the last run's "done" is gone
    page.wait_for_function("window.sv.done !== null", timeout=900_000)
    last, done = settle(page), page.evaluate("window.sv.done")
    return last - done, longest(page, done, last), longest(page, t0, done - 1)


def click(page, selector: str) -> tuple[float, float]:
    """Click: (ms to the DOM settled, longest task)."""
    settle(page)
    t0 = page.evaluate("performance.now()")
    page.click(selector)
    page.wait_for_function(f"window.sv.last > {t0}", timeout=60_000)
    last = settle(page)
    return last - t0, longest(page, t0, last)


def open_tab(page, name: str) -> None:
    tab = page.get_by_role("tab", name=name)
    if not tab.count():
        page.click("button[aria-label='More tabs']")
        tab = page.locator(".overflow-dropdown button", has_text=name)
    tab.click()


def main(n: int) -> None:
    pair = load_pair("default", dtype="float32", device="cpu")
    demo = ui.build_app(loader=lambda p, d: pair, pairs=["default"])
    port = int(os.environ.get("PORT", "7935"))
    demo.queue().launch(
        prevent_thread_lock=True,
        server_name="127.0.0.1",
        server_port=port,
        quiet=True,
        **ui.launch_options(),
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
        page.goto(demo.local_url)
        page.wait_for_selector("#sv-models table", timeout=300_000)
        page.fill("#sv-prompt textarea", PROMPT)
        page.evaluate(OBSERVE)
        for tokens in (16, n):
            before = main_thread(cdp)
            settled, task, live = run(page, tokens)
            spent = {k: v - before[k] for k, v in main_thread(cdp).items()}
            print(f"{tokens} tokens: {page.inner_text('#sv-status')}")
            print(
                f"  final frame: done -> DOM settled {settled:.0f} ms, longest task "
                f"{task:.0f} ms; longest task while live {live:.0f} ms"
            )
            print(
                "  main thread, click -> settled:",
                ", ".join(f"{k} {v:.2f} s" for k, v in spent.items()),
            )
        print("  token spans:", page.locator("#sv-tokens [data-pos]").count())
        open_tab(page, "Speed")
        line = [s for s in page.inner_text("#sv-summary").splitlines() if "page update" in s]
        print(" ", *line)
        page.locator("#sv-race-speed label", has_text="2x").click()
        for name, selector in (("shading on", "#sv-shade input"), ("race 2x", "#sv-race-play")):
            ms, task = click(page, selector)
            print(f"  {name}: click -> DOM settled {ms:.0f} ms, longest task {task:.0f} ms")
        print("  race token spans:", page.locator("#sv-race .sv-race-tok").count())
        open_tab(page, "Acceptance")
        page.click("#sv-log-pick input")
        page.get_by_role("option", name="2", exact=True).click()
        ms, task = click(page, "#sv-log-load")
        print(f"  load run 2: click -> DOM settled {ms:.0f} ms, longest task {task:.0f} ms")
        browser.close()
    os._exit(0)  # the server's threads need not wind down


if __name__ == "__main__":
    from specviz.threads import cpu_info

    name, flags = cpu_info()
    isa = f"avx512f {'avx512f' in flags}, amx {'amx_tile' in flags}"
    print(f"CPU: {name} ({os.cpu_count()} cores; {isa})")
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 512)
