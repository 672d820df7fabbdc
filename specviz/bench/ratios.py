"""The ratios: every reported figure is a ratio of two contenders' median ms/token.

Per (prompt, mode), larger than 1 favours specviz, except the trace overhead and the
tokens-per-round ratio, which are as named:

- (a) specviz autoregressive against transformers' ``generate()`` on the same target;
- (b) specviz speculative against ``generate(assistant_model=...)`` with the same draft at
  the same constant gamma; specviz's best schedule (its best constant gamma, or
  transformers' default schedule drafted by specviz) against transformers' default
  schedule; the n-gram drafter against ``prompt_lookup_num_tokens``;
- (c) specviz speculative against specviz autoregressive (the speedup);
- (d) the full trace (top-n lists, overlaps) against the minimal one, repetition by
  repetition, two ways: the runs' wall times (see paired_overhead), and the engine's time
  outside the model calls (see paired_trace_cost);
- (e) measured tokens per round against Leviathan's (1 - alpha^(gamma+1)) / (1 - alpha);
- adaptive gamma against the best constant gamma;
- with ``--compile``: the compiled path against the eager one (speculative and AR), against
  transformers' assisted generation and eager AR, and its own trace overhead.

The speedups ((c), and with ``--compile`` compiled AR / compiled spec and eager AR /
compiled spec) carry the roofline's prediction (``roofline_prediction``): what the ratio
would be with the runs at the memory's floor (each model's bytes per step over the measured
bandwidth, specviz.costs).

Each ratio's key (the "item" of ratios.csv, summary.csv and bench.json) says what it
divides by what. ``summarize_ratios`` pools the prompts: geometric means, the overheads'
arithmetic means.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from specviz import metrics
from specviz.bench.contenders import ADAPTIVE_START, HF_DEFAULT_TOKENS, contender_name
from specviz.bench.options import BenchOptions, reference_gamma
from specviz.bench.prompts import BenchPrompt

# Each ratio's key and what it divides by what ("ratio_of"), in the report's order.
AR_PARITY = "transformers_ar_over_specviz_ar"  # (a)
ASSISTED_PARITY = "transformers_assisted_over_specviz_spec"  # (b), same constant gamma
DEFAULT_SCHEDULE_PARITY = "transformers_assisted_default_over_specviz_best_schedule"  # (b)
LOOKUP_PARITY = "transformers_prompt_lookup_over_specviz_ngram"  # (b), n-gram drafting
SPEEDUP = "specviz_ar_over_specviz_spec"  # (c)
TRACE_OVERHEAD = "full_trace_overhead_vs_minimal"  # (d): full / minimal - 1
TRACE_COST = "full_trace_cost_over_run"  # (d): the full trace's own time / the run
ROUND_TOKENS_VS_THEORY = "measured_over_leviathan_tokens_per_round"  # (e)
ADAPTIVE_GAIN = "best_constant_gamma_over_adaptive"
COMPILED_SPEC_GAIN = "specviz_spec_over_compiled_spec"
COMPILED_AR_GAIN = "specviz_ar_over_compiled_ar"
COMPILED_ASSISTED_PARITY = "transformers_assisted_over_compiled_spec"
COMPILED_SPEEDUP = "specviz_ar_over_compiled_spec"
COMPILED_PATH_SPEEDUP = "compiled_ar_over_compiled_spec"
COMPILED_TRACE_OVERHEAD = "compiled_full_trace_overhead_vs_minimal"
COMPILED_TRACE_COST = "compiled_full_trace_cost_over_run"
RATIO_OF = {
    AR_PARITY: "transformers AR / specviz AR",
    ASSISTED_PARITY: "transformers assisted / specviz spec, constant gamma",
    DEFAULT_SCHEDULE_PARITY: "transformers assisted default / best specviz schedule",
    LOOKUP_PARITY: "transformers prompt lookup / specviz ngram",
    SPEEDUP: "specviz AR / specviz spec (speedup)",
    TRACE_OVERHEAD: "full trace / minimal trace - 1 (overhead, wall time)",
    TRACE_COST: "(full - minimal) time outside the model calls / minimal run (trace cost)",
    ROUND_TOKENS_VS_THEORY: "measured / Leviathan tokens per round",
    ADAPTIVE_GAIN: "best constant gamma / adaptive (>1: adaptive faster)",
    COMPILED_SPEC_GAIN: "eager spec / compiled spec (>1: compiled faster)",
    COMPILED_AR_GAIN: "eager AR / compiled AR (>1: compiled faster)",
    COMPILED_ASSISTED_PARITY: "transformers assisted / compiled spec, constant gamma",
    COMPILED_SPEEDUP: "eager specviz AR / compiled spec (speedup)",
    COMPILED_PATH_SPEEDUP: "compiled AR / compiled spec (speedup on the compiled path)",
    COMPILED_TRACE_OVERHEAD: "compiled: full trace / minimal trace - 1 (overhead, wall time)",
    COMPILED_TRACE_COST: "compiled: (full - minimal) time outside the model calls / run",
}
RATIO_KEYS = tuple(RATIO_OF)
COMPILED_ITEMS = (  # reported only by a bench run with --compile
    COMPILED_SPEC_GAIN,
    COMPILED_AR_GAIN,
    COMPILED_ASSISTED_PARITY,
    COMPILED_SPEEDUP,
    COMPILED_PATH_SPEEDUP,
    COMPILED_TRACE_OVERHEAD,
    COMPILED_TRACE_COST,
)
OVERHEADS = (TRACE_OVERHEAD, TRACE_COST, COMPILED_TRACE_OVERHEAD, COMPILED_TRACE_COST)
AT_BEST_GAMMA = (DEFAULT_SCHEDULE_PARITY, ADAPTIVE_GAIN)  # one per prompt, whatever its gamma

Medians = dict[str, "float | None"]  # contender name: median ms/token
RatioItem = tuple[str, "int | None", "float | None"]  # key, gamma, value


def case_ratios(
    rows: list[dict[str, Any]],
    bp: BenchPrompt,
    mode: str,
    opts: BenchOptions,
    roof: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every ratio of one (prompt, mode): one dict per ratio, larger than 1 favours specviz
    (except the trace overhead and the tokens-per-round ratio, which are as named); the
    speedups carry the roofline's prediction (roofline_prediction) when roof is given."""
    med = {name: _median_ms(rows, name) for name in {r["contender"] for r in rows}}
    items = _speed_ratios(med, opts) + _engine_ratios(med, rows, opts)
    if opts.compile:
        items += _compiled_ratios(med, rows, opts)
    greedy_ok = _greedy_agreement(rows) if mode == "greedy" else None
    base = {"prompt": bp.name, "kind": bp.kind, "mode": mode}
    return [
        base
        | {"item": key, "ratio_of": RATIO_OF[key], "gamma": g, "value": value}
        | {"roofline": roofline_prediction(key, g, rows, med, roof)}
        | {"greedy_outputs_agree": greedy_ok}
        for key, g, value in items
    ]


