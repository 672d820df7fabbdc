"""A class of N students asking the app at once, with a busy process beside it.

    PYTHONPATH=. .venv/bin/python scripts/class_generate.py [--clients 40] [--tokens 24] \
        [--nice 0|19|none] [--classes 2] [--pages 0]

Serves app.py's app on the offline pair in a process of its own, sends one warm-up request,
starts a `python3 -c` busy loop beside it (at --nice; none: no neighbour), then for each of
--classes classes sends --clients `/generate` requests at once, each with its own prompt and
seed (--tokens new tokens; not compared), and prints each class's median and longest wait,
its errors, and the server's resident memory after it. With --pages, that many page opens
(the page, its config, its load event's queue stream) are made during the first class as
well. Last, the texts are checked against the command line's: the same function
`python -m specviz generate` runs (the pair loaded as it loads it), one prompt and seed at a
time, in this process once the server is gone.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import threading
import time

import psutil

from scripts.class_link import serve_app  # run from the checkout's root, PYTHONPATH=.

TOPICS = ["the sky", "rain", "a rainbow", "the tides", "snow", "thunder", "the moon", "wind"]
ASKS = [
    "Explain in one sentence what causes {}",
    "Write a line of a poem about {}",
    "Name two facts about {}",
    "Describe {} to a child",
]


def prompts(n: int) -> list[tuple[str, int]]:
    """n (prompt, seed) pairs, each its own."""
    out = []
    for i in range(n):
        ask = ASKS[i % len(ASKS)].format(TOPICS[(i // len(ASKS)) % len(TOPICS)])
        out.append((f"{ask}.", 100 + i))
    return out


def ask(url: str, prompt: str, seed: int, tokens: int, out: dict, go: threading.Event) -> None:
    from gradio_client import Client

    client = Client(url, verbose=False)
    go.wait()
    t0 = time.perf_counter()
    try:
        result = client.predict(
            prompt=prompt, seed=seed, max_new_tokens=tokens, api_name="/generate"
        )
        out[(prompt, seed)] = (time.perf_counter() - t0, result.get("text"), None)
    except Exception as exc:  # counted and shown
        out[(prompt, seed)] = (time.perf_counter() - t0, None, str(exc).splitlines()[0])


def open_pages(url: str, n: int) -> None:
    import httpx

    for _ in range(n):
        with httpx.Client(timeout=120) as http:
            http.get(url + "/").raise_for_status()
            http.get(url + "/config").raise_for_status()


def one_class(url: str, asks: list[tuple[str, int]], tokens: int, pages: int) -> dict:
    out: dict = {}
    go = threading.Event()
    threads = [threading.Thread(target=ask, args=(url, p, s, tokens, out, go)) for p, s in asks]
    if pages:
        threads.append(threading.Thread(target=open_pages, args=(url, pages)))
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join()
    return out


def reference(asks: list[tuple[str, int]], tokens: int) -> dict:
    """Each prompt's text as `python -m specviz generate --prompt P --seed S` makes it."""
    import argparse as ap

    from specviz.cli.args import load_pair_from_args, settings_from_args
    from specviz.cli.main import build_parser
    from specviz.engine import generate

    texts = {}
    pair = None
    for prompt, seed in asks:
        argv = ["generate", "--prompt", prompt, "--seed", str(seed)]
        args: ap.Namespace = build_parser().parse_args([*argv, "--max-new-tokens", str(tokens)])
        pair = pair or load_pair_from_args(args)
        texts[(prompt, seed)] = generate(pair, prompt, settings_from_args(args, "spec")).text
    return texts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=40)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--nice", default="0", help="the busy loop's nice value, or none")
    parser.add_argument("--classes", type=int, default=2)
    parser.add_argument("--pages", type=int, default=0)
    parser.add_argument("--port", type=int, default=7941)
    args = parser.parse_args()
    server, url = serve_app(args.port)
    busy = None
    texts: dict = {}
    try:
        from gradio_client import Client

        Client(url, verbose=False).predict(
            prompt="Warm up.", max_new_tokens=args.tokens, api_name="/generate"
        )
        proc = psutil.Process(server.pid)
        print(f"after the warm-up: {proc.memory_info().rss / 1e6:.0f} MB resident")
        if args.nice != "none":
            cmd = ["nice", "-n", args.nice, "python3", "-c", "while True: pass"]
            busy = subprocess.Popen(cmd, start_new_session=True)
            time.sleep(1)
        asks = prompts(args.clients)
        for c in range(args.classes):
            out = one_class(url, asks, args.tokens, args.pages if c == 0 else 0)
            waits = sorted(w for w, _, _ in out.values())
            errors = [e for _, _, e in out.values() if e]
            rss = proc.memory_info().rss / 1e6
            print(
                f"class {c + 1}: {len(out)} requests, median wait {statistics.median(waits):.1f} s,"
                f" longest {waits[-1]:.1f} s, {len(errors)} errors, {rss:.0f} MB resident",
                flush=True,
            )
            for e in errors[:3]:
                print(f"  error: {e}")
            texts.update({k: t for k, (_, t, _) in out.items()})
    finally:
        if busy is not None:
            busy.kill()
        server.terminate()
        server.wait(30)
    ref = reference(prompts(args.clients), args.tokens)
    same = sum(texts.get(k) == t for k, t in ref.items())
    print(f"texts equal to the command line's: {same} of {len(ref)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
