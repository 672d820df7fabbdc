"""The thread that drives model work for a streaming handler: it runs iterators (a live
run and its baseline, or a sweep) back to back in one call on the model thread
(specviz.modelthread), never waits for the page, and stops between items when asked.

The handler polls through :meth:`Worker.polls`: after each tick it reads what the
iterators have produced so far (the live traces, or the items kept in ``sink``) and yields
views.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from specviz.modelthread import MODEL_THREAD
from specviz.threads import Load, policy


class Worker(threading.Thread):
    """Runs each iterable to its end, in order, on the model thread; a set stop event
    closes the current one after its next item and skips the rest."""

    def __init__(
        self, runs: list[Iterable[Any]], stop: threading.Event, sink: list[Any] | None = None
    ) -> None:
        super().__init__(daemon=True, name="specviz-run")
        self.runs, self.stop, self.sink = runs, stop, sink
        self.tick = threading.Event()  # set after every item
        self.error: BaseException | None = None
        # what the runs met: the threads they computed on and the rest of the machine's CPU
        # use (specviz.threads), filled as they go
        self.load: Load | None = None

    def polls(self, interval: float = 0.5, gap: float = 0.0) -> Iterator[None]:
        """Start the thread and yield after each tick (or every `interval` seconds) while it
        runs, then join it; the caller reads ``error`` after the loop. With a gap, yields
        come at most once per gap seconds (items that tick faster, such as a check's
        samples, are read in batches; the end is not delayed). Leaving the loop early (the
        page went away, the handler was cancelled) sets the stop event."""
        self.start()
        try:
            while self.is_alive():
                self.tick.wait(interval)
                self.tick.clear()
                since = time.monotonic()
                yield
                if gap > 0:
                    self.join(max(0.0, gap - (time.monotonic() - since)))
        finally:
            self.stop.set()
        self.join()

    def run(self) -> None:
        try:
            MODEL_THREAD.call(self.drive)
        except BaseException as exc:  # reported by the handler
            self.error = exc
        finally:
            self.tick.set()

    def drive(self) -> None:
        threads = policy()
        with threads.watch() as self.load:
            self._drive(threads.pace)  # the thread count follows the machine between items

    def _drive(self, pace: Callable[[], int]) -> None:
        for r in self.runs:
            it = iter(r)
            for item in it:
                pace()
                if self.sink is not None:
                    self.sink.append(item)
                self.tick.set()
                if self.stop.is_set():
                    it.close()  # a run's trace is finalised as "stopped"
                    break
            if self.stop.is_set():
                break
