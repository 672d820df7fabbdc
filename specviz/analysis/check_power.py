"""The distribution check's power against a known wrong distribution, computed.

When a verification's computed first-token distribution ``out`` is known
(specviz.verify), the chance that the check's first-token comparison rejects "the samples
follow p" at N samples follows from simulation alone: bin p as the check bins it
(specviz.analysis.binning), draw N-sample counts from out over the same bins many times,
and count how often Pearson's statistic passes the comparison's critical value. No model call.
"""

from __future__ import annotations

import torch

from specviz.analysis.binning import MIN_EXPECTED
from specviz.analysis.chisquare import chi2_sf
from specviz.verify import base as verify_base

DRAWS = 5000


def critical_value(dof: int, level: float) -> float:
    """The statistic x with P(chi-square(dof) >= x) = level, by bisection."""
    lo, hi = 0.0, 1000.0 + 50.0 * dof
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chi2_sf(mid, dof) > level else (lo, mid)
    return hi


def binned(p: torch.Tensor, out: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """p and out [V] over the check's first-token bins: each token with n p >= MIN_EXPECTED,
    then "other", folded into the smallest bin when its own expected count is positive but
    too small (specviz.analysis.binning.merge_small_other)."""
    p, out = p.double().cpu(), out.double().cpu()
    own = n * p >= MIN_EXPECTED
    order = torch.argsort(-p[own], stable=True)
    pb = torch.cat([p[own][order], p[~own].sum()[None]])
    ob = torch.cat([out[own][order], out[~own].sum()[None]])
    other = float(pb[-1])
    if len(pb) >= 2 and 0.0 < other and n * other < MIN_EXPECTED:
        pb = torch.cat([pb[:-2], (pb[-2] + pb[-1])[None]])
        ob = torch.cat([ob[:-2], (ob[-2] + ob[-1])[None]])
    return pb, ob


def first_token_power(
    p: torch.Tensor, out: torch.Tensor, n: int, level: float, seed: int = 0, draws: int = DRAWS
) -> float:
    """P(the first-token comparison rejects p at this level) when its n samples follow out,
    estimated from `draws` simulated checks (seeded: the same inputs give the same value)."""
    pb, ob = binned(p, out, n)
    ob = ob.clamp_min(0.0)
    possible = pb > 0
    dof = int(possible.sum()) - 1
    if dof < 1:
        return 0.0
    gen = torch.Generator().manual_seed(seed)
    picks = torch.multinomial(ob.float(), n * draws, replacement=True, generator=gen)
    rows = torch.arange(draws).repeat_interleave(n)
    counts = torch.zeros(draws, len(pb), dtype=torch.float64)
    counts.index_put_((rows, picks), torch.ones(n * draws, dtype=torch.float64), accumulate=True)
    expected = n * pb[possible]
    stat = ((counts[:, possible] - expected) ** 2 / expected).sum(-1)
    impossible = (counts[:, ~possible] > 0).any(-1)  # an outcome p never emits: stat = inf
    crit = critical_value(dof, level)
    return float(((stat > crit) | impossible).double().mean())


def total_variation(p: torch.Tensor, out: torch.Tensor) -> float:
    """TV(out, p) over the whole vocabulary, p normalised as every draw from it is."""
    return float(verify_base.total_variation(out, verify_base.normalised(p)))
