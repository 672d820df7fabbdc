"""The GPU check's eager measurements: decode steps and verify calls, the engine's overhead
per round against transformers' assisted generation, and Leviathan's projection at the
measured c (the compiled path's stages are in specviz.gpucheck.path). Every timing is a
median over repetitions after a warm-up, with CUDA synchronised before every clock read."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch

from specviz import metrics
from specviz.clock import clock
from specviz.config import Settings
from specviz.costs import Timer, interleaved_calls
from specviz.engine import generate
from specviz.gpucheck.plan import (
    ALPHAS,
    GAMMA,
    MAX_VERIFY,
    Plan,
    pair_of,
    prompt_ids,
    twin,
)
from specviz.lm import CachedLM
from specviz.pair import ModelPair


def median_ms(
    fn: Callable[[], Any], plan: Plan, reps: int, after: Callable[[], Any] | None = None
) -> float:
    """Median wall time of fn in ms, after plan.warm untimed calls; after() runs untimed.
    Timed through the costs' one timing loop (specviz.costs.interleaved_calls)."""

    def timed() -> float:
        t0 = clock(plan.device)
        fn()
        ms = (clock(plan.device) - t0) * 1e3
        if after:
            after()
        return ms

    return statistics.median(interleaved_calls({"": timed}, reps, plan.warm)[""])


@torch.inference_mode()
def forward_ms(model: torch.nn.Module, plan: Plan, ids: list[int], m: int) -> float:
    """A forward over m new positions after the prompt, as the engine calls it (CachedLM:
    a DynamicCache cropped back after each call)."""
    return lm_ms(CachedLM(model, model.config.vocab_size), plan, ids, m)


def lm_ms(lm: Any, plan: Plan, ids: list[int], m: int = 1) -> float:
    """A call over m new positions after the prompt through one of the engine's caches
    (CachedLM or StaticLM), rolled back after each call: timed as specviz.costs times
    every model call (costs.Timer: the cache's own clock around the forward, synchronised),
    median of plan.reps after plan.warm."""
    # the prefill caches the prompt (on the compiled path: the prefill, then compiling)
    return Timer(lm, ids).medians([m], plan.reps, plan.warm)[m]


def steps_and_verify(draft: torch.nn.Module, target: torch.nn.Module, plan: Plan) -> dict:
    ids = prompt_ids(plan, target.config.vocab_size)
    draft_ms = forward_ms(draft, plan, ids, 1)
    verify = [forward_ms(target, plan, ids, m) for m in range(1, MAX_VERIFY + 1)]
    return {
        "draft_step_ms": draft_ms,
        "target_step_ms": verify[0],
        "c": draft_ms / verify[0],
        "verify": [
            {"positions": m, "ms": t, "relative": t / verify[0]}
            for m, t in enumerate(verify, start=1)
        ],
    }


# A contender maps a number of new tokens to (tokens made, target calls, wall seconds).
Contender = Callable[[int], tuple[int, int, float]]


def specviz_contender(pair: ModelPair, prompt: str, trace_level: str) -> Contender:
    def run(tokens: int) -> tuple[int, int, float]:
        s = Settings(greedy=True, gamma=GAMMA, max_new_tokens=tokens, trace_level=trace_level)
        t0 = clock(pair.device)
        trace = generate(pair, prompt, s, raw=True)
        wall = clock(pair.device) - t0
        return len(trace.token_ids), len(trace.rounds), wall

    return run


def transformers_contender(
    target: torch.nn.Module, draft: torch.nn.Module, ids: list[int], plan: Plan
) -> Contender:
    """generate(assistant_model=draft), gamma drafts per round and no early stop. transformers
    5 reads the assistant's schedule from its generation config, not from generate()."""
    gc = draft.generation_config
    gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = GAMMA, "constant"
    gc.assistant_confidence_threshold, gc.eos_token_id = 0.0, None
    x = torch.tensor([ids], device=plan.device)
    kw = dict(
        attention_mask=torch.ones_like(x),
        min_new_tokens=0,
        eos_token_id=None,
        pad_token_id=0,
        do_sample=False,
        temperature=None,
        top_p=None,
        top_k=None,
    )
    calls = [0]

    def count(*_: Any) -> None:
        calls[0] += 1

    @torch.inference_mode()
    def run(tokens: int) -> tuple[int, int, float]:
        calls[0] = 0
        hook = target.register_forward_pre_hook(count)  # the draft is another module
        try:
            t0 = clock(plan.device)
            out = target.generate(x, assistant_model=draft, **kw, max_new_tokens=tokens)
            wall = clock(plan.device) - t0
        finally:
            hook.remove()
        return out.shape[1] - len(ids), calls[0], wall

    return run


