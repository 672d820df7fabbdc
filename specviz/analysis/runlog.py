"""The experiment log: one row per run of a session, a table and CSV of the rows, and the
runs' traces kept so that an earlier run can be shown again.

A row holds the settings that differ from the defaults (``specviz.config.Settings()``)
and the run's figures, as defined in specviz.metrics: acceptance rate, alpha, tokens per
target call, ms/token, and, for a run compared with the autoregressive baseline in the same
process, c and the speedup. Figures a run cannot give are None (an AR-only run has no
acceptance; a minimal trace records no overlaps, so no alpha). No gradio, no plotting
(the chart of runs is specviz.views.across_runs.runs_figure).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from specviz import metrics
from specviz.config import Settings
from specviz.trace import Trace

LOG_COLUMNS = (
    "run",
    "method",
    "changed",
    "prompt",
    "new_tokens",
    "acceptance",
    "alpha",
    "c",
    "tokens_per_call",
    "speedup",
    "ms_per_token",
)
PROMPT_CHARS = 40
MAX_RUNS = 50


def changed_settings(settings: Settings) -> dict[str, Any]:
    """The settings that differ from Settings()'s defaults (the method aside)."""
    defaults = Settings().to_dict()
    return {
        k: value
        for k, value in settings.to_dict().items()
        if k != "method" and (k not in defaults or value != defaults[k])
    }


def describe_changes(changed: dict[str, Any]) -> str:
    """`gamma=8, temperature=1.0`, or `defaults` when nothing changed."""
    return ", ".join(f"{k}={value}" for k, value in changed.items()) or "defaults"


def _short(prompt: str) -> str:
    one_line = " ".join(prompt.split())
    return one_line if len(one_line) <= PROMPT_CHARS else one_line[: PROMPT_CHARS - 1] + "…"


def log_row(run: int, spec: Trace | None, ar: Trace | None = None) -> dict[str, Any]:
    """One run's row: a speculative trace, an AR trace, or both from a compared run."""
    main = spec or ar
    if main is None:
        raise ValueError("a log row needs a speculative or an autoregressive trace")
    if spec is not None and spec.method != "spec":
        raise ValueError(f"spec must be a speculative trace, got method {spec.method!r}")
    if ar is not None and ar.method != "ar":
        raise ValueError(f"ar must be an autoregressive trace, got method {ar.method!r}")
    full = spec is not None and spec.settings.trace_level == "full"
    both = spec is not None and ar is not None
    return {
        "run": run,
        "method": "spec + ar" if both else main.method,
        "changed": describe_changes(changed_settings(main.settings)),
        "prompt": _short(main.prompt),
        "new_tokens": main.stats.new_tokens,
        "acceptance": spec.stats.acceptance_rate if spec is not None else None,
        "alpha": spec.stats.alpha if full and spec is not None else None,
        "c": metrics.cost_ratio(spec, ar) if both else None,
        "tokens_per_call": main.stats.tokens_per_call,
        "speedup": metrics.speedup(ar, spec) if both else None,
        "ms_per_token": main.stats.ms_per_token,
    }


def log_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows as a DataFrame with LOG_COLUMNS (an empty one with them when no rows)."""
    return pd.DataFrame(rows, columns=list(LOG_COLUMNS))


def log_csv(rows: list[dict[str, Any]]) -> str:
    """The rows as CSV text, figures rounded to 4 decimals."""
    return log_frame(rows).round(4).to_csv(index=False)


@dataclass
class ExperimentLog:
    """A session's runs: rows in order, and their traces for reloading (the oldest are
    dropped past max_runs, to bound a session's memory)."""

    max_runs: int = MAX_RUNS
    rows: list[dict[str, Any]] = field(default_factory=list)
    _traces: dict[int, tuple[Trace | None, Trace | None]] = field(default_factory=dict)
    _next: int = 1

    def add(self, spec: Trace | None, ar: Trace | None = None) -> dict[str, Any]:
        """Log one run and return its row."""
        row = log_row(self._next, spec, ar)
        self.rows.append(row)
        self._traces[self._next] = (spec, ar)
        self._next += 1
        while len(self.rows) > self.max_runs:
            self._traces.pop(self.rows.pop(0)["run"], None)
        return row

    def traces(self, run: int) -> tuple[Trace | None, Trace | None]:
        """The (spec, ar) traces of a logged run; ValueError if it is not (or no longer) kept."""
        if run not in self._traces:
            kept = f"runs {self.rows[0]['run']}..{self.rows[-1]['run']}" if self.rows else "none"
            raise ValueError(f"run {run} is not in the log (kept: {kept})")
        return self._traces[run]

    def frame(self) -> pd.DataFrame:
        return log_frame(self.rows)

    def csv(self) -> str:
        return log_csv(self.rows)
