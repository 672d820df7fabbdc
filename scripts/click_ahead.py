"""Click ahead through the lesson in Chromium on the offline pair, with a CPU hog beside the app.

    PYTHONPATH=. .venv/bin/python scripts/click_ahead.py [--tries 10] [--no-load]

Serves app.py's app in a process of its own and, once it answers, a process that keeps one
core busy the whole time. Each try opens the page in a new tab, presses the lesson's Next
once, twice or three times (by turn), then the step's button 1.5 to 2.5 s later (uniform,
a seeded generator), before a busy server has necessarily answered Next. It waits for the
step moved to and its statement, counts the "Error" badges on the page and closes the tab.
Prints one line per try and the total count of badges.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time

from scripts.class_link import serve_app  # run from the checkout's root, PYTHONPATH=.
from tests.conftest import CHROMIUM, CHROMIUM_ARGS

# a leaf element whose whole text is "Error": gradio's error badge
ERRORS_JS = (
    "() => [...document.querySelectorAll('*')].filter(e => e.children.length == 0"
    " && /^\\s*Error\\s*$/.test(e.textContent)).length"
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=10)
    ap.add_argument("--port", type=int, default=7933)
    ap.add_argument("--no-load", action="store_true", help="no CPU hog beside the app")
    args = ap.parse_args()
    server, url = serve_app(args.port)
    hog = None
    rng = random.Random(1)
    try:
        if not args.no_load:
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        from playwright.sync_api import sync_playwright

        total = 0
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for i in range(args.tries):
                tab = browser.new_context(viewport={"width": 1280, "height": 720})
                page = tab.new_page()
                page.goto(url)
                page.wait_for_selector("#sv-models table", timeout=300_000)
                nexts = 1 + i % 3
                for _ in range(nexts):
                    page.click("#sv-lesson-next")
                wait = rng.uniform(1.5, 2.5)
                time.sleep(wait)
                page.click("#sv-lesson-go")
                t0 = time.perf_counter()
                shown = f"step {1 + nexts} of"
                page.locator("#sv-lesson").filter(has_text=shown).wait_for(timeout=60_000)
                page.locator("#sv-lesson-said .sv-lesson-said").wait_for(timeout=600_000)
                errors = page.evaluate(ERRORS_JS)
                total += errors
                said = page.inner_text("#sv-lesson-said").replace("\n", " ")[:100]
                print(
                    f"try {i + 1}: Next x{nexts}, the step's button {wait:.1f} s later; "
                    f"step {1 + nexts} said in {time.perf_counter() - t0:.0f} s; "
                    f"Error badges {errors}; {said!r}",
                    flush=True,
                )
                tab.close()
            browser.close()
        print(f"Error badges in {args.tries} tries: {total}")
    finally:
        if hog is not None:
            hog.kill()
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
