"""A Run's speed while pages of the app are being opened, against the same Run on a quiet
server.

    PYTHONPATH=. .venv/bin/python scripts/pages_beside_run.py [--pages 20] [--repeats 3]

Serves app.py's app on the offline pair in a process of its own. Each repeat makes one
compared run through `/generate` (the defaults, --tokens new tokens, its seed) on a quiet
server, then the same run while --pages page opens go on at once (each as a browser makes it:
the page, its config, then the page's load event through the queue until its views arrive),
and prints both runs' AR and speculative ms/token, the threads each ran on and the rest's
CPU use each met (the trace's machine record), and the ratio of the AR figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid

import httpx

from scripts.class_link import load_event, serve_app  # run from the checkout's root

PROMPT = "Explain in three sentences why the sky is blue."


def open_page(url: str, fn_index: int, values: list, go: threading.Event) -> None:
    """One page open: the HTML, the config, the load event's stream to its end."""
    session = uuid.uuid4().hex[:11]
    go.wait()
    with httpx.Client(timeout=600) as http:
        http.get(f"{url}/").raise_for_status()
        http.get(f"{url}/config").raise_for_status()
        body = {"data": values, "fn_index": fn_index, "session_hash": session, "trigger_id": None}
        http.post(f"{url}/gradio_api/queue/join", json=body).raise_for_status()
        with http.stream("GET", f"{url}/gradio_api/queue/data?session_hash={session}") as sse:
            for line in sse.iter_lines():
                if line.startswith("data:") and json.loads(line[5:]).get("msg") in (
                    "process_completed",
                    "close_stream",
                ):
                    break


def run(url: str, tokens: int, seed: int) -> dict:
    from gradio_client import Client

    return Client(url, verbose=False).predict(
        prompt=PROMPT, max_new_tokens=tokens, seed=seed, compare=True, api_name="/generate"
    )


def figures(result: dict) -> tuple[float, float, str, float | None]:
    m = result.get("machine") or {}
    return (
        result["ar"]["stats"]["ms_per_token"],
        result["stats"]["ms_per_token"],
        m.get("threads", "?"),
        m.get("others_cores"),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--port", type=int, default=7951)
    args = ap.parse_args()
    server, url = serve_app(args.port)
    ratios = []
    try:
        run(url, 16, 0)  # warm-up
        fn_index, values = load_event(httpx.get(url + "/config").json())
        for i in range(args.repeats):
            quiet = figures(run(url, args.tokens, i))
            go = threading.Event()
            pages = [
                threading.Thread(target=open_page, args=(url, fn_index, values, go))
                for _ in range(args.pages)
            ]
            for t in pages:
                t.start()
            t0 = time.perf_counter()
            go.set()
            loaded = figures(run(url, args.tokens, i))
            for t in pages:
                t.join()
            took = time.perf_counter() - t0
            ratios.append(loaded[0] / quiet[0])
            for name, f in (("quiet", quiet), (f"{args.pages} pages opened", loaded)):
                others = "-" if f[3] is None else f"{f[3]:.2f}"
                print(
                    f"repeat {i + 1} {name:>18}: AR {f[0]:.1f} ms/token, speculative "
                    f"{f[1]:.1f}, {f[2]}, the rest used {others} cores",
                    flush=True,
                )
            print(f"  pages and run done in {took:.1f} s; AR ratio {ratios[-1]:.2f}")
    finally:
        server.terminate()
        server.wait(30)
    print(f"median AR ratio (pages opened / quiet): {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
