"""One thread for all of the app's model work.

torch runs its CPU kernels on OpenMP, and every thread that starts a parallel region gets
a team of worker threads of its own, which lives as long as that thread. A web server
answers requests on a pool of long-lived threads, so a model touched from several of them
leaves several teams competing for the cores, and a model step slows once another live
thread has run a parallel matrix product (docs/app.md has the measurement). The app
therefore sends every model call
(loading, warm-up, runs, steps, the distribution check) to this one thread. Whether it is
idle (nothing running, nothing queued) can be asked at any time: work nobody will see any
more (a visitor left) must not keep it busy. Before each call the thread sets its count of
compute threads from what the rest of the machine runs (specviz.threads); a driver that runs
many model calls in one (specviz.ui.worker) paces between them too. No gradio.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


class ModelThread:
    """A daemon thread, started on first use, that runs submitted callables in order."""

    def __init__(self, name: str = "specviz-model") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], Future]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending = 0  # calls queued or running
        self._calls = 0  # calls made since the process started

    def call(self, fn: Callable[[], T]) -> T:
        """fn() on the model thread (inline when already there); its result or its error."""
        with self._lock:
            self._calls += 1
        if threading.current_thread() is self._thread:
            return fn()
        future: Future = Future()
        with self._lock:
            self._pending += 1
        self._jobs.put((fn, future))
        self._start()
        return future.result()

    @property
    def calls(self) -> int:
        """How many calls were made to this thread so far (inline ones included): a count
        that stays put over a stretch shows that nothing in it asked for model work."""
        with self._lock:
            return self._calls

    def idle(self) -> bool:
        """Whether no call is running or queued."""
        with self._lock:
            return self._pending == 0

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        from specviz.threads import policy

        pace, rest = policy().pace, policy().rest
        while True:
            fn, future = self._jobs.get()
            try:
                if future.set_running_or_notify_cancel():
                    pace()
                    try:
                        result = fn()
                    except BaseException as exc:  # handed to the caller
                        future.set_exception(exc)
                    else:
                        future.set_result(result)
            finally:
                with self._lock:
                    self._pending -= 1
                    idle = self._pending == 0
                if idle:
                    rest()


MODEL_THREAD = ModelThread()
