"""Untouched Runs in Chromium on the offline pair, with bursts of CPU load beside the app.

    PYTHONPATH=. .venv/bin/python scripts/burst_runs.py [--runs 4] [--no-load] [--shots DIR]

Serves app.py's app in a process of its own, and beside it a load process that alternates
busy and idle spells of 0.5 to 3 s each (uniform, its own seeded generator) on one core, as
other visitors of a shared Space make. Opens the page in Chromium, presses Run with nothing
touched, waits for the run to end, and reads the speed line above the tokens
(#sv-speedline: tokens per target call, the measured speedup with its spread, the
prediction) and the status line, for each of --runs runs. Prints one line per run, then
the largest over the smallest stated speedup.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import re
import time
from pathlib import Path

from scripts.class_link import serve_app  # run from the checkout's root, PYTHONPATH=.
from tests.conftest import CHROMIUM, CHROMIUM_ARGS


def bursts(seed: int, stop: mp.Event) -> None:
    """Busy, then idle, 0.5 to 3 s each, until stopped."""
    rng = random.Random(seed)
    while not stop.is_set():
        end = time.perf_counter() + rng.uniform(0.5, 3.0)
        x = 0
        while time.perf_counter() < end:
            x += 1
        stop.wait(rng.uniform(0.5, 3.0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--port", type=int, default=7931)
    ap.add_argument("--no-load", action="store_true", help="no load process beside the app")
    ap.add_argument("--shots", type=Path, help="save a screenshot after each run here")
    args = ap.parse_args()
    server, url = serve_app(args.port)
    stop = mp.Event()
    load = None
    try:
        if not args.no_load:
            load = mp.Process(target=bursts, args=(0, stop), daemon=True)
            load.start()
        from playwright.sync_api import sync_playwright

        stated = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.goto(url)
            page.wait_for_selector("#sv-run", timeout=120_000)
            for i in range(args.runs):
                before = page.inner_text("#sv-status")
                page.click("#sv-run")
                page.wait_for_function(  # this Run has begun: the previous one's line is gone
                    "(old) => (document.querySelector('#sv-status')?.innerText || '') !== old",
                    arg=before,
                    timeout=120_000,
                )
                page.wait_for_function(
                    "() => /done|error/.test(document.querySelector('#sv-status')"
                    "?.innerText || '')",
                    timeout=600_000,
                )
                line = page.inner_text("#sv-speedline").replace("\n", " ")
                status = page.inner_text("#sv-status").replace("\n", " ")
                m = re.search(r"speedup\s+([\d.]+)x", line)
                stated.append(float(m[1]) if m else float("nan"))
                print(f"run {i + 1}: {line} | {status[:160]}", flush=True)
                if args.shots:
                    args.shots.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(args.shots / f"run{i + 1}.png"))
            browser.close()
        good = [s for s in stated if s == s]
        if good:
            print(f"largest / smallest stated speedup: {max(good) / min(good):.2f}")
    finally:
        stop.set()
        if load is not None:
            load.join(5)
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
