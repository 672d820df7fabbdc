"""The GPU check's stages for specviz's compiled path (specviz.backend: a static KV cache,
forwards compiled for a few fixed shapes, and on CUDA captured as CUDA graphs), run the way
the engine runs it:

- steps: one decode step of each model, eager (``CachedLM``) against compiled
  (``StaticLM``), with compile time, recompiles in steady state and any CUDA graph that
  inductor declined to capture;
- runs: whole greedy generations through the engine, speculative and autoregressive, eager
  and compiled, in ms per token (marginal between a short and a long run);
- exactness on the device: greedy speculative against greedy autoregressive on both paths,
  a sampled trace eager against compiled, and the distribution check
  (specviz.analysis.distribution_check) on the compiled path, with the rejection rule and with
  a deliberately wrong one.

The steps and the runs share one cache length, so the shapes the steps compile serve the
runs too. Compiling is skipped once the plan's time budget is spent."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import statistics
import time
from collections.abc import Iterator
from typing import Any

import torch

from specviz.backend import StaticLM, compiler_for
from specviz.clock import clock
from specviz.config import Settings
from specviz.engine import generate
from specviz.gpucheck.measure import forward_ms, lm_ms
from specviz.gpucheck.plan import GAMMA, Plan, build, close_draft, pair_of, prompt_ids
from specviz.pair import ModelPair


def lengths(plan: Plan) -> list[int]:
    """New tokens of the short and the long run (every draft accepted: gamma + 1 a round)."""
    return [r * (GAMMA + 1) for r in plan.rounds]


def max_len(plan: Plan) -> int:
    """The positions a run writes, as the engine counts them (specviz.engine.Run._lm)."""
    return plan.prompt_tokens + max(lengths(plan)) + GAMMA + 2


def _counter(group: str, key: str) -> int:
    return int(torch._dynamo.utils.counters[group][key])


@contextlib.contextmanager
def graph_skip_reasons() -> Iterator[list[str]]:
    """The messages inductor logs when it cannot capture a CUDA graph."""
    from torch._inductor.cudagraph_utils import cudagraphs_log

    reasons: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            reasons.append(record.getMessage())

    handler = Keep(logging.WARNING)
    cudagraphs_log.addHandler(handler)
    try:
        yield reasons
    finally:
        cudagraphs_log.removeHandler(handler)


def out_of_time(plan: Plan, t_start: float) -> str | None:
    if time.perf_counter() - t_start > plan.budget_s:
        return f"out of time (budget {plan.budget_s:.0f} s)"
    return None


def compiled_steps(
    draft: torch.nn.Module, target: torch.nn.Module, plan: Plan, t_start: float
) -> dict:
    """One decode step per model, eager against the compiled path."""
    res: dict[str, Any] = {"backend": plan.compile, "rows": []}
    comp = compiler_for(plan.compile) if plan.compile != "off" else None
    for name, model in (("draft", draft), ("target", target)):
        vocab = model.config.vocab_size
        ids = prompt_ids(plan, vocab)
        row: dict[str, Any] = {"model": name}
        row["eager_ms"] = forward_ms(model, plan, ids, 1)
        skip = "--compile off" if comp is None else out_of_time(plan, t_start)
        if skip:
            row["skipped"] = skip
            res["rows"].append(row)
            continue
        graphs, skips = comp.compiles, _counter("inductor", "cudagraph_skips")
        lm = StaticLM(model, name, vocab, comp, (1,), max_len(plan))
        try:
            with graph_skip_reasons() as reasons:
                t0 = clock(plan.device)
                lm.logits(ids)  # the prefill compiles the one-token shape
                row["compile_s"] = clock(plan.device) - t0
                row["compiles"] = comp.compiles - graphs
                graphs = comp.compiles
                with torch.inference_mode():
                    row["compiled_ms"] = lm_ms(lm, plan, ids)
        finally:
            lm.close()
        row["recompiles"] = comp.compiles - graphs
        # inductor runs plain kernels (no CUDA graph) where it cannot capture one
        row["graph_skips"] = _counter("inductor", "cudagraph_skips") - skips
        if reasons:
            row["graph_skip_reasons"] = sorted(set(reasons))
        row["speedup"] = row["eager_ms"] / row["compiled_ms"]
        res["rows"].append(row)
    d, t = res["rows"]
    res["c_eager"] = d["eager_ms"] / t["eager_ms"]
    if "compiled_ms" in d and "compiled_ms" in t:
        res["c_compiled"] = d["compiled_ms"] / t["compiled_ms"]
    return res


def engine_runs(
    draft: torch.nn.Module, target: torch.nn.Module, plan: Plan, t_start: float
) -> dict:
    """Greedy generations through the engine, every draft accepted (the check's networks
    give every logit 0): ms per token, marginal between the short and the long run."""
    pair = pair_of(draft, target, plan, "draft")
    prompt = " ".join(map(str, prompt_ids(plan, target.config.vocab_size)))
    paths: dict[str, ModelPair] = {"eager": pair}
    res: dict[str, Any] = {"gamma": GAMMA, "tokens": lengths(plan), "rows": []}
    if plan.compile == "off":
        res["skipped"] = "--compile off"
    elif skip := out_of_time(plan, t_start):
        res["skipped"] = skip
    else:
        paths["compiled"] = pair.with_compile(plan.compile)
    comp = compiler_for(plan.compile) if "compiled" in paths else None
    ms: dict[tuple[str, str], float] = {}
    for path, p in paths.items():
        for method in ("spec", "ar"):
            s = Settings(greedy=True, gamma=GAMMA, method=method, trace_level="minimal")
            for n in lengths(plan):  # warm-up: on the compiled path, compiles every shape
                generate(p, prompt, s.with_(max_new_tokens=n), raw=True)
            graphs = comp.compiles if comp else 0
            walls = {}
            for n in lengths(plan):
                runs = []
                for _ in range(plan.runs):
                    t0 = clock(plan.device)
                    trace = generate(p, prompt, s.with_(max_new_tokens=n), raw=True)
                    runs.append(clock(plan.device) - t0)
                    if len(trace.token_ids) != n:
                        raise RuntimeError(f"{path} {method}: {len(trace.token_ids)} tokens")
                walls[n] = statistics.median(runs)
            short, long = lengths(plan)
            ms[path, method] = (walls[long] - walls[short]) * 1e3 / (long - short)
            row = {"path": path, "method": method, "ms_per_token": ms[path, method]}
            if method == "spec":
                row["tokens_per_round"] = len(trace.token_ids) / len(trace.rounds)
            if comp and path == "compiled":
                row["recompiles"] = comp.compiles - graphs
            res["rows"].append(row)
    for path in paths:
        res[f"spec_speedup_{path}"] = ms[path, "ar"] / ms[path, "spec"]
    if "compiled" in paths:
        res["compiled_over_eager_spec"] = ms["eager", "spec"] / ms["compiled", "spec"]
        res["compiled_over_eager_ar"] = ms["eager", "ar"] / ms["compiled", "ar"]
        res["compiled_spec_over_eager_ar"] = ms["eager", "ar"] / ms["compiled", "spec"]
    return res


# The exactness stage's pair: a small fp32 network and a draft that is the same network with
# its output layer perturbed, so that greedy rounds both accept and reject; a vocabulary
# small enough for the distribution check to enumerate p exactly.
EXACT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 16,
    "tie_word_embeddings": False,
}
EXACT_PROMPTS = ("1 2 3", "9", "4 4 15 0 7")
EXACT_TOKENS = 40
CHECK_PROMPT = "3 1"


def exactness(plan: Plan, t_start: float) -> dict:
    """Exactness on the plan's device, in fp32: greedy speculative = greedy autoregressive
    on both paths; a sampled trace's content eager against compiled; the distribution check
    on the compiled path (it must pass with the rejection rule and fail with a wrong one)."""
    fp32 = dataclasses.replace(plan, dtype=torch.float32)
    target = build(EXACT, fp32, 0, zero_norm=False, sharpness=0.4)
    draft = close_draft(target, noise=0.5, seed=99)
    pair = pair_of(draft, target, fp32, "close draft")
    res: dict[str, Any] = {"dtype": "float32", "vocab": EXACT["vocab_size"]}
    compiled: ModelPair | None = None
    if plan.compile == "off":
        res["compiled"] = "--compile off"
    elif skip := out_of_time(plan, t_start):
        res["compiled"] = skip
    else:
        compiled = pair.with_compile(plan.compile)
        res["compiled"] = plan.compile
    paths = {"eager": pair, **({"compiled": compiled} if compiled else {})}

    greedy = Settings(greedy=True, gamma=GAMMA, max_new_tokens=EXACT_TOKENS)
    rows = []
    for prompt in EXACT_PROMPTS:
        row: dict[str, Any] = {"prompt": prompt}
        ids = {}
        for path, p in paths.items():
            ar = generate(p, prompt, greedy.with_(method="ar"), raw=True)
            spec = generate(p, prompt, greedy, raw=True)
            ids[path] = ar.token_ids
            row[f"{path}_spec_equals_ar"] = spec.token_ids == ar.token_ids
            row[f"{path}_acceptance"] = spec.stats.acceptance_rate
        if compiled:
            row["compiled_equals_eager"] = ids["compiled"] == ids["eager"]
        rows.append(row)
    res["greedy"] = rows
    res["greedy_exact"] = all(value for r in rows for k, value in r.items() if k.endswith("_ar"))
    if compiled:
        res["sampled_trace"] = same_content(pair, compiled)
        res["check"] = distribution_checks(compiled, plan)
    return res


def same_content(eager: ModelPair, compiled: ModelPair) -> dict:
    """One sampled run on both paths: the same tokens, draws and verdicts, and how far the
    recorded p and q lie apart."""
    s = Settings(gamma=GAMMA, temperature=1.0, top_p=1.0, max_new_tokens=EXACT_TOKENS, seed=7)
    a, b = (generate(p, EXACT_PROMPTS[0], s, raw=True) for p in (eager, compiled))

    def verdicts(trace: Any) -> list:
        return [[(d.id, d.status, d.u) for d in r.drafted] for r in trace.rounds]

    pairs = [
        (da, db)
        for ra, rb in zip(a.rounds, b.rounds, strict=False)
        for da, db in zip(ra.drafted, rb.drafted, strict=False)
    ]
    return {
        "tokens_equal": a.token_ids == b.token_ids,
        "verdicts_equal": verdicts(a) == verdicts(b),
        "rounds": len(a.rounds),
        "max_abs_dp": max((abs(x.p - y.p) for x, y in pairs), default=0.0),
        "max_abs_dq": max((abs(x.q - y.q) for x, y in pairs), default=0.0),
    }


def distribution_checks(compiled: ModelPair, plan: Plan) -> list[dict]:
    from specviz.analysis.distribution_check import run_check

    s = Settings(gamma=GAMMA, temperature=1.0, top_p=1.0, seed=0)
    rows = []
    for rule, n in (("rejection", plan.check_n), ("resample-from-p", plan.check_n)):
        r = run_check(compiled, CHECK_PROMPT, s, n=n, length=2, rule=rule, raw=True)
        rows.append(
            {
                "rule": rule,
                "n": n,
                "passed": r.passed,
                "min_p_value": min(comp.spec_test.p_value for comp in r.comparisons),
                "threshold": r.threshold,
                "acceptance": r.spec_acceptance,
                "predicted_tv": r.predicted_tv,
                "s": r.elapsed_s,
            }
        )
    return rows
