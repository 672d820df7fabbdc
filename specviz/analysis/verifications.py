"""Every verification on one prompt, side by side: the same prompt, seed and settings under
each, against one autoregressive baseline run in the same process after a warm-up. Per
verification: the acceptance rate, tokens per target call, the measured speedup, the mean
TV(out, p) per verified position (the distortion each decision adds: 0 up to float error for
the lossless ones) and the distribution check's verdict. The command line prints it
(specviz.cli.verifications); specviz.views.figures draws acceptance against TV.
"""

from __future__ import annotations

from collections.abc import Callable
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
    """One Row per verification, each from the same prompt, seed and settings, against one
    autoregressive baseline run in this process after a warm-up. The check (n samples,
    length tokens) is skipped when check is False; say receives a progress line per step."""
    check_request(pair, prompt, settings, raw=raw)
    warm_up(pair, prompt, settings, raw=raw)
    ar = generate(pair, prompt, settings.with_(method="ar"), raw=raw)
    rows = []
    for v in VERIFICATIONS:
        s = settings.with_(method="spec", verification=v)
        say(f"{verification_label(v)}: generating")
        spec = generate(pair, prompt, s, raw=raw)
        passed = None
        if check:
            say(f"{verification_label(v)}: distribution check, n = {n}, length {length}")
            result = distribution_check.run_check(pair, prompt, s, n=n, length=length, raw=raw)
            passed = result.passed
        rows.append(
            Row(
                verification=v,
                lossy=v in LOSSY_VERIFICATIONS,
                acceptance_rate=spec.stats.acceptance_rate,
                tokens_per_call=spec.stats.tokens_per_call,
                speedup=metrics.speedup(ar, spec),
                mean_out_tv=spec.stats.mean_out_tv,
                check_passed=passed,
            )
        )
    return rows
