"""Shared fixtures: tiny real models built from configs, the real offline pair (loaded
once per test session from the converted cache; no network), and for the browser tests one
app served on it for the whole session and one chromium per module."""

from __future__ import annotations

import os
from contextlib import contextmanager

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The thread count the set-up script ran at: its record of the offline draft's choice is
# keyed by it (see offline_pair).
SET_UP_THREADS = torch.get_num_threads()
if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under pytest-xdist (scripts/test.sh runs two workers on a 2-core CPU) each worker and
    # the processes it starts compute on one thread: two workers' thread teams would
    # otherwise share two cores, and tiny models gain nothing from a second thread.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def offline_pair():
    """Loaded on the model thread, as the app loads it: torch's CPU kernels keep a team of
    worker threads per calling thread, and a second team competes with the app's for the
    cores (tests that drive the engine directly still make one on their own thread).

    It loads at the set-up's thread count, so that the draft the set-up chose is read from
    its record; at one thread each worker would find no record and measure the variants
    again (about 25 s on each)."""
    from specviz.models import load_pair
    from specviz.modelthread import MODEL_THREAD

    def load():
        with set_up_threads():
            return load_pair("default", dtype="float32", device="cpu")

    return MODEL_THREAD.call(load)


@contextmanager
def set_up_threads():
    """The calling thread computes at the set-up's thread count meanwhile."""
    threads = torch.get_num_threads()
    torch.set_num_threads(SET_UP_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def set_up_env() -> dict[str, str]:
    """The environment for a child process that loads the offline pair: the set-up's thread
    count (the worker's one-thread setting dropped), offline."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["HF_HUB_OFFLINE"] = "1"
    return env


@pytest.fixture(scope="session")
def tiny():
    from tests.tiny import tiny_pair

    return tiny_pair()


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module of tiny-model tests: tiny models gain nothing from a
    second thread, and on a shared 2-core CPU it costs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def app_url(offline_pair):
    """The app on the offline pair, launched once for every browser test module."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip("Debian's chromium is not installed (scripts/setup.sh --dev installs it)")
    from specviz import ui

    demo = ui.build_app(loader=lambda pair, dtype: offline_pair, pairs=["default"])
    demo.queue().launch(
        prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **ui.launch_options()
    )
    yield demo.local_url
    demo.close()


@pytest.fixture(scope="module")
def browser(app_url):
    """One chromium per module; each test opens its own context (a fresh profile)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


# The modules that take longest (measured on a 2-core CPU, in that order) run first: xdist
# hands a free worker the next module, so the last one to start is then a short one and the
# two workers finish close together. Every other module keeps its place.
SLOWEST_FIRST = (
    "test_distribution",
    "test_engine",
    "test_browser",
    "test_layout_browser",
    "test_lesson_browser",
    "test_load",
    "test_faults",
)


def pytest_collection_modifyitems(items) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}

    def place(item) -> int:
        module = getattr(item, "module", None)
        return rank.get(module.__name__.rpartition(".")[2] if module else "", len(rank))

    items.sort(key=place)
