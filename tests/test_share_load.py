"""A class on loopback, bounded: twelve clients open one shared link at once, as a browser
does (scripts/class_link.py's client: the page, its config, the load event through the
queue), against the app on tiny networks while a slowed run holds the model thread. Each
gets the run's views, and the model thread is asked for nothing meanwhile."""

from __future__ import annotations

import importlib.util
import statistics
import threading
import time
from pathlib import Path

import httpx

from specviz.config import Settings
from specviz.engine import generate
from specviz.modelthread import MODEL_THREAD
from specviz.sharestore import SharedRuns
from tests.conftest import serve, slow_target

CLIENTS = 12
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "class_link.py"


def class_link():
    spec = importlib.util.spec_from_file_location("class_link", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_class_opens_one_link_while_a_run_goes_and_the_model_thread_does_nothing(
    text_pair, tmp_path
) -> None:
    script = class_link()
    store = SharedRuns(tmp_path)
    settings = Settings(max_new_tokens=16, seed=3)
    spec = MODEL_THREAD.call(lambda: generate(text_pair, "Hello there", settings))
    run_id = store.save(spec, None, imported=False)
    demo = serve(text_pair, shared=store)
    url = demo.local_url.rstrip("/")
    try:
        fn_index, values = script.load_event(httpx.get(url + "/config").json())
        with slow_target(text_pair, 0.2):
            going = threading.Thread(
                target=MODEL_THREAD.call,
                args=(lambda: generate(text_pair, "A run", settings.with_(max_new_tokens=60)),),
            )
            going.start()
            while MODEL_THREAD.idle():
                time.sleep(0.01)
            calls = MODEL_THREAD.calls
            out: list[tuple[float, bool]] = []
            go = threading.Event()
            clients = [
                threading.Thread(
                    target=script.open_link, args=(url, run_id, fn_index, values, out, go)
                )
                for _ in range(CLIENTS)
            ]
            for c in clients:
                c.start()
            go.set()
            for c in clients:
                c.join(120)
            assert not MODEL_THREAD.idle(), "the run ended before the class had its pages"
            assert MODEL_THREAD.calls == calls
        going.join()
        seconds = sorted(s for s, _ in out)
        print(
            f"{CLIENTS} clients: median {statistics.median(seconds):.2f} s, slowest "
            f"{seconds[-1]:.2f} s"
        )
        assert len(out) == CLIENTS and all(ok for _, ok in out)
    finally:
        demo.close()