def engine_overhead(target: torch.nn.Module, plan: Plan, verify: list[dict]) -> dict:
    """ms per round of each engine (marginal: long run minus short run, over the rounds
    between them, so the prompt's prefill drops out), against the model calls alone."""
    draft = twin(target, plan)
    ids = prompt_ids(plan, target.config.vocab_size)
    pair = pair_of(draft, target, plan, "draft = target")
    prompt = " ".join(map(str, ids))
    contenders = {
        "specviz (trace minimal)": specviz_contender(pair, prompt, "minimal"),
        "specviz (trace full)": specviz_contender(pair, prompt, "full"),
        "transformers assisted": transformers_contender(target, draft, ids, plan),
    }
    lengths = [r * (GAMMA + 1) for r in plan.rounds]
    # A full round: the draft reads 2 new positions (its last draft and the bonus token),
    # then 1 at a time; the target verifies gamma + 1.
    ms = [row["ms"] for row in verify]
    floor = ms[1] + (GAMMA - 1) * ms[0] + ms[GAMMA]
    rows = [{"name": "model calls alone", "ms_per_round": floor, "over_calls_ms": 0.0}]
    for name, run in contenders.items():
        rows.append(_marginal(name, run, lengths, plan, floor))
    per_round = {r["name"]: r["ms_per_round"] for r in rows}
    ours, theirs = per_round["specviz (trace minimal)"], per_round["transformers assisted"]
    return {
        "gamma": GAMMA,
        "tokens": lengths,
        "rows": rows,
        "specviz_minus_transformers_ms": ours - theirs,
        "specviz_over_transformers": ours / theirs,
    }


def _marginal(name: str, run: Contender, lengths: list[int], plan: Plan, floor: float) -> dict:
    for n in lengths:  # warm-up
        run(n)
    walls, rounds = {}, {}
    for n in lengths:
        samples = [run(n) for _ in range(plan.runs)]
        for tokens, calls, _ in samples:
            if tokens != n or calls != samples[0][1]:
                raise RuntimeError(f"{name}: {tokens} tokens in {calls} rounds, expected {n}")
        walls[n] = statistics.median(s[2] for s in samples)
        rounds[n] = samples[0][1]
    short, long = lengths
    ms = (walls[long] - walls[short]) * 1e3 / (rounds[long] - rounds[short])
    return {
        "name": name,
        "ms_per_round": ms,
        "over_calls_ms": ms - floor,
        "rounds": [rounds[short], rounds[long]],
        "tokens_per_round": long / rounds[long],  # gamma + 1 when every draft is accepted
    }


def projection(cs: dict[str, float], verify: list[dict]) -> list[dict]:
    """Best gamma (1..8) and its speedup per alpha and c: plain, and with the verify call
    priced as measured (gamma + 1 positions)."""
    rel = {call["positions"]: call["relative"] for call in verify}
    rows = []
    for label, c in cs.items():
        for a in ALPHAS:
            gammas = range(1, MAX_VERIFY)
            # Leviathan's formula, and with the verify call priced at rel target steps
            g = max(gammas, key=lambda g: metrics.expected_speedup(a, g, c))
            gv = max(gammas, key=lambda g: metrics.refined_speedup(a, g, c, rel[g + 1]))
            rows.append(
                {
                    "c_of": label,
                    "c": c,
                    "alpha": a,
                    "gamma": g,
                    "speedup": metrics.expected_speedup(a, g, c),
                    "gamma_priced": gv,
                    "speedup_priced": metrics.refined_speedup(a, gv, c, rel[gv + 1]),
                }
            )
    return rows
