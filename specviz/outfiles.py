"""How specviz writes a result file (the report's, the bench's and the GPU check's): whole or
not at all. The text goes to a temporary file beside the final name, which then replaces it
in one step (os.replace), so a run cut short, a full disk or a reader opening the file
meanwhile finds the previous file or the new one, never half of one. JSON is written one way
everywhere (indent 1, UTF-8 as it is); CSV through pandas, without the index; a Markdown
table (the bench's and the GPU check's, ready for the docs) by :func:`markdown_table`.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def write_text(path: Path, text: str) -> Path:
    """Write text (UTF-8) to path, whole or not at all; return path."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def markdown_table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table: the header, its rule, then one line per row (each value as str)."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def write_json(path: Path, value: Any, allow_nan: bool = True) -> Path:
    """value as JSON; allow_nan=False refuses NaN and infinities (ValueError, nothing
    written) where a reader needs strict JSON."""
    return write_text(path, json.dumps(value, indent=1, ensure_ascii=False, allow_nan=allow_nan))


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """One CSV row per dict (the union of their keys as columns, in first-seen order)."""
    import pandas as pd

    return write_text(path, pd.DataFrame(list(rows)).to_csv(index=False))
