"""Where the page writes the files it offers for download (an exported trace, the run log, a
report, a handout): a folder of their own under one folder per process (removed when the
process exits normally), and the ones left alone for KEEP_S seconds removed each time a new
one is made.

A Space serves for weeks: a folder made per download and never removed fills its disk,
one export or report at a time. gradio copies a file an event returns into its own cache
before the page fetches it, and deletes those copies by the page's ``delete_cache``
(specviz.ui.layout), so the folders here only need to outlive the event that wrote them
(a report's folder is written to for as long as the report runs: a folder's age counts
from its newest file).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
import time
from pathlib import Path

KEEP_S = 3600.0  # a download's folder untouched this long is removed
GRADIO_CACHE = (3600, 86400)  # gradio's copies: looked at hourly, removed after a day

_root: Path | None = None
_lock = threading.Lock()


def root() -> Path:
    """This process's folder of downloads, made on first use."""
    global _root
    with _lock:
        if _root is None or not _root.is_dir():
            _root = Path(tempfile.mkdtemp(prefix="specviz-downloads-"))
            atexit.register(shutil.rmtree, _root, ignore_errors=True)  # on a normal exit
        return _root


def last_touched(folder: Path) -> float:
    """The newest modification time of the folder and the files in it."""
    times = [folder.stat().st_mtime]
    for f in folder.iterdir():
        try:
            times.append(f.stat().st_mtime)
        except OSError:  # removed meanwhile
            pass
    return max(times)


def prune(keep_s: float = KEEP_S, now: float | None = None) -> list[Path]:
    """Remove the download folders left alone for keep_s seconds; returns those removed."""
    now = time.time() if now is None else now
    gone = []
    for folder in root().iterdir():
        try:
            if folder.is_dir() and now - last_touched(folder) > keep_s:
                shutil.rmtree(folder, ignore_errors=True)
                gone.append(folder)
        except OSError:  # another event removed it first
            continue
    return gone


def new_folder(prefix: str) -> Path:
    """A new, empty folder for one download (prefix names what it holds); the stale ones
    go first."""
    prune()
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root()))
