"""A class opening one shared link at once, against a served app while a run is going.

    PYTHONPATH=. .venv/bin/python scripts/class_link.py [--clients 60] [--tiny]

Serves the app in a process of its own (app.py's serve on the offline pair; --tiny: the tiny
test pair, as tests/tiny_app.py serves it), makes a compared run through /generate and
shares it (saved into the same store the server reads, specviz.sharestore), starts a longer
run through /generate, and while it runs has every client open ``/?run=ID`` as a browser
does: the page's HTML, its config, then the page's load event through the queue (join, then
the event stream) until the shared run's views arrive. Prints, per client, the seconds from
its first request to the views (what the browser then draws), and the median and slowest.
The clients are threads of this process, on the same cores as the server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid

import httpx

SERVER = """
import sys
from specviz import ui
if sys.argv[1] == "tiny":
    from tests.tiny import tiny_pair
    pair = tiny_pair()
    ui.serve(ui.build_app(loader=lambda p, d: pair, pairs=["tiny"]), server_name="127.0.0.1")
else:
    ui.serve(ui.build_app(), server_name="127.0.0.1")
"""


def serve_app(port: int) -> tuple[subprocess.Popen, str]:
    """app.py's app on the offline pair in a process of its own, offline, on this port, once
    it answers: the process and its URL. The caller terminates it."""
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "GRADIO_SERVER_PORT": str(port),
        "HF_HUB_OFFLINE": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    server = subprocess.Popen([sys.executable, "app.py"], env=env, stdout=subprocess.DEVNULL)
    try:
        wait_up(url, 900)
    except BaseException:
        server.terminate()
        raise
    return server, url


def wait_up(url: str, seconds: float = 600) -> None:
    end = time.time() + seconds
    while time.time() < end:
        try:
            if httpx.get(url + "/config", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit("the app did not come up")


def load_event(config: dict) -> tuple[int, list]:
    """The page's load event that opens a shared run (the one that sets #sv-pair-go), and
    the values the page sends with it (each input component's initial value; state: None)."""
    comps = {c["id"]: c for c in config["components"]}
    go = [i for i, c in comps.items() if c.get("props", {}).get("elem_id") == "sv-pair-go"]
    for i, dep in enumerate(config["dependencies"]):
        loads = any(t[1] == "load" for t in dep["targets"])
        if loads and go and go[0] in dep["outputs"]:
            values = [comps[c].get("props", {}).get("value") for c in dep["inputs"]]
            return dep.get("id", i), values
    raise SystemExit("no shared-run load event in the config")


def open_link(url: str, run_id: str, fn_index: int, values: list, out: list, go: threading.Event):
    session = uuid.uuid4().hex[:11]
    go.wait()
    t0 = time.perf_counter()
    with httpx.Client(timeout=600) as http:
        http.get(f"{url}/?run={run_id}").raise_for_status()
        http.get(f"{url}/config").raise_for_status()
        body = {"data": values, "fn_index": fn_index, "session_hash": session, "trigger_id": None}
        http.post(f"{url}/gradio_api/queue/join?run={run_id}", json=body).raise_for_status()
        ok = False
        with http.stream("GET", f"{url}/gradio_api/queue/data?session_hash={session}") as sse:
            for line in sse.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("msg") == "process_completed":
                    text = json.dumps(msg.get("output", {}))
                    ok = msg.get("success") and "data-status" in text and run_id in text
                    break
    out.append((time.perf_counter() - t0, bool(ok)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=60)
    ap.add_argument("--port", type=int, default=7871)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    url = f"http://127.0.0.1:{args.port}"
    env = {**os.environ, "GRADIO_SERVER_PORT": str(args.port), "HF_HUB_OFFLINE": "1"}
    kind = "tiny" if args.tiny else "offline"
    server = subprocess.Popen([sys.executable, "-c", SERVER, kind], env=env)
    try:
        wait_up(url)
        from gradio_client import Client

        from specviz.sharestore import SharedRuns
        from specviz.trace import Trace

        client = Client(url, verbose=False)
        prompt = "1 2 3" if args.tiny else "Explain in three sentences why the sky is blue."
        pair = "tiny" if args.tiny else "default"
        result = client.predict(
            prompt=prompt, pair=pair, max_new_tokens=64, compare=True, api_name="/generate"
        )
        spec = Trace.from_dict({k: v for k, v in result.items() if k not in ("ar", "speedup")})
        run_id = SharedRuns().save(spec, Trace.from_dict(result["ar"]))
        print(f"shared run {run_id}: {len(spec.token_ids)} tokens, {len(spec.rounds)} rounds")
        fn_index, values = load_event(httpx.get(url + "/config").json())
        long_run = Client(url, verbose=False).submit(
            prompt=prompt,
            pair=pair,
            max_new_tokens=100 if args.tiny else 512,
            compare=True,
            api_name="/generate",
        )
        time.sleep(3)  # the run is going
        out: list[tuple[float, bool]] = []
        go = threading.Event()
        threads = [
            threading.Thread(target=open_link, args=(url, run_id, fn_index, values, out, go))
            for _ in range(args.clients)
        ]
        for t in threads:
            t.start()
        go.set()
        for t in threads:
            t.join()
        running = not long_run.done()
        seconds = sorted(s for s, _ in out)
        good = sum(ok for _, ok in out)
        print(f"{good} of {args.clients} clients got the shared run's views")
        print(f"median {statistics.median(seconds):.2f} s, slowest {seconds[-1]:.2f} s")
        print(f"the run was still going at the end: {running}")
        long_run.cancel()
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
