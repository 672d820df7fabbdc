"""Load: 8 concurrent gradio_client sessions against one app served on loopback in its own
process, then 100 sequential runs; the memory of that process may grow by at most 100 MB."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import httpx
import psutil
import pytest
from gradio_client import Client
from gradio_client.utils import Status

from specviz import ui
from specviz.config import Limits
from specviz.engine import generate
from specviz.trace import Trace
from tests.tiny import tiny_pair

ROOT = Path(__file__).resolve().parent.parent

SESSIONS = 8

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app():
    """The app on the tiny pair in a process of its own, served by tests/tiny_app.py (ui.serve
    at concurrency 1, a queue of 32, one torch thread). The memory measured is the serving
    process's alone: a test worker's heap, after the modules run before this one, keeps and
    fragments memory that no run of this app allocated."""
    port = free_port()
    env = {
        **os.environ,
        "GRADIO_SERVER_PORT": str(port),
        "SPECVIZ_CONCURRENCY": "1",
        "SPECVIZ_QUEUE_SIZE": "32",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",  # as scripts/run.sh serves it: no network calls
    }
    with tempfile.TemporaryFile() as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.tiny_app"], cwd=ROOT, env=env, stdout=log, stderr=log
        )
        url = f"http://127.0.0.1:{port}/"
        try:
            deadline = time.monotonic() + 300
            while True:
                if child.poll() is not None:
                    log.seek(0)
                    tail = log.read().decode(errors="replace")[-2000:]
                    pytest.fail(f"the app exited with {child.returncode} before serving:\n{tail}")
                try:
                    urllib.request.urlopen(url, timeout=2).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the app did not serve within 300 s"
                    time.sleep(0.2)
            yield url, psutil.Process(child.pid)
        finally:
            child.terminate()
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def args(prompt: str, seed: int, max_new: int = 10) -> list:
    f = ui.Form(prompt=prompt, pair="tiny", seed=seed, max_new_tokens=max_new, gamma=3)
    return [getattr(f, name) for name in ui.FORM_FIELDS]


def exported_trace(client: Client) -> Trace:
    files = client.predict(api_name="/export")
    path = next(f for f in files if str(f).endswith("specviz-trace.json"))
    return Trace.from_json(Path(path).read_bytes())


def test_eight_concurrent_sessions_queue_and_keep_their_own_traces(app) -> None:
    url, _ = app
    clients = [Client(url, verbose=False) for _ in range(SESSIONS)]
    prompts = [" ".join(str((i + k) % 8) for k in range(2 + i % 3)) for i in range(SESSIONS)]
    t0 = time.perf_counter()
    jobs = [
        c.submit(*args(p, seed=100 + i), api_name="/run")
        for i, (c, p) in enumerate(zip(clients, prompts, strict=True))
    ]
    ranks: dict[int, set[int]] = {i: set() for i in range(SESSIONS)}
    started: dict[int, float] = {}

    def watch(i: int) -> None:
        while not jobs[i].done():
            st = jobs[i].status()
            if st.code == Status.IN_QUEUE and st.rank is not None:
                ranks[i].add(st.rank)
            elif st.code in (Status.PROCESSING, Status.ITERATING) and i not in started:
                started[i] = time.perf_counter() - t0
            time.sleep(0.02)

    watchers = [threading.Thread(target=watch, args=(i,)) for i in range(SESSIONS)]
    for w in watchers:
        w.start()
    outs = [j.result(timeout=300) for j in jobs]
    for w in watchers:
        w.join()
    total = time.perf_counter() - t0
    assert all(any(isinstance(x, str) and "data-status" in x for x in o) for o in outs)
    waited = [i for i in range(SESSIONS) if ranks[i]]
    assert len(waited) >= SESSIONS // 2, ranks  # concurrency 1: most of them queued
    assert all(max(ranks[i]) < SESSIONS for i in waited)

    pair = tiny_pair()  # the same weights the server built
    for i, client in enumerate(clients):
        trace = exported_trace(client)
        assert trace.prompt == prompts[i] and trace.settings.seed == 100 + i
        settings = ui.Form(prompt=prompts[i], seed=100 + i, max_new_tokens=10, gamma=3).settings(
            Limits()
        )
        assert trace.token_ids == generate(pair, prompts[i], settings).token_ids
    waits = sorted(started.values())
    print(
        f"\nload: {SESSIONS} concurrent /run at concurrency 1 in {total:.2f} s; "
        f"queue positions seen {sorted({r for s in ranks.values() for r in s})}; "
        f"start after submit (s): {', '.join(f'{w:.2f}' for w in waits)}"
    )


def call(http: httpx.Client, api: str, data: list) -> list:
    """One call of the app's `api` through gradio's REST route (POST, then the event's
    stream): the same queue and handler as gradio_client's, at a few ms of this process's
    CPU a call where gradio_client spends about 60 (its per-request set-up would otherwise
    share the two cores with the server it measures). The completed call's outputs."""
    r = http.post(f"gradio_api/call{api}", json={"data": data})
    r.raise_for_status()
    event = None
    with http.stream("GET", f"gradio_api/call{api}/{r.json()['event_id']}") as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.removeprefix("event:").strip()
            elif line.startswith("data:") and event in ("complete", "error"):
                assert event == "complete", line
                return json.loads(line.removeprefix("data:"))
    raise AssertionError(f"{api}: the stream ended without completing")


def test_memory_after_100_sequential_runs(app) -> None:
    url, proc = app
    http = httpx.Client(base_url=url, timeout=120)
    for i in range(5):  # warm: first-call allocations are not a leak
        call(http, "/run", args("1 2 3", seed=i, max_new=8))
    before = proc.memory_info().rss
    t0 = time.perf_counter()
    for i in range(100):
        out = call(http, "/run", args(f"{i % 8} {(i * 3) % 8}", seed=i, max_new=8))
        assert any(isinstance(x, str) and "data-status" in x for x in out)
    seconds = time.perf_counter() - t0
    after = proc.memory_info().rss
    print(
        f"\nmemory: 100 sequential runs in {seconds:.1f} s; RSS {before / 2**20:.1f} MiB -> "
        f"{after / 2**20:.1f} MiB ({(after - before) / 2**20:+.1f} MiB)"
    )
    assert after - before <= 100 * 2**20
