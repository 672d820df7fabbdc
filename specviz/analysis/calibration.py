"""Calibration of the acceptance rule: reliability diagrams built from stored traces alone.

Drafts. Every verified draft with a drawn u has a predicted acceptance probability
min(1, p/q) (``Drafted.accept_prob``) and an outcome (accepted or rejected). Binned by that
prediction, the observed acceptance frequency of a bin should equal the bin's mean
prediction: a rule that keeps with exactly its stated probability sits on the diagonal.
Only drafts the rule tested count: a draft
is tested when every earlier draft of its round was accepted, which depends on the earlier
u's only, so each tested draft is accepted with exactly its own min(1, p/q). Greedy
decisions (no u) are deterministic and left out, and so are exact-match rounds (no u
either): the sample they keep at a mismatch is drawn from p, but given the mismatch it is
never the draft, so p is not its distribution there.

Resampled tokens. Binning the drawn token by its own residual probability is not a
calibration: only drawn tokens would be counted, every outcome would be "drawn". Instead,
for every resampling event and every candidate x in the stored top list of the added token,
with its residual probability r(x) = norm(max(0, p - q))(x), count the indicator that x was
the token drawn; binned by r(x), the observed frequency should equal the mean r(x). The
list holds the top_n tokens by max(p, r), chosen before the draw, plus the drawn token when
it was not among them; that extra entry is left out, since it is listed only because it was
drawn. This checks the draw against the recorded residual; whether the residual itself is
norm(max(0, p - q)) is the distribution check's business (specviz.analysis.distribution_check).

Error bars are Wilson score intervals for the observed frequency, at 95% confidence for all
the bins together (Bonferroni over the bins: z = 2.81 for 10 bins). A bin is "within" when
its mean prediction lies inside its interval. Indicators inside one resampling event are
not independent (exactly one candidate is drawn); the binomial bar is then slightly wide.

``Calibration`` accumulates counts, so the app can add each run's trace as it comes and
keep no traces. No torch, no plotly (the figure is in specviz.views.across_runs).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

from specviz.trace import Trace, verified

N_BINS = 10
MIN_N = 40  # bins with fewer observations are shown but not judged
CONFIDENCE = 0.95
INTERVAL = "Wilson score interval, {c:.0%} for all {m} bins together: Bonferroni, z = {z:.2f}"


def bonferroni_z(n_bins: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided normal quantile that gives `confidence` jointly over n_bins intervals."""
    return NormalDist().inv_cdf(1.0 - (1.0 - confidence) / (2 * n_bins))


