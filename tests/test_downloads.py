"""The page's downloads do not pile up on a server that runs for weeks: each is written to a
folder of its own under one folder per process (specviz.ui.downloads), the folders left
alone for an hour go when the next is made, and gradio's copies of them go by the page's
delete_cache."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from specviz import ui
from specviz.ui import downloads


@pytest.fixture()
def own_root(tmp_path, monkeypatch):
    """A fresh downloads folder for the test (never the process's own)."""
    monkeypatch.setattr(downloads, "_root", tmp_path / "downloads")
    (tmp_path / "downloads").mkdir()
    return tmp_path / "downloads"


def age(path: Path, seconds: float) -> None:
    """Make path's modification time lie that many seconds back."""
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_a_folder_left_alone_for_an_hour_goes_when_the_next_is_made(own_root) -> None:
    old, busy, fresh = (downloads.new_folder(p) for p in ("export-", "report-", "log-"))
    assert {f.parent for f in (old, busy, fresh)} == {own_root}
    assert old.name.startswith("export-") and old != busy != fresh
    (old / "specviz-trace.json").write_text("{}")
    (busy / "report.html").write_text("<p>")
    for f in (old, old / "specviz-trace.json", busy):
        age(f, downloads.KEEP_S + 60)
    # the report's folder is old but a file in it was written a moment ago: it is kept
    made = downloads.new_folder("handout-")
    left = set(own_root.iterdir())
    assert old not in left and {busy, fresh, made} <= left
    assert downloads.prune() == []  # nothing else is stale


def test_a_folder_removed_meanwhile_is_no_error(own_root) -> None:
    gone = downloads.new_folder("export-")
    age(gone, downloads.KEEP_S + 60)
    gone.rmdir()
    assert downloads.prune() == []
    downloads.new_folder("export-")


def test_the_root_is_made_again_when_something_removed_it(own_root) -> None:
    own_root.rmdir()
    made = downloads.new_folder("export-")
    assert made.is_dir() and made.parent != own_root  # a new process folder
    assert made.parent.name.startswith("specviz-downloads-")
    made.parent.joinpath(made.name).rmdir()
    made.parent.rmdir()


def test_the_pages_downloads_are_written_there_and_gradio_prunes_its_copies(own_root, tiny) -> None:
    from specviz.config import Limits, Settings
    from specviz.engine import generate

    session = ui.new_session()
    settings = Settings(max_new_tokens=6, gamma=2, greedy=True)
    session.start(generate(tiny, "1 2", settings), None, "run")
    first = ui.export_files(session)
    second = ui.export_files(session)
    assert {Path(p).parent.parent for p in first + second} == {own_root}
    assert Path(first[0]).parent != Path(second[0]).parent  # one folder per download
    demo = ui.build_app(loader=lambda name, dtype: tiny, pairs=["default"], limits=Limits())
    assert demo.delete_cache == downloads.GRADIO_CACHE


def test_no_other_module_of_the_page_makes_a_folder_of_its_own() -> None:
    """The run log, the report and the handout go through downloads.new_folder too."""
    here = Path(ui.__file__).parent
    makers = sorted(
        p.name
        for p in here.glob("*.py")
        if p.name != "downloads.py" and ("mkdtemp" in p.read_text() or "mkstemp" in p.read_text())
    )
    assert makers == []
    users = {p.name for p in here.glob("*.py") if "downloads.new_folder(" in p.read_text()}
    assert {"io_tab.py", "runs_tab.py", "report_tab.py", "lesson_recorder.py"} <= users


def test_a_process_s_folder_goes_when_it_exits(tmp_path) -> None:
    """A process that made downloads leaves no folder behind when it ends normally."""
    import subprocess
    import sys

    # the module alone, by its path: it imports nothing of specviz, and gradio is not needed
    code = (
        f"import importlib.util as u; s = u.spec_from_file_location('d', {downloads.__file__!r}); "
        "d = u.module_from_spec(s); s.loader.exec_module(d); f = d.new_folder('export-'); "
        "(f / 'x.json').write_text('{}'); print(f.parent)"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    made = Path(done.stdout.strip())
    assert made.parent == tmp_path and not made.exists()