# --- the roofline's prediction -------------------------------------------------------------

ROOFLINE_ITEMS = (SPEEDUP, COMPILED_PATH_SPEEDUP, COMPILED_SPEEDUP)


def roofline(target_bytes: int, draft_bytes: int | None, gb_s: float) -> dict[str, Any]:
    """What the bench's roofline predictions need: each model's bytes per step and their
    floors at the measured bandwidth (specviz.costs)."""
    floor = lambda n: None if n is None else n / (gb_s * 1e9) * 1e3  # noqa: E731
    return {
        "bandwidth_gb_s": gb_s,
        "target_bytes": target_bytes,
        "draft_bytes": draft_bytes,
        "target_floor_ms": floor(target_bytes),
        "draft_floor_ms": floor(draft_bytes),
    }


def pooled_alpha(rows: list[dict[str, Any]], name: str) -> float | None:
    """The acceptance rate of a contender's full-size rounds, all repetitions pooled."""
    rs = [r for r in rows if r["contender"] == name and r.get("full_round_verified")]
    verified = sum(r["full_round_verified"] for r in rs)
    return sum(r["full_round_accepted"] for r in rs) / verified if verified else None


def spec_floor_ms(roof: dict[str, Any], alpha: float, gamma: int) -> float:
    """ms per token of a speculative run at the memory's floor: gamma draft steps and one
    verify call (the target's weights read once, as a step), over Leviathan's expected
    tokens per round."""
    per_round = gamma * roof["draft_floor_ms"] + roof["target_floor_ms"]
    return per_round / metrics.expected_tokens_per_round(alpha, gamma)


