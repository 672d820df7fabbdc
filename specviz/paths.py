"""Where specviz keeps what it makes once per machine: converted weights, the offline draft's
choice, compiled packages and its kernel library."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$SPECVIZ_CACHE, else ~/.cache/specviz."""
    env = os.environ.get("SPECVIZ_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "specviz"
