"""The GPU check's measurements: decode steps and verify calls, the engine's overhead per
round against transformers' assisted generation, one decode step eager against compiled,
and Leviathan's projection at the measured c. Every timing is a median over repetitions
after a warm-up, with CUDA synchronised before every clock read."""

from __future__ import annotations

import contextlib
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from transformers import StaticCache

from specviz.config import Settings
from specviz.engine import clock, generate
from specviz.gpucheck.plan import (
    ALPHAS,
    GAMMA,
    MAX_VERIFY,
    IdTokenizer,
    Plan,
    error_line,
    prompt_ids,
    twin,
)
from specviz.lm import CachedLM
from specviz.models import LoadedModel, ModelPair


def median_ms(
    fn: Callable[[], Any], plan: Plan, reps: int, after: Callable[[], Any] | None = None
) -> float:
    """Median wall time of fn in ms, after plan.warm untimed calls; after() runs untimed."""
    for _ in range(plan.warm):
        fn()
        if after:
            after()
    times = []
    for _ in range(reps):
        t0 = clock(plan.device)
        fn()
        times.append(clock(plan.device) - t0)
        if after:
            after()
    return statistics.median(times) * 1e3


@torch.inference_mode()
def forward_ms(model: torch.nn.Module, plan: Plan, ids: list[int], m: int) -> float:
    """A forward over m new positions after the prompt, as the engine calls it (CachedLM:
    a DynamicCache cropped back after each call)."""
    lm = CachedLM(model, model.config.vocab_size)
    lm.logits(ids)  # the prompt, cached
    new = ids + [0] * m
    return median_ms(lambda: lm.logits(new, keep=m), plan, plan.reps, lambda: lm.rollback(ids))


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
    vocab = target.config.vocab_size
    ids = prompt_ids(plan, vocab)
    dev, dt = plan.device, str(plan.dtype).removeprefix("torch.")
    pair = ModelPair(
        name="gpu-check",
        target=LoadedModel("target", target, dev, dt, vocab, 0.0, "random"),
        draft=LoadedModel("draft = target", draft, dev, dt, vocab, 0.0, "random"),
        tokenizer=IdTokenizer(vocab),
        eos_ids=frozenset(),
        context_len=target.config.max_position_embeddings,
    )
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


def decode_step(model: torch.nn.Module, plan: Plan, compiled: bool) -> dict:
    """A one-token forward on a StaticCache holding the prompt; its write position is moved
    back after every call (no copy)."""
    ids = prompt_ids(plan, model.config.vocab_size)
    n = len(ids)
    cache = StaticCache(config=model.config, max_cache_len=n + 8)
    x = torch.zeros(1, 1, dtype=torch.long, device=plan.device)
    with torch.no_grad():
        model(input_ids=torch.tensor([ids], device=plan.device), past_key_values=cache)

    def step() -> torch.Tensor:
        return model(input_ids=x, past_key_values=cache, logits_to_keep=1).logits

    def rewind() -> None:
        for layer in cache.layers:
            layer.cumulative_length.fill_(n)

    fn, out = step, {}
    if compiled:
        kw = {"mode": "reduce-overhead"} if plan.compile == "inductor" else {}
        inner = torch.compile(step, backend=plan.compile, fullgraph=True, **kw)

        def fn() -> torch.Tensor:
            torch.compiler.cudagraph_mark_step_begin()
            return inner()

        counters = torch._dynamo.utils.counters
        graphs, skips = counters["stats"]["unique_graphs"], counters["inductor"]["cudagraph_skips"]
        t0 = clock(plan.device)
        with torch.no_grad(), _graph_skip_reasons() as reasons:
            for _ in range(3):  # compile, then CUDA graph warm-up and capture
                fn()
                rewind()
        out["compile_s"] = clock(plan.device) - t0
        if reasons:
            out["graph_skip_reasons"] = sorted(set(reasons))
        out["compiles"] = counters["stats"]["unique_graphs"] - graphs
        graphs = counters["stats"]["unique_graphs"]
    with torch.no_grad():
        out["ms"] = median_ms(fn, plan, plan.reps, rewind)
    if compiled:
        out["recompiles"] = counters["stats"]["unique_graphs"] - graphs
        # inductor falls back to plain kernels (no CUDA graph) where it cannot capture one
        out["graph_skips"] = counters["inductor"]["cudagraph_skips"] - skips
    return out


@contextlib.contextmanager
def _graph_skip_reasons() -> Iterator[list[str]]:
    """The messages inductor logs when it cannot capture a CUDA graph (CUDA only)."""
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


def eager_vs_compiled(
    draft: torch.nn.Module, target: torch.nn.Module, plan: Plan, t_start: float
) -> dict:
    res: dict[str, Any] = {"backend": plan.compile, "rows": []}
    if plan.compile == "inductor":
        res["mode"] = "reduce-overhead"
    for name, model in (("draft", draft), ("target", target)):
        row: dict[str, Any] = {"model": name, "eager_ms": decode_step(model, plan, False)["ms"]}
        if plan.compile == "off":
            row["skipped"] = "--compile off"
        elif time.perf_counter() - t_start > plan.budget_s:
            row["skipped"] = f"out of time (budget {plan.budget_s:.0f} s)"
        else:
            try:
                c = decode_step(model, plan, True)
            except Exception as exc:  # one failed compile must not cost the whole report
                row["skipped"] = f"compile failed: {error_line(exc)}"
            else:
                c["compiled_ms"] = c.pop("ms")
                row.update(c, speedup=row["eager_ms"] / c["compiled_ms"])
        res["rows"].append(row)
    d, t = res["rows"]
    res["c_eager"] = d["eager_ms"] / t["eager_ms"]
    if "compiled_ms" in d and "compiled_ms" in t:
        res["c_compiled"] = d["compiled_ms"] / t["compiled_ms"]
    return res


def expected_speedup(alpha: float, gamma: int, c: float, verify: float = 1.0) -> float:
    """Leviathan et al.: (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)), with the verify
    call priced at `verify` target steps (1 in the paper). The same formula as
    specviz.metrics.expected_speedup, which needs pandas; this module may not."""
    tokens = gamma + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)
    return tokens / (gamma * c + verify)


def projection(cs: dict[str, float], verify: list[dict]) -> list[dict]:
    """Best gamma (1..8) and its speedup per alpha and c: plain, and with the verify call
    priced as measured (gamma + 1 positions)."""
    rel = {v["positions"]: v["relative"] for v in verify}
    rows = []
    for label, c in cs.items():
        for a in ALPHAS:
            gammas = range(1, MAX_VERIFY)
            g = max(gammas, key=lambda g: expected_speedup(a, g, c))
            gv = max(gammas, key=lambda g: expected_speedup(a, g, c, rel[g + 1]))
            rows.append(
                {
                    "c_of": label,
                    "c": c,
                    "alpha": a,
                    "gamma": g,
                    "speedup": expected_speedup(a, g, c),
                    "gamma_priced": gv,
                    "speedup_priced": expected_speedup(a, gv, c, rel[gv + 1]),
                }
            )
    return rows