def roofline_prediction(
    key: str,
    gamma: int | None,
    rows: list[dict[str, Any]],
    med: Medians,
    roof: dict[str, Any] | None,
) -> float | None:
    """The roofline's prediction for a speedup: AR / spec on one path with both at their
    floors (Leviathan's formula at c = draft bytes / target bytes and the run's alpha), or,
    for eager AR / compiled spec, the measured eager AR over the compiled spec at its
    floor. None for other ratios, or when the bytes or alpha are missing."""
    if roof is None or key not in ROOFLINE_ITEMS or gamma is None or not roof.get("draft_bytes"):
        return None
    kind = "spec" if key == SPEEDUP else "spec-compiled"
    alpha = pooled_alpha(rows, contender_name("specviz", kind, gamma))
    if alpha is None:
        return None
    floor = spec_floor_ms(roof, alpha, gamma)
    if key == COMPILED_SPEEDUP:
        return _ratio(_med(med, "specviz", "ar"), floor)
    return roof["target_floor_ms"] / floor


def _median_ms(rows: list[dict[str, Any]], name: str) -> float | None:
    ms = [r["ms_per_token"] for r in rows if r["contender"] == name]
    return statistics.median(ms) if ms else None


def _med(med: Medians, side: str, kind: str, g: int | None = None) -> float | None:
    """One contender's median ms/token; None where it did not run."""
    return med.get(contender_name(side, kind, g))


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _greedy_agreement(rows: list[dict[str, Any]]) -> bool:
    return all(r.get("same_as_ar", True) for r in rows)


def _spec_medians(med: Medians, opts: BenchOptions) -> dict[int, float | None]:
    """Median ms/token of specviz speculative at each constant gamma."""
    return {g: _med(med, "specviz", "spec", g) for g in opts.gammas}


def _best_gamma(med: Medians, opts: BenchOptions) -> int | None:
    """The constant gamma with the lowest median ms/token."""
    spec = _spec_medians(med, opts)
    return min((g for g in spec if spec[g]), key=lambda g: spec[g] or 0.0, default=None)


def _best_schedule(
    med: Medians, best_constant: float | None, best_g: int | None, hf_default: float | None
) -> tuple[int | None, float | None]:
    """transformers' default schedule against specviz's quicker schedule: its best constant
    gamma, or the same schedule as transformers' default (the "confident" contender).
    Returns the winner's gamma and the ratio."""
    confident = _med(med, "specviz", "confident", HF_DEFAULT_TOKENS)
    if confident is not None and (best_constant is None or confident < best_constant):
        return HF_DEFAULT_TOKENS, _ratio(hf_default, confident)
    return best_g, _ratio(hf_default, best_constant)


def _speed_ratios(med: Medians, opts: BenchOptions) -> list[RatioItem]:
    """(a), (b) and (c): transformers over specviz, and specviz AR over speculative."""
    g_ref, best_g = reference_gamma(opts.gammas), _best_gamma(med, opts)
    spec, ar = _spec_medians(med, opts), _med(med, "specviz", "ar")
    hf_ar, hf_default = _med(med, "transformers", "ar"), _med(med, "transformers", "default")
    assisted = {g: _med(med, "transformers", "assisted", g) for g in opts.gammas}
    ngram, lookup = _med(med, "specviz", "ngram", g_ref), _med(med, "transformers", "lookup", g_ref)
    return [
        (AR_PARITY, None, _ratio(hf_ar, ar)),
        *[(ASSISTED_PARITY, g, _ratio(assisted[g], spec[g])) for g in opts.gammas],
        (DEFAULT_SCHEDULE_PARITY, *_best_schedule(med, spec.get(best_g), best_g, hf_default)),
        (LOOKUP_PARITY, g_ref, _ratio(lookup, ngram)),
        *[(SPEEDUP, g, _ratio(ar, spec[g])) for g in opts.gammas],
    ]


def paired_overhead(rows: list[dict[str, Any]], full: str, minimal: str) -> float | None:
    """The trace overhead: the median over repetitions of full / minimal - 1, each
    repetition's two runs taken together. They ran side by side with the same seed, so they
    made the same tokens in the same rounds; a ratio of medians could set one seed's run
    against another's, and acceptance varies from seed to seed far more than the trace
    costs."""
    ms: dict[tuple[str, Any], float] = {
        (r["contender"], r["rep"]): r["ms_per_token"] for r in rows if r.get("ms_per_token")
    }
    reps = sorted({rep for _, rep in ms})
    pairs = [ms[full, r] / ms[minimal, r] for r in reps if (full, r) in ms and (minimal, r) in ms]
    return statistics.median(pairs) - 1.0 if pairs else None


