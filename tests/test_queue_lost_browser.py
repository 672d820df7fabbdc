"""No queued Run is lost without a word, in a real browser (Debian's chromium through
Playwright): three Runs wait behind a slowed run, in three sessions, while a fourth session
finds the queue full. One waiting page keeps its connection and its Run completes; one
reaches the server through a proxy that ends the queue's stream as a proxy closing an idle
response would (the server drops the queued Run, gradio's client is not told); one through
a proxy that breaks the stream (gradio draws the page again). Each of the other three says
why in one line under the status (specviz.ui.queue_watch), and the last one's Run, pressed
again, completes."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from specviz import ui
from specviz.ui.queue_watch import NOTE_ID, TEXT
from tests.conftest import need_chromium, slow_target
from tests.test_browser import opened

pytestmark = pytest.mark.browser

QUEUE_SIZE = 3  # the three waiting Runs; a fourth is turned away


class Proxy:
    """A loopback TCP proxy to the app whose connections can be ended cleanly (each
    response to the browser ends, as an HTTP/1.1 chunked body ends, and the server sees
    its client go) or broken (the browser sees the response cut short)."""

    def __init__(self, port: int) -> None:
        self.port_to = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                browser, _ = self.listener.accept()
            except OSError:
                return
            app = socket.create_connection(("127.0.0.1", self.port_to))
            with self.lock:
                self.pairs.append((browser, app))
            for a, b in ((browser, app), (app, browser)):
                threading.Thread(target=self.pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self, clean: bool) -> None:
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for browser, app in pairs:
            if clean:
                try:
                    browser.sendall(b"0\r\n\r\n")  # the last chunk: the response ends
                except OSError:
                    pass
            for s in (app, browser):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()
        self.cut(clean=False)


@pytest.fixture(scope="module")
def served(text_pair) -> Iterator[str]:
    """The app on text_pair, one model-running event at a time, three waiting at most; it
    opens once the process's model thread is idle (as tests/test_queue_browser.py's)."""
    from specviz.modelthread import MODEL_THREAD

    need_chromium()
    deadline = time.monotonic() + 400
    while not MODEL_THREAD.idle():
        assert time.monotonic() < deadline, "the model thread stayed busy for 400 s"
        time.sleep(0.2)
    demo = ui.build_app(loader=lambda name, dtype: text_pair, pairs=["default"])
    demo.queue(default_concurrency_limit=1, max_size=QUEUE_SIZE).launch(
        prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **ui.launch_options()
    )
    yield demo.local_url
    demo.close()


@contextmanager
def proxied(url: str) -> Iterator[tuple[str, Proxy]]:
    proxy = Proxy(int(url.rstrip("/").rsplit(":", 1)[1]))
    try:
        yield f"http://127.0.0.1:{proxy.port}/", proxy
    finally:
        proxy.close()


def press(page, n_tokens: int = 12) -> None:
    page.fill("#sv-max-new input[type=number]", str(n_tokens))
    page.press("#sv-max-new input[type=number]", "Enter")
    page.click("#sv-run")


def waits(page) -> None:
    page.locator("#sv-status").filter(has_text="queue:").wait_for(timeout=30_000)


def note(page, text: str) -> None:
    line = page.locator(f"#{NOTE_ID}")
    line.filter(has_text=text).wait_for(timeout=30_000)
    assert line.count() == 1 and "\n" not in line.inner_text()


def test_each_queued_run_completes_or_says_why(browser, served, text_pair) -> None:
    with (
        proxied(served) as (ended_url, ending),
        proxied(served) as (broken_url, breaking),
        opened(browser, served, 1280, 900) as first,
        opened(browser, served, 1280, 900) as kept,
        opened(browser, ended_url, 1280, 900) as ended,
        opened(browser, broken_url, 1280, 900) as broken,
        opened(browser, served, 1280, 900) as turned_away,
    ):
        with slow_target(text_pair, 0.4) as slowed:
            press(first)
            first.locator("#sv-status").filter(has_text="speculative: round").wait_for(
                timeout=30_000
            )
            for page in (kept, ended, broken):
                press(page)
                waits(page)
            press(turned_away)
            note(turned_away, TEXT["full"])
            ending.cut(clean=True)
            note(ended, TEXT["closed"])
            breaking.cut(clean=False)
            note(broken, TEXT["reload"])
            slowed.release()
        for page in (first, kept):
            page.locator("#sv-status").filter(has_text="done").wait_for(timeout=60_000)
            assert page.locator(f"#{NOTE_ID}").count() == 0
        # pressed again, the Run that the broken stream lost completes
        broken.wait_for_selector("#sv-models table", timeout=60_000)
        press(broken)
        try:
            broken.locator("#sv-status").filter(has_text="done").wait_for(timeout=60_000)
        except Exception as e:  # what the page showed instead, for the failure's line
            tracker = broken.locator("#sv-status [data-testid=status-tracker]")
            shown = broken.inner_text("#sv-status").replace("\n", " ")[:200]
            pending = tracker.count() and "hide" not in (tracker.get_attribute("class") or "")
            raise AssertionError(
                f"the Run pressed again never ended: status {shown!r}, tracker pending "
                f"{bool(pending)}, notes {broken.locator(f'#{NOTE_ID}').count()}"
            ) from e
        assert broken.locator(f"#{NOTE_ID}").count() == 0
