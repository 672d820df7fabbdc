"""How long the lesson's distribution-check step takes, as the page runs it: the panel's own
handler, the check's handlers and the model thread, on the offline pair, the page
untouched before the step's button.

    PYTHONPATH=. .venv/bin/python scripts/lesson_check_time.py

Prints the step's wall time, the frames it streamed, and the statement it made.
"""

from __future__ import annotations

import re
import time

from specviz import lesson, ui
from specviz.config import Limits
from specviz.models import load_pair
from specviz.modelthread import MODEL_THREAD
from specviz.ui import lesson_panel


def main() -> None:
    pair = MODEL_THREAD.call(lambda: load_pair("default", dtype="float32", device="cpu"))
    ctx = ui.AppContext(lambda name, dtype: pair, Limits())
    index = next(i for i, s in enumerate(lesson.STEPS) if isinstance(s.action, lesson.CheckAction))
    state = lesson.Lesson(index=index)
    session = ui.new_session()
    t0 = time.perf_counter()
    frames = list(lesson_panel.lesson_updates(session, state, ui.Form(), ctx))
    took = time.perf_counter() - t0
    said = re.sub("<[^>]+>", "", state.said.get(index, ""))
    print(f"lesson step {index + 1}: {took:.1f} s, {len(frames)} frames")
    print(f"said: {said}")


if __name__ == "__main__":
    main()
