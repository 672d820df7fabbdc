"""The ratios: every reported figure is a ratio of two contenders' median ms/token.

Per (prompt, mode), larger than 1 favours specviz, except the trace overhead and the
tokens-per-round ratio, which are as named:

- (a) specviz autoregressive against transformers' ``generate()`` on the same target;
- (b) specviz speculative against ``generate(assistant_model=...)`` with the same draft at
  the same constant gamma; the best specviz gamma against transformers' default dynamic
  schedule; the n-gram drafter against ``prompt_lookup_num_tokens``;
- (c) specviz speculative against specviz autoregressive (the speedup);
- (d) the full trace (top-n lists, overlaps) against the minimal one;
- (e) measured tokens per round against Leviathan's (1 - alpha^(gamma+1)) / (1 - alpha);
- adaptive gamma against the best constant gamma.

``summarize_ratios`` pools the prompts: geometric means, the overhead's arithmetic mean.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from specviz import metrics
from specviz.bench.contenders import ADAPTIVE_START, contender_name
from specviz.bench.options import BenchOptions, reference_gamma
from specviz.bench.prompts import BenchPrompt

RatioItem = tuple[str, str, "int | None", "float | None"]  # item, what, gamma, value


def case_ratios(
    rows: list[dict[str, Any]], bp: BenchPrompt, mode: str, opts: BenchOptions
) -> list[dict[str, Any]]:
    """Every ratio of one (prompt, mode): one dict per ratio, larger than 1 favours specviz
    (except the trace overhead and the tokens-per-round ratio, which are as named)."""
    med = {name: _median_ms(rows, name) for name in {r["contender"] for r in rows}}
    items = _speed_ratios(med, opts) + _engine_ratios(med, rows, opts)
    greedy_ok = _greedy_agreement(rows) if mode == "greedy" else None
    keys = ("item", "ratio_of", "gamma", "value")
    base = {"prompt": bp.name, "kind": bp.kind, "mode": mode}
    return [
        base | dict(zip(keys, it, strict=True)) | {"greedy_outputs_agree": greedy_ok}
        for it in items
    ]


def _median_ms(rows: list[dict[str, Any]], name: str) -> float | None:
    ms = [r["ms_per_token"] for r in rows if r["contender"] == name]
    return statistics.median(ms) if ms else None


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _minus_one(x: float | None) -> float | None:
    return None if x is None else x - 1.0


def _greedy_agreement(rows: list[dict[str, Any]]) -> bool:
    return all(r.get("same_as_ar", True) for r in rows)


def _spec_medians(med: dict[str, float | None], opts: BenchOptions) -> dict[int, float | None]:
    """Median ms/token of specviz speculative at each constant gamma."""
    return {g: med.get(contender_name("specviz", "spec", g)) for g in opts.gammas}


def _best_gamma(med: dict[str, float | None], opts: BenchOptions) -> int | None:
    """The constant gamma with the lowest median ms/token."""
    spec = _spec_medians(med, opts)
    return min((g for g in spec if spec[g]), key=lambda g: spec[g] or 0.0, default=None)


def _speed_ratios(med: dict[str, float | None], opts: BenchOptions) -> list[RatioItem]:
    """(a), (b) and (c): transformers over specviz, and specviz AR over speculative."""
    g_ref, best_g = reference_gamma(opts.gammas), _best_gamma(med, opts)
    spec, ar = _spec_medians(med, opts), med.get(contender_name("specviz", "ar"))
    hf = {kind: med.get(contender_name("transformers", kind, g_ref)) for kind in ("ar", "lookup")}
    out: list[RatioItem] = [("a", "transformers AR / specviz AR", None, _ratio(hf["ar"], ar))]
    out += [
        (
            "b",
            "transformers assisted / specviz spec, constant gamma",
            g,
            _ratio(med.get(contender_name("transformers", "assisted", g)), spec[g]),
        )
        for g in opts.gammas
    ]
    default = med.get(contender_name("transformers", "default"))
    out.append(
        (
            "b-dynamic",
            "transformers assisted default / best specviz gamma",
            best_g,
            _ratio(default, spec.get(best_g)),
        )
    )
    ngram = med.get(contender_name("specviz", "ngram", g_ref))
    out.append(
        (
            "b-ngram",
            "transformers prompt lookup / specviz ngram",
            g_ref,
            _ratio(hf["lookup"], ngram),
        )
    )
    out += [
        ("c", "specviz AR / specviz spec (speedup)", g, _ratio(ar, spec[g])) for g in opts.gammas
    ]
    return out


def _engine_ratios(
    med: dict[str, float | None], rows: list[dict[str, Any]], opts: BenchOptions
) -> list[RatioItem]:
    """(d) trace overhead, (e) tokens per round against Leviathan, adaptive gamma."""
    g_ref, best_g = reference_gamma(opts.gammas), _best_gamma(med, opts)
    full = med.get(contender_name("specviz", "spec", g_ref))
    minimal = med.get(contender_name("specviz", "minimal", g_ref))
    out: list[RatioItem] = [
        ("d", "full trace / minimal trace - 1 (overhead)", g_ref, _minus_one(_ratio(full, minimal)))
    ]
    out += [
        ("e", "measured / Leviathan tokens per round", g, tokens_per_round_ratio(rows, g))
        for g in opts.gammas
    ]
    best = med.get(contender_name("specviz", "spec", best_g))
    adaptive = med.get(contender_name("specviz", "adaptive", ADAPTIVE_START))
    out.append(
        (
            "adaptive",
            "best constant gamma / adaptive (>1: adaptive faster)",
            best_g,
            _ratio(best, adaptive),
        )
    )
    return out


def tokens_per_round_ratio(rows: list[dict[str, Any]], gamma: int) -> float | None:
    """Measured tokens per full-size round over Leviathan's expectation at the pooled
    acceptance rate (accepted / verified drafts of those rounds, all repetitions)."""
    name = contender_name("specviz", "spec", gamma)
    rs = [r for r in rows if r["contender"] == name and r.get("full_rounds")]
    rounds = sum(r["full_rounds"] for r in rs)
    verified = sum(r["full_round_verified"] for r in rs)
    if not rounds or not verified:
        return None
    alpha = sum(r["full_round_accepted"] for r in rs) / verified
    measured = sum(r["full_round_tokens"] for r in rs) / rounds
    return measured / metrics.expected_tokens_per_round(alpha, gamma)


# --- pooled over prompts -------------------------------------------------------------------


def summarize_ratios(ratios: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Geometric means over prompts of each (mode, item, gamma), with the min and max."""
    groups: dict[tuple[str, str, Any], list[float]] = {}
    what: dict[tuple[str, str, Any], str] = {}
    for r in ratios:
        if r["value"] is None:
            continue
        key = (
            r["mode"],
            r["item"],
            r["gamma"] if r["item"] not in ("b-dynamic", "adaptive") else None,
        )
        groups.setdefault(key, []).append(r["value"])
        what[key] = r["ratio_of"]
    out = []
    for (mode, item, g), vals in groups.items():
        center = _mean_overhead(vals) if item == "d" else _geomean(vals)
        out.append(
            {
                "mode": mode,
                "item": item,
                "ratio_of": what[(mode, item, g)],
                "gamma": g,
                "value": center,
                "min": min(vals),
                "max": max(vals),
                "prompts": len(vals),
            }
        )
    return sorted(out, key=lambda r: (r["mode"], r["item"], r["gamma"] or 0))


def _geomean(vals: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in vals))


def _mean_overhead(vals: list[float]) -> float:
    return statistics.fmean(vals)