def paired_trace_cost(rows: list[dict[str, Any]], full: str, minimal: str) -> float | None:
    """What the full trace costs the engine: the median over repetitions of the full run's
    time outside the model calls minus its minimal twin's, over the minimal run's wall time.

    The twins make the same model calls (same seed, same tokens, same rounds), so their
    draft and verify times differ only by the machine's noise, which on a shared 2-core
    CPU moves a run by several percent either way; what the full trace adds (the top-n
    lists, the overlaps, the stats over them) all lies outside those calls: in the
    round's record, the emitted tokens and the run's summary."""

    def outside(r: dict[str, Any]) -> float:  # seconds: the run minus its model calls
        return r["wall_s"] - (r["draft_ms"] + r["verify_ms"]) / 1e3

    by = {
        (r["contender"], r["rep"]): r
        for r in rows
        if r.get("wall_s") and r.get("draft_ms") is not None and r.get("verify_ms") is not None
    }
    reps = sorted({rep for _, rep in by})
    costs = [
        (outside(by[full, rep]) - outside(by[minimal, rep])) / by[minimal, rep]["wall_s"]
        for rep in reps
        if (full, rep) in by and (minimal, rep) in by
    ]
    return statistics.median(costs) if costs else None


def _engine_ratios(med: Medians, rows: list[dict[str, Any]], opts: BenchOptions) -> list[RatioItem]:
    """(d) trace overhead, (e) tokens per round against Leviathan, adaptive gamma."""
    g_ref, best_g = reference_gamma(opts.gammas), _best_gamma(med, opts)
    full = contender_name("specviz", "spec", g_ref)
    minimal = contender_name("specviz", "minimal", g_ref)
    best = _med(med, "specviz", "spec", best_g)
    adaptive = _med(med, "specviz", "adaptive", ADAPTIVE_START)
    return [
        (TRACE_OVERHEAD, g_ref, paired_overhead(rows, full, minimal)),
        (TRACE_COST, g_ref, paired_trace_cost(rows, full, minimal)),
        *[(ROUND_TOKENS_VS_THEORY, g, tokens_per_round_ratio(rows, g)) for g in opts.gammas],
        (ADAPTIVE_GAIN, best_g, _ratio(best, adaptive)),
    ]


def _compiled_ratios(
    med: Medians, rows: list[dict[str, Any]], opts: BenchOptions
) -> list[RatioItem]:
    """The compiled path against the eager one, transformers, and its own minimal trace."""
    g_ref = reference_gamma(opts.gammas)
    spec, ar = _spec_medians(med, opts), _med(med, "specviz", "ar")
    car = _med(med, "specviz", "ar-compiled")
    cspec = {g: _med(med, "specviz", "spec-compiled", g) for g in opts.gammas}
    assisted = {g: _med(med, "transformers", "assisted", g) for g in opts.gammas}
    full = contender_name("specviz", "spec-compiled", g_ref)
    minimal = contender_name("specviz", "minimal-compiled", g_ref)
    return [
        *[(COMPILED_SPEC_GAIN, g, _ratio(spec[g], cspec[g])) for g in opts.gammas],
        (COMPILED_AR_GAIN, None, _ratio(ar, car)),
        *[(COMPILED_ASSISTED_PARITY, g, _ratio(assisted[g], cspec[g])) for g in opts.gammas],
        *[(COMPILED_SPEEDUP, g, _ratio(ar, cspec[g])) for g in opts.gammas],
        *[(COMPILED_PATH_SPEEDUP, g, _ratio(car, cspec[g])) for g in opts.gammas],
        (COMPILED_TRACE_OVERHEAD, g_ref, paired_overhead(rows, full, minimal)),
        (COMPILED_TRACE_COST, g_ref, paired_trace_cost(rows, full, minimal)),
    ]


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
    roofs: dict[tuple[str, str, Any], list[float]] = {}
    for r in ratios:
        if r["value"] is None:
            continue
        key = (
            r["mode"],
            r["item"],
            r["gamma"] if r["item"] not in AT_BEST_GAMMA else None,
        )
        groups.setdefault(key, []).append(r["value"])
        if r.get("roofline") is not None:
            roofs.setdefault(key, []).append(r["roofline"])
        what[key] = r["ratio_of"]
    out = []
    for (mode, item, g), vals in groups.items():
        overhead = item in OVERHEADS
        center = _mean_overhead(vals) if overhead else _geomean(vals)
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
                "roofline": _geomean(roofs[(mode, item, g)]) if (mode, item, g) in roofs else None,
            }
        )
    return sorted(out, key=lambda r: (r["mode"], RATIO_KEYS.index(r["item"]), r["gamma"] or 0))


def _geomean(vals: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(value) for value in vals))


def _mean_overhead(vals: list[float]) -> float:
    return statistics.fmean(vals)
