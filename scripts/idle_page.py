"""What an open page of the app costs its browser while it does nothing: the app served on
the tests' tiny pair over the offline pair's tokenizer, one page opened in Debian's
chromium (headless, through Playwright), and the CPU seconds of every chromium process over
SECONDS of idling once the pair is ready, with the requestAnimationFrame calls the page made
meanwhile by their caller, and the server's CPU seconds over the same time (this process:
the app's threads; Playwright's client here only waits). With --drop-tracker-loop, a script
run before gradio's drops the frames gradio's status tracker asks for while no tracker is
shown (a measurement of that loop's share only: the app cannot do this, see docs/app.md).
With --gradio-polls, the server's queue looks for work as often as gradio's own does
(specviz.ui.blocks spaces those looks; docs/deploying.md).

    PYTHONPATH=. .venv/bin/python scripts/idle_page.py [SECONDS] [--drop-tracker-loop]
        [--gradio-polls]
"""

from __future__ import annotations

import os
import sys
import time

COUNT = """
  window.__frames = {};
  const raf = window.requestAnimationFrame.bind(window);
  window.requestAnimationFrame = (cb) => {
    const line = (new Error().stack || '').split('\\n')[2] || '?';
    const at = line.replace(/https?:\\/\\/[^/]+/g, '');
    const stale = at.includes('statustracker') &&
      !document.querySelector('[data-testid=status-tracker]:not(.hide)');
    if (DROP && stale) return 0;
    window.__frames[at.trim()] = (window.__frames[at.trim()] || 0) + 1;
    return raf(cb);
  };
"""


def chromium_cpu_s(seen: dict[str, tuple[str, float, float]]) -> float:
    """The CPU seconds chromium's processes gained since seen was first sampled (read again
    now; scripts/cpu_by_process.py's reading of /proc)."""
    from scripts.cpu_by_process import sample

    sample(seen, first=False)
    return sum(
        last - at_first
        for kind, at_first, last in seen.values()
        if kind.startswith("chromium") or "--type=" in kind
    )


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    seconds = float(args[0]) if args else 10.0
    drop = "--drop-tracker-loop" in sys.argv
    gradio_polls = "--gradio-polls" in sys.argv
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from playwright.sync_api import sync_playwright

    from scripts.cpu_by_process import sample
    from specviz.threads import cpu_info
    from tests.conftest import CHROMIUM, CHROMIUM_ARGS, serve
    from tests.tiny import text_pair

    torch.set_num_threads(1)
    demo = serve(text_pair())
    if gradio_polls:  # gradio 6.31's own waits, as specviz.ui.blocks found them
        demo._queue.sleep_when_free, demo._queue.progress_update_sleep_when_free = 0.001, 0.01
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_context(viewport={"width": 1500, "height": 1000}).new_page()
            page.add_init_script(COUNT.replace("DROP", "true" if drop else "false"))
            page.goto(demo.local_url)
            page.wait_for_selector("#sv-models table", timeout=120_000)
            time.sleep(2)  # the page's first drawing is over
            page.evaluate("() => { window.__frames = {}; }")
            seen: dict[str, tuple[str, float, float]] = {}
            sample(seen, first=True)
            own = os.times()
            time.sleep(seconds)
            used = chromium_cpu_s(seen)
            now = os.times()
            server = now.user + now.system - own.user - own.system
            frames = page.evaluate("() => window.__frames")
            browser.close()
    finally:
        demo.close()
    print(f"CPU: {cpu_info()[0]}, {len(os.sched_getaffinity(0))} cores")
    loop = "dropped" if drop else "kept"
    print(f"idle page, gradio's tracker loop {loop}: chromium {used:.2f} core-s over {seconds:g} s")
    polls = "gradio's own" if gradio_polls else "specviz's"
    print(f"idle server, the queue's looks for work {polls}: {server:.2f} core-s")
    for at, n in sorted(frames.items(), key=lambda kv: -kv[1])[:5]:
        print(f"  {n:5d} animation frames asked by {at}")


if __name__ == "__main__":
    main()