def wilson(hits: int, n: int, z: float) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion hits / n (n > 0)."""
    phat, z2 = hits / n, z * z
    center = (phat + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(phat * (1 - phat) / n + z2 / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


@dataclass
class Bins:
    """Counts per equal-width bin of [0, 1]: observations, summed predictions, hits."""

    n_bins: int = N_BINS
    n: list[int] = field(default_factory=list)
    predicted: list[float] = field(default_factory=list)
    hits: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.n_bins, bool) or not isinstance(self.n_bins, int):
            raise ValueError(f"bins must be an integer, got {self.n_bins!r}")
        if not 2 <= self.n_bins <= 100:
            raise ValueError(f"bins must be in 2..100, got {self.n_bins}")
        self.n = self.n or [0] * self.n_bins
        self.predicted = self.predicted or [0.0] * self.n_bins
        self.hits = self.hits or [0] * self.n_bins

    def add(self, predicted: float, hit: bool) -> None:
        """One observation: a prediction in [0, 1] and whether the event happened."""
        i = min(int(predicted * self.n_bins), self.n_bins - 1)
        self.n[i] += 1
        self.predicted[i] += predicted
        self.hits[i] += bool(hit)

    @property
    def total(self) -> int:
        return sum(self.n)

    def rows(self, z: float, min_n: int = MIN_N) -> list[dict[str, Any]]:
        """The non-empty bins: {lo, hi, n, predicted, observed, ci_low, ci_high, within}."""
        out = []
        for i, n in enumerate(self.n):
            if n == 0:
                continue
            pred, obs = self.predicted[i] / n, self.hits[i] / n
            low, high = wilson(self.hits[i], n, z)
            out.append(
                {
                    "lo": i / self.n_bins,
                    "hi": (i + 1) / self.n_bins,
                    "n": n,
                    "predicted": pred,
                    "observed": obs,
                    "ci_low": low,
                    "ci_high": high,
                    "within": low <= pred <= high,
                    "judged": n >= min_n,
                }
            )
        return out


@dataclass
class Calibration:
    """Reliability counts of draft decisions and of residual draws over many traces."""

    n_bins: int = N_BINS
    drafts: Bins = field(init=False)
    residual: Bins = field(init=False)
    traces: int = 0

    def __post_init__(self) -> None:
        self.drafts = Bins(self.n_bins)
        self.residual = Bins(self.n_bins)

    def add(self, trace: Trace) -> None:
        """Count one trace's sampled decisions of the rejection rule (AR, greedy and
        exact-match traces add none)."""
        self.traces += 1
        if trace.method != "spec":
            return
        for d in verified(trace):
            if d.u is not None:  # the rejection rule's prediction, from the record
                p = d.p_prime if d.p_prime is not None else d.p
                self.drafts.add(min(1.0, p / d.q) if d.q > 0 else 0.0, d.status == "accepted")
        if trace.settings.is_greedy:
            return
        top_n = trace.settings.top_n
        for r in trace.rounds:
            if r.added is not None and r.added.status == "resampled" and not r.exact_match:
                for e in residual_candidates(r.added.top, top_n):
                    self.residual.add(e["residual"], e["id"] == r.added.id)

    def add_all(self, traces: Iterable[Trace]) -> Calibration:
        for t in traces:
            self.add(t)
        return self

    def to_dict(self, confidence: float = CONFIDENCE, min_n: int = MIN_N) -> dict[str, Any]:
        """Plain values: `bins` (drafts), `residual_bins`, the interval and a summary."""
        z = bonferroni_z(self.n_bins, confidence)
        bins, residual = self.drafts.rows(z, min_n), self.residual.rows(z, min_n)
        return {
            "bins": bins,
            "residual_bins": residual,
            "interval": INTERVAL.format(c=confidence, m=self.n_bins, z=z),
            "confidence": confidence,
            "z": z,
            "min_n": min_n,
            "traces": self.traces,
            "drafts": self.drafts.total,
            "residual_candidates": self.residual.total,
            "summary": {"drafts": _summary(bins), "residual": _summary(residual)},
        }


def residual_candidates(top: list[dict[str, Any]], top_n: int) -> list[dict[str, Any]]:
    """The entries of an added token's top list that were listed whatever the draw: all but
    the drawn token appended past top_n (record.tops_of lists at most top_n before it)."""
    return top[:top_n]


def _summary(rows: list[dict[str, Any]]) -> dict[str, int]:
    judged = [r for r in rows if r["judged"]]
    return {"judged": len(judged), "within": sum(r["within"] for r in judged)}


def summary_line(result: dict[str, Any], key: str = "drafts") -> str:
    """One sentence: how many judged bins lie within their error bars."""
    s = result["summary"][key]
    return (
        f"{s['within']} of {s['judged']} bins with at least {result['min_n']} observations "
        f"lie within their error bars ({result['interval']})"
    )


def format_table(rows: list[dict[str, Any]]) -> str:
    """Bins as a plain-text table."""
    lines = ["     bin        n  predicted  observed  interval          within"]
    for b in rows:
        mark = ("yes" if b["within"] else "NO") if b["judged"] else "-"
        lines.append(
            f"{b['lo']:.2f}-{b['hi']:.2f}  {b['n']:>7d}  {b['predicted']:>9.3f}  "
            f"{b['observed']:>8.3f}  [{b['ci_low']:.3f}, {b['ci_high']:.3f}]  {mark:>6}"
        )
    return "\n".join(lines)


# --- reading traces ------------------------------------------------------------------------


def read_traces(paths: Iterable[str]) -> Iterator[Trace]:
    """Traces from files: one JSON trace per file, a JSON list of traces, or JSON lines as
    `generate --json --samples N` writes them; "-" reads stdin."""
    for path in paths:
        yield from _parse(path, _read(path))


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _parse(path: str, text: str) -> Iterator[Trace]:
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if whole is not None:
        for i, d in enumerate(whole if isinstance(whole, list) else [whole]):
            yield _trace(d, f"{path}: trace {i + 1}")
        return
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                d = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path} line {n}: not JSON ({exc.msg})") from None
            yield _trace(d, f"{path} line {n}")


def _trace(d: Any, where: str) -> Trace:
    try:
        return Trace.from_dict(d)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
