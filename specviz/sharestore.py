"""Shared runs kept on disk: a finished run's traces stored under an id, so that a link
(``?run=ID``) shows that run to anyone with no model call.

The store is a folder of JSON files, one per run, under the specviz cache
(``specviz.paths.cache_root()/shared-runs``). It is bounded by a count and by bytes
(SPECVIZ_SHARED_RUNS and SPECVIZ_SHARED_MB, read by config.Deployment): after each save the
oldest runs are deleted until both hold. It survives a restart. An id is the first 16 hex
digits of the SHA-256 of the stored JSON, so sharing the same run twice gives the same link
(and makes it the newest). Reading checks the id's form first, so a malformed id never
reaches the file system. A recorded lesson (specviz.lesson_record) is kept in the same
store, under the same limits, as a body of its own kind (:meth:`SharedRuns.save_body`). No
gradio, no torch.

A run's record says where the run came from: ``"imported": true`` for a run imported from a
file rather than run by this server. The caller passes it from what the server knows (the
session's flag, set when the server read the file), never from the traces, whose JSON a
visitor writes; reading gives it back, so a shared imported run opens, and is shared again,
as imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specviz.paths import cache_root
from specviz.trace import Trace

FORMAT = 2  # 2: a run's record says whether the run was imported
ID_PATTERN = re.compile(r"[0-9a-f]{16}")


def default_folder() -> Path:
    return cache_root() / "shared-runs"


@dataclass(frozen=True)
class SharedRun:
    """A stored run: its speculative trace, its baseline (either may be None), and whether
    it was imported from a file rather than run by this server."""

    spec: Trace | None
    ar: Trace | None
    imported: bool


class SharedRuns:
    """At most `max_runs` runs and `max_bytes` bytes of JSON in `folder`; the oldest go first."""

    def __init__(
        self, folder: Path | None = None, max_runs: int = 200, max_bytes: int = 200_000_000
    ) -> None:
        self.folder = Path(folder) if folder is not None else default_folder()
        self.max_runs, self.max_bytes = max_runs, max_bytes
        self._lock = threading.Lock()

    def save(self, spec: Trace | None, ar: Trace | None, *, imported: bool) -> str:
        """Store a finished run (its speculative trace, its baseline or both), and whether it
        was imported from a file rather than run by this server; its id."""
        if spec is None and ar is None:
            raise ValueError("nothing to share yet: press Run first")
        for t in (spec, ar):
            if t is not None and t.stop_reason == "running":
                raise ValueError("this run has not finished: share it once it has ended")
        body = {
            "format": FORMAT,
            "spec": spec.to_dict() if spec is not None else None,
            "ar": ar.to_dict() if ar is not None else None,
            "imported": bool(imported),
        }
        return self.save_body(body, "run")

    def save_body(self, body: dict[str, Any], what: str) -> str:
        """Store a JSON body (a run's, or a recorded lesson's: `what` names it in the error
        for one too large); its id. Written whole or not at all."""
        data = json.dumps(body, ensure_ascii=False, allow_nan=False, sort_keys=True).encode()
        if len(data) > self.max_bytes:
            raise ValueError(
                f"this {what} is {len(data) / 1e6:.1f} MB of trace, more than this server keeps "
                f"of shared runs ({self.max_bytes / 1e6:.0f} MB)"
            )
        run_id = hashlib.sha256(data).hexdigest()[:16]
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.path(run_id)
            if path.exists():
                os.utime(path)  # shared again: the newest now
            else:
                fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".saving-", suffix=".json")
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            self._prune(keep=run_id)
        return run_id

    def load(self, run_id: str) -> SharedRun:
        """The stored run; ValueError with one line for a malformed id, a run no longer
        kept, or a file that cannot be read."""
        run_id = check_id(run_id)
        body = self.load_body(run_id, "shared run")
        try:
            spec = Trace.from_dict(body["spec"]) if body.get("spec") else None
            ar = Trace.from_dict(body["ar"]) if body.get("ar") else None
            imported = body.get("imported", False)
            if not isinstance(imported, bool):
                raise ValueError(f"imported is {imported!r:.20}, not true or false")
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"shared run {run_id} could not be read: {line}") from None
        if spec is None and ar is None:
            raise ValueError(f"shared run {run_id} could not be read: it holds no trace")
        return SharedRun(spec, ar, imported)

    def load_body(self, run_id: str, what: str) -> dict[str, Any]:
        """The stored JSON body of an id (checked first); ValueError with one line for a
        malformed id, one no longer kept, or a file that is not a JSON object."""
        run_id = check_id(run_id)
        try:
            data = self.path(run_id).read_bytes()
        except FileNotFoundError:
            raise ValueError(
                f"{what} {run_id} is no longer kept on this server (it keeps the "
                f"{self.max_runs} most recent): press Run for a run of your own"
            ) from None
        try:
            body = json.loads(data)
        except (ValueError, RecursionError) as exc:
            line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"{what} {run_id} could not be read: {line}") from None
        if not isinstance(body, dict):
            raise ValueError(f"{what} {run_id} could not be read: not a JSON object")
        return body

    def path(self, run_id: str) -> Path:
        return self.folder / f"{run_id}.json"

    def kept(self) -> list[Path]:
        """The stored runs, oldest first."""
        if not self.folder.is_dir():
            return []
        files = []
        for p in self.folder.glob("*.json"):
            if ID_PATTERN.fullmatch(p.stem):
                try:
                    files.append((p.stat().st_mtime_ns, p.name, p))
                except FileNotFoundError:
                    pass
        return [p for *_, p in sorted(files)]

    def _prune(self, keep: str) -> None:
        """Delete the oldest runs until both limits hold (the run just saved stays)."""
        files = self.kept()
        sizes = {p: p.stat().st_size for p in files}
        total = sum(sizes.values())
        for p in files:
            if len(files) <= self.max_runs and total <= self.max_bytes:
                break
            if p.stem == keep:
                continue
            p.unlink(missing_ok=True)
            files = [f for f in files if f != p]
            total -= sizes[p]


def check_id(run_id: object) -> str:
    """The id, stripped, when it has the form of one; else ValueError with one line."""
    text = run_id.strip() if isinstance(run_id, str) else ""
    if not ID_PATTERN.fullmatch(text):
        shown = repr(run_id)[:40]
        raise ValueError(f"not a shared-run link: run={shown} (an id is 16 hex digits)")
    return text
