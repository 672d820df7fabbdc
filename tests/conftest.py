"""Shared fixtures: tiny real models built from configs, the real offline pair (loaded
once per test session from the converted cache; no network), and for the browser tests one
chromium per worker and apps served once per worker: on the offline pair for the few
end-to-end tests, on tiny networks over its tokenizer for the page's own logic."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

# torch's idle OpenMP threads wait asleep instead of spinning: on the two cores the workers
# share, a process computing on two threads (the offline pair loading at the set-up's
# count, a child that loads it: the command line, the set-up script) otherwise keeps both
# cores busy between its parallel regions, and the other worker waits. Results are the
# same; only the idle threads' waiting changes. Set before torch loads its OpenMP runtime,
# so that it holds here, in the workers and in every process they start.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

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


def need_chromium() -> None:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip("Debian's chromium is not installed (scripts/setup.sh --dev installs it)")


def serve(pair, **build) -> object:
    """The app built on one pair (the loader's answer to every pair name), launched on
    loopback without blocking; `build` goes to ui.build_app."""
    from specviz import ui

    build.setdefault("loader", lambda name, dtype: pair)
    demo = ui.build_app(pairs=["default"], **build)
    demo.queue().launch(
        prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **ui.launch_options()
    )
    return demo


@pytest.fixture(scope="session")
def app_url(offline_pair):
    """The app on the offline pair, launched once per worker for the real-pair browser
    tests (and for every browser test while SPECVIZ_SCREENSHOT_DIR is set)."""
    need_chromium()
    demo = serve(offline_pair)
    yield demo.local_url
    demo.close()


@pytest.fixture(scope="session")
def text_pair():
    """The browser tests' pair: tiny random networks over the offline pair's tokenizer
    (tests.tiny.text_pair), so that a page's run costs milliseconds of model time."""
    from tests.tiny import text_pair

    return text_pair()


@pytest.fixture(scope="session")
def tiny_url(text_pair):
    """The app on text_pair, launched once per worker for the browser tests of the page's
    own logic and layout (the README's screenshots, SPECVIZ_SCREENSHOT_DIR, are of the
    offline pair: see ui_pair)."""
    need_chromium()
    demo = serve(text_pair)
    yield demo.local_url
    demo.close()


@pytest.fixture(scope="session")
def screenshots() -> bool:
    return bool(os.environ.get("SPECVIZ_SCREENSHOT_DIR"))


@pytest.fixture(scope="session")
def ui_pair(screenshots, request):
    """The pair behind ui_url: the offline pair while the README's screenshots are written,
    else text_pair."""
    return request.getfixturevalue("offline_pair" if screenshots else "text_pair")


@pytest.fixture(scope="session")
def ui_url(screenshots, request):
    """The served app the page tests open: app_url while SPECVIZ_SCREENSHOT_DIR is set (the
    screenshots show the offline pair's text), else tiny_url."""
    return request.getfixturevalue("app_url" if screenshots else "tiny_url")


class Slowed:
    """What slow_target yields: ``release()`` lets the target run at its own speed again
    once nothing needs the run to last (the presses around it are in)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def release(self) -> None:
        self.seconds = 0.0


@contextmanager
def slow_target(pair, seconds: float):
    """Each target call of `pair` takes at least `seconds` meanwhile (until the yielded
    Slowed is released): a test that acts while a run is in progress (Stop, a closed tab, a
    press queued behind a run) gets a run that lasts, on a pair that is otherwise over in
    milliseconds."""
    import time

    slowed = Slowed(seconds)

    def wait(*_) -> None:
        if slowed.seconds:
            time.sleep(slowed.seconds)

    hook = pair.target.model.register_forward_pre_hook(wait)
    try:
        yield slowed
    finally:
        hook.remove()


@pytest.fixture(scope="session")
def browser():
    """One chromium per worker; each test opens its own context (a fresh profile)."""
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


# The modules that take longest, about longest first (seconds of setup, calls and teardown
# in one run of the suite on 2 cores of an AMD EPYC, SPECVIZ_TEST_TIMELINE, with other work
# beside it: the order is what counts), run first: xdist hands a free worker the next
# module, so the last ones to start are short and the workers finish close together. Near
# the top a module that computes (package builds, sampling) alternates with a browser
# module, which mostly waits on its page, so that the two at once keep both cores busy
# more often. Every other module keeps its place after them.
SLOWEST_FIRST = (
    "test_packages",  # 132 s
    "test_layout_browser",  # 100 s
    "test_distribution",  # 102 s
    "test_browser",  # 93 s
    "test_engine",  # 99 s
    "test_lesson_link_browser",  # 79 s
    "test_lesson_browser",  # 78 s
    "test_load",  # 42 s
    "test_display_browser",  # 71 s
    "test_gpu_check",  # 37 s
    "test_share_browser",  # 58 s
    "test_kernels",  # 36 s
    "test_queue_lost_browser",  # 31 s
    "test_bench",  # 30 s
    "test_take_prompt",  # 29 s
    "test_verify_contract",  # 28 s
    "test_compiled",  # 25 s
    "test_report",  # 24 s
    "test_tree",  # 23 s
    "test_check",  # 22 s
    "test_cli",  # 21 s
    "test_faults",  # 18 s
    "test_tree_browser",  # 17 s
    "test_ui",  # 16 s
    "test_queue_browser",  # 16 s
    "test_layering",  # 16 s
    "test_costs",  # 15 s
    "test_deploy",  # 13 s
)


def pytest_configure(config) -> None:
    # pytest-xdist's --dist loadscope otherwise queues the modules by their number of tests,
    # most first (--loadscope-reorder, its default), which ignores SLOWEST_FIRST and leaves
    # one-test browser modules, among the longest, for last
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With SPECVIZ_TEST_TIMELINE=FILE, one line per test is appended to FILE: the worker,
    the test's start and end (seconds since the epoch) and its id, to see where a run of
    the suite spends its time and where a worker waits."""
    path = os.environ.get("SPECVIZ_TEST_TIMELINE")
    start = time.time()
    yield
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(path, "a") as out:
            out.write(f"{worker}\t{start:.3f}\t{time.time():.3f}\t{item.nodeid}\n")


def pytest_collection_modifyitems(config, items) -> None:
    # tests/test_variants.py (minutes of package builds) runs only when the marker
    # expression names it (`-m variants`: CI's second step); elsewhere it is deselected,
    # and pytest's summary counts it
    if "variants" not in (config.option.markexpr or ""):
        kept = [i for i in items if i.get_closest_marker("variants") is None]
        if len(kept) < len(items):
            config.hook.pytest_deselected(items=[i for i in items if i not in kept])
            items[:] = kept
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}

    def place(item) -> int:
        module = getattr(item, "module", None)
        return rank.get(module.__name__.rpartition(".")[2] if module else "", len(rank))

    items.sort(key=place)
