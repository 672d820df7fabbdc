"""Every verification on one prompt, side by side: the same prompt, seed and settings under
each, against one autoregressive baseline run in the same process after a warm-up. Per
verification: the acceptance rate, tokens per target call, the measured speedup, the mean
TV(out, p) per verified position (the distortion each decision adds: 0 up to float error for
the lossless ones) and the distribution check's verdict. The command line prints it
(specviz.cli.verifications); specviz.views.figures draws acceptance against TV.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from specviz import metrics
from specviz.analysis import distribution_check
from specviz.config import LOSSY_VERIFICATIONS, VERIFICATIONS, Settings, verification_label
from specviz.engine import check_request, generate, warm_up


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

    def cells(self) -> list[str]:
        """The row as the command line's and the app's tables print it (COLUMNS)."""
        tv = "not measured" if self.mean_out_tv is None else f"{self.mean_out_tv:.3g}"
        passed = self.check_passed
        return [
            verification_label(self.verification),
            f"{self.acceptance_rate:.3f}",
            f"{self.tokens_per_call:.2f}",
            f"{self.speedup:.2f}x",
            tv,
            "skipped" if passed is None else "PASS" if passed else "FAIL",
        ]


COLUMNS = ("verification", "acceptance", "tokens/call", "speedup", "mean TV(out, p)", "check")


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
    """The steps of a comparison: the baseline, then a run (and a check) per verification."""
    return 1 + len(VERIFICATIONS) * (2 if check else 1)


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
    the same prompt, seed and settings under each verification, against one autoregressive
    baseline run in this process after a warm-up. The check (n samples, length tokens) is
    skipped when check is False."""
    check_request(pair, prompt, settings, raw=raw)
    if check:
        distribution_check.validate(n, length, "rejection")
    total, done = steps(check), 0
    yield Progress(done, total, "warming up, then the autoregressive baseline")
    warm_up(pair, prompt, settings, raw=raw)
    ar = generate(pair, prompt, settings.with_(method="ar"), raw=raw)
    done += 1
    for verification in VERIFICATIONS:
        s = settings.with_(method="spec", verification=verification)
        name = verification_label(verification)
        yield Progress(done, total, f"{name}: generating")
        spec = generate(pair, prompt, s, raw=raw)
        done += 1
        passed = None
        if check:
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
        yield Row(
            verification=verification,
            lossy=verification in LOSSY_VERIFICATIONS,
            acceptance_rate=spec.stats.acceptance_rate,
            tokens_per_call=spec.stats.tokens_per_call,
            speedup=metrics.speedup(ar, spec),
            mean_out_tv=spec.stats.mean_out_tv,
            check_passed=passed,
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
