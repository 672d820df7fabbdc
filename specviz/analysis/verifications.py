"""Every verification on one prompt, side by side: the same prompt, seed and settings under
each, against one autoregressive baseline, all of them interleaved on one thread after a
warm-up (specviz.engine.interleave: each run on its own clock, always the one with the
fewest tokens next), so that every verification meets the same load as the baseline,
stretch by stretch. Per verification: tokens per target call first (what the decision
buys, free of timing noise), the acceptance rate, the measured speedup with the middle 90 %
of its bootstrap (specviz.metrics.paired_speedup), the mean TV(out, p) per verified
position (the distortion each decision adds: 0 up to float error for the lossless ones) and
the distribution check's verdict. Where two speedups' spreads overlap, the timing cannot
tell them apart (:func:`indistinct`). The command line prints it
(specviz.cli.verifications); specviz.views.figures draws acceptance against TV.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from specviz import metrics
from specviz.analysis import distribution_check
from specviz.config import LOSSY_VERIFICATIONS, VERIFICATIONS, Settings, verification_label
from specviz.engine import Run, check_request, interleave, warm_up


@dataclass
class Row:
    """One verification's figures (the --json row)."""

    verification: str
    lossy: bool
    acceptance_rate: float
    tokens_per_call: float
    speedup: float
    mean_out_tv: float | None
    check_passed: bool | None  # None: the check was skipped
    # the middle 90 % of the speedup's bootstrap over the run's stretches
    speedup_low: float | None = None
    speedup_high: float | None = None

    def cells(self) -> list[str]:
        """The row as the command line's and the app's tables print it (COLUMNS)."""
        tv = "not measured" if self.mean_out_tv is None else f"{self.mean_out_tv:.3g}"
        passed = self.check_passed
        return [
            verification_label(self.verification),
            f"{self.tokens_per_call:.2f}",
            f"{self.acceptance_rate:.3f}",
            self.speedup_text(),
            tv,
            "skipped" if passed is None else "PASS" if passed else "FAIL",
        ]

    def speedup_text(self) -> str:
        """E.g. "1.32x (1.18–1.47)": the speedup and its spread."""
        if self.speedup_low is None or self.speedup_high is None:
            return f"{self.speedup:.2f}x"
        return f"{self.speedup:.2f}x ({self.speedup_low:.2f}\u2013{self.speedup_high:.2f})"


COLUMNS = (
    "verification",
    "tokens/call",
    "acceptance",
    "speedup (middle 90 %)",
    "mean TV(out, p)",
    "check",
)


def indistinct(rows: list[Row]) -> list[tuple[Row, Row]]:
    """The pairs of rows whose speedups' spreads overlap: the timing cannot tell them
    apart, whatever their values' order."""
    out = []
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            if None in (a.speedup_low, a.speedup_high, b.speedup_low, b.speedup_high):
                continue
            if a.speedup_low <= b.speedup_high and b.speedup_low <= a.speedup_high:  # type: ignore[operator]
                out.append((a, b))
    return out


def timing_sentence(rows: list[Row]) -> str:
    """What the timing can and cannot tell: tokens per target call ranks the verifications
    free of timing noise; each pair whose speedups' spreads overlap is named ("" with
    fewer than two rows)."""
    if len(rows) < 2:
        return ""
    ranked = sorted(rows, key=lambda r: -r.tokens_per_call)
    lead = "Tokens per target call, free of timing noise: " + ", ".join(
        f"{verification_label(r.verification)} {r.tokens_per_call:.2f}" for r in ranked
    )
    pairs = indistinct(rows)
    if not pairs:
        return lead + ". Every speedup's spread is clear of the others'."
    names = "; ".join(
        f"{verification_label(a.verification)} and {verification_label(b.verification)}"
        for a, b in pairs
    )
    return (
        f"{lead}. The timing cannot tell these apart (their speedups' middle 90 % "
        f"overlap): {names}."
    )


@dataclass(frozen=True)
class Progress:
    """How far a comparison has got: steps done out of the total, the step under way, and
    within a check, the samples drawn out of its total."""

    done: int
    total: int
    stage: str
    samples: tuple[int, int] | None = None

    def text(self) -> str:
        """The step under way, in words."""
        if self.samples is None:
            return self.stage
        return f"{self.stage}: {self.samples[0]} of {self.samples[1]} samples"


def steps(check: bool) -> int:
    """The steps of a comparison: the runs (the baseline and every verification,
    interleaved), then a check per verification."""
    return 1 + (len(VERIFICATIONS) if check else 0)


def iter_compare(
    pair: Any,
    prompt: str,
    settings: Settings,
    n: int = 400,
    length: int = 1,
    check: bool = True,
    raw: bool = False,
) -> Iterator[Progress | Row]:
    """Each verification's Row as it is measured, with Progress before every step (and
    within a check, after each pair of samples), so that a caller can stop it between items:
    the same prompt, seed and settings under each verification and one autoregressive
    baseline, interleaved in this process after a warm-up; then the check of each (n
    samples, length tokens), skipped when check is False."""
    check_request(pair, prompt, settings, raw=raw)
    if check:
        distribution_check.validate(n, length, "rejection")
    total, done = steps(check), 0
    yield Progress(done, total, "warming up, then the baseline and every verification, interleaved")
    warm_up(pair, prompt, settings, raw=raw)
    ar = Run(pair, prompt, settings.with_(method="ar"), raw=raw)
    specs = {
        name: Run(pair, prompt, settings.with_(method="spec", verification=name), raw=raw)
        for name in VERIFICATIONS
    }
    for _ in interleave([ar, *specs.values()]):
        pass
    done += 1
    for verification, run in specs.items():
        spec = run.trace
        passed = None
        name = verification_label(verification)
        if check:
            s = settings.with_(method="spec", verification=verification)
            stage = f"{name}: distribution check, n = {n}, length {length}"
            yield Progress(done, total, stage)
            result = None
            for item in distribution_check.iter_check(pair, prompt, s, n, length, raw=raw):
                if isinstance(item, distribution_check.CheckResult):
                    result = item
                else:
                    yield Progress(done, total, stage, (item.done, item.total))
            assert result is not None
            passed = result.passed
            done += 1
        measured = metrics.paired_speedup(ar.trace, spec)
        yield Row(
            verification=verification,
            lossy=verification in LOSSY_VERIFICATIONS,
            acceptance_rate=spec.stats.acceptance_rate,
            tokens_per_call=spec.stats.tokens_per_call,
            speedup=measured.value if measured is not None else 0.0,
            mean_out_tv=spec.stats.mean_out_tv,
            check_passed=passed,
            speedup_low=measured.low if measured is not None else None,
            speedup_high=measured.high if measured is not None else None,
        )


def compare(
    pair: Any,
    prompt: str,
    settings: Settings,
    n: int = 400,
    length: int = 1,
    check: bool = True,
    raw: bool = False,
    say: Callable[[str], None] = lambda message: None,
) -> list[Row]:
    """One Row per verification (see :func:`iter_compare`); say receives a line as each step
    starts."""
    rows = []
    for item in iter_compare(pair, prompt, settings, n, length, check, raw):
        if isinstance(item, Row):
            rows.append(item)
        elif item.samples is None:
            say(item.stage)
    return rows
