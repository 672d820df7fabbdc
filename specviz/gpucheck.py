"""The GPU check: the quantities that decide speculative decoding's speed on one CUDA GPU,
measured on Llama networks with random weights at realistic sizes, about 1B drafting for
about 8B, in bf16 (``scripts/gpu_check.sh``; ``--tiny`` runs the same stages on the CPU with
tiny networks, for the tests).

It needs only torch and transformers: the networks are built from ``LlamaConfig`` (nothing
is downloaded) and only the engine's own modules are imported. It reports
- c: a draft decode step / a target decode step, both eager, as the engine runs them;
- the verify call: a target forward over m = k + 1 = 1..9 new positions / one over 1;
- engine overhead per round: specviz's speculative run against transformers' assisted
  generation on the same pair, with the draft's weights equal to the target's, greedy, so
  every draft is accepted and both make the same model calls; each is set against the cost
  of those calls alone;
- eager against compiled: one decode step with transformers' StaticCache, eager and under
  ``torch.compile(mode="reduce-overhead")`` (CUDA graphs);
- the speedup Leviathan et al.'s formula projects for alpha 0.6, 0.8 and 0.9 at the measured c.

Every timing is a median over repetitions after a warm-up, with CUDA synchronised before
every clock read (``specviz.engine.clock``).

Weights: random (transformers' initialisation, seeded), except the final norm's weight,
which is zeroed. Every logit is then exactly 0 and greedy decoding always picks token 0
(argmax returns the first maximum), so a draft equal to the target is accepted bit for bit in
bf16 too. A forward's cost does not depend on the values of its weights.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

from specviz.config import Settings
from specviz.engine import clock, generate
from specviz.lm import CachedLM
from specviz.models import LoadedModel, ModelPair

SCHEMA = "specviz-gpu-check/1"
ALPHAS = (0.6, 0.8, 0.9)
MAX_VERIFY = 9  # positions of the largest verify call measured: gamma up to 8
GAMMA = 4  # drafts per round in the engine-overhead comparison


def shape(
    hidden: int, ffn: int, layers: int, heads: int, kv_heads: int, vocab: int, tied: bool
) -> dict[str, Any]:
    """LlamaConfig fields of one network's shape."""
    return {
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
    }


# Llama 3.2 1B and Llama 3.1 8B shapes; tiny ones for the CPU run.
SHAPES = {
    "gpu": {
        "draft": shape(2048, 8192, 16, 32, 8, 128256, tied=True),
        "target": shape(4096, 14336, 32, 32, 8, 128256, tied=False),
    },
    "tiny": {
        "draft": shape(32, 64, 1, 4, 2, 512, tied=True),
        "target": shape(64, 128, 2, 4, 2, 512, tied=False),
    },
}


@dataclass(frozen=True)
class Plan:
    """How much to measure: the GPU run's sizes (the defaults), or the tiny CPU run's."""

    size: str = "gpu"  # "gpu" | "tiny"
    device: torch.device = torch.device("cuda")
    dtype: torch.dtype = torch.bfloat16
    prompt_tokens: int = 256
    warm: int = 5  # warm-up calls before timed ones
    reps: int = 30  # timed calls of one model step
    runs: int = 5  # timed generations per contender and length
    rounds: tuple[int, int] = (8, 32)  # rounds of the short and the long generation
    compile: str = "inductor"  # "inductor" | "eager" | "off"
    budget_s: float = 420.0  # the compile stage is skipped once this much time has gone

    @classmethod
    def make(cls, tiny: bool, compile: str | None, budget_s: float | None) -> Plan:
        if not tiny and not torch.cuda.is_available():
            raise ValueError("no CUDA device is available: run with --tiny for the CPU run")
        plan = TINY if tiny else cls()
        return replace(plan, compile=compile or plan.compile, budget_s=budget_s or plan.budget_s)


# Every stage of the GPU run, at toy sizes on the CPU.
TINY = Plan(
    "tiny",
    torch.device("cpu"),
    torch.float32,
    prompt_tokens=16,
    warm=1,
    reps=3,
    runs=1,
    rounds=(2, 4),
    compile="eager",
    budget_s=120.0,
)


# --- the networks ---------------------------------------------------------------------


def build(fields: dict[str, Any], plan: Plan, seed: int) -> LlamaForCausalLM:
    """A random-weight Llama network on the plan's device, final norm zeroed (see above)."""
    config = LlamaConfig(max_position_embeddings=4096, rope_theta=500000.0, **fields)
    with torch.random.fork_rng(devices=[]), torch.device(plan.device):
        torch.manual_seed(seed)
        model = LlamaForCausalLM._from_config(config, dtype=plan.dtype)
    with torch.no_grad():
        model.model.norm.weight.zero_()
    return model.eval()


def twin(model: LlamaForCausalLM, plan: Plan) -> LlamaForCausalLM:
    """A second module holding the very same weight tensors (no copy): a draft = target."""
    with torch.device(plan.device):
        other = LlamaForCausalLM._from_config(model.config, dtype=plan.dtype)
    other.load_state_dict(model.state_dict(), assign=True)
    return other.eval()


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class IdTokenizer:
    """Token i is the text "<i>"; a prompt is a space-separated list of ids."""

    chat_template = None
    eos_token_id = None

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [int(t) for t in text.split()]}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(f"<{i}>" for i in ids)

    def __len__(self) -> int:
        return self.vocab


def prompt_ids(plan: Plan, vocab: int) -> list[int]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(1, vocab, (plan.prompt_tokens,), generator=g).tolist()


# --- timing ---------------------------------------------------------------------------


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


# --- engine overhead: specviz against transformers' assisted generation ------------------


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


# --- eager against compiled: one decode step with a static cache -------------------------


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
                row["skipped"] = f"compile failed: {_error(exc)}"
            else:
                c["compiled_ms"] = c.pop("ms")
                row.update(c, speedup=row["eager_ms"] / c["compiled_ms"])
        res["rows"].append(row)
    d, t = res["rows"]
    res["c_eager"] = d["eager_ms"] / t["eager_ms"]
    if "compiled_ms" in d and "compiled_ms" in t:
        res["c_compiled"] = d["compiled_ms"] / t["compiled_ms"]
    return res


# --- Leviathan's projection ------------------------------------------------------------


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


# --- the run and its table ----------------------------------------------------------------


def run_check(plan: Plan, out: Path | None, say: Callable[[str], None]) -> dict:
    """Every stage in order; the JSON file is rewritten after each, so a run cut short
    still leaves what it measured."""
    t_start = time.perf_counter()
    res: dict[str, Any] = {"schema": SCHEMA, **machine(plan)}

    def stage(name: str, fn: Callable[[], Any]) -> None:
        try:
            res[name] = fn()
        except Exception as exc:  # a GPU run is one shot: record the failure, go on
            res[name] = {"error": _error(exc)}
        res["wall_s"] = time.perf_counter() - t_start
        if out is not None:
            out.write_text(json.dumps(res, indent=1))
        say(f"{name}: {'failed' if 'error' in res[name] else 'done'} at {res['wall_s']:.0f} s")

    shapes = SHAPES[plan.size]
    draft, target = build(shapes["draft"], plan, 1), build(shapes["target"], plan, 0)
    stage("models", lambda: {"draft": describe(draft), "target": describe(target)})
    stage("steps", lambda: steps_and_verify(draft, target, plan))
    stage("overhead", lambda: engine_overhead(target, plan, res["steps"]["verify"]))
    stage("compiled", lambda: eager_vs_compiled(draft, target, plan, t_start))
    stage("projection", lambda: projection(measured_c(res), res["steps"]["verify"]))
    stage("packages", imported_packages)
    return res


def measured_c(res: dict) -> dict[str, float]:
    cs = {"eager": res["steps"]["c"]}
    if "c_compiled" in res["compiled"]:
        cs["compiled"] = res["compiled"]["c_compiled"]
    return cs


def imported_packages() -> list[str]:
    """The packages this run imported (what the machine must have), standard library aside."""
    tops = {m.split(".")[0] for m in sys.modules}
    return sorted(t for t in tops if t not in sys.stdlib_module_names and t[0] != "_")


def _error(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def machine(plan: Plan) -> dict[str, Any]:
    dev = torch.cuda.get_device_name(plan.device) if plan.device.type == "cuda" else "cpu"
    return {
        "date": datetime.date.today().isoformat(),
        "size": plan.size,
        "device": dev,
        "dtype": str(plan.dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "prompt_tokens": plan.prompt_tokens,
    }


def describe(model: LlamaForCausalLM) -> dict[str, Any]:
    cfg = model.config
    return {
        "params": n_params(model),
        "layers": cfg.num_hidden_layers,
        "hidden": cfg.hidden_size,
        "vocab": cfg.vocab_size,
    }


def _f(x: Any, nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def _table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(_f(v) for v in r) + " |" for r in rows])


def format_table(res: dict) -> str:
    """The report as Markdown tables (ready for the README); a failed stage as one line."""
    sections = [
        ("models", _head),
        ("steps", _steps),
        ("steps", _verify),
        ("overhead", _overhead),
        ("compiled", _compiled),
        ("projection", _projection),
    ]
    parts = []
    for key, fmt in sections:
        value = res.get(key)
        failed = isinstance(value, dict) and "error" in value
        parts.append(f"{key}: failed: {value['error']}" if failed else fmt(res))
    return "\n\n".join(parts) + f"\n\nwall time {res['wall_s']:.0f} s"


def _head(res: dict) -> str:
    def size(k: str) -> str:
        d = res["models"][k]
        n = d["params"]
        count = f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e3:.0f}k"
        return f"{k} {count} ({d['layers']} layers, hidden {d['hidden']})"

    return (
        f"specviz GPU check, {res['date']}: {res['device']}, {res['dtype']}, torch "
        f"{res['torch']}, transformers {res['transformers']}\n{size('draft')}, "
        f"{size('target')}; random weights; prompt {res['prompt_tokens']} tokens; "
        "medians after warm-up, CUDA synchronised before every clock read"
    )


def _steps(res: dict) -> str:
    s = res["steps"]
    rows = [[s["draft_step_ms"], s["target_step_ms"], s["c"]]]
    return "Decode steps, eager, as the engine runs them (DynamicCache):\n" + _table(
        ["draft step ms", "target step ms", "c"], rows
    )


def _verify(res: dict) -> str:
    v = res["steps"]["verify"]
    rows = [["ms", *[r["ms"] for r in v]], ["/ step", *[r["relative"] for r in v]]]
    return "A verify call over k + 1 positions, relative to one target step:\n" + _table(
        ["k + 1", *[str(r["positions"]) for r in v]], rows
    )


def _overhead(res: dict) -> str:
    o = res["overhead"]
    head = ["contender", "ms / round", "over the model calls (ms)", "tokens / target call"]
    keys = ["name", "ms_per_round", "over_calls_ms", "tokens_per_round"]
    return (
        f"Engine per round, gamma {o['gamma']}, draft = target weights (every draft "
        f"accepted), greedy; marginal between {o['tokens'][0]} and {o['tokens'][1]} new "
        f"tokens:\n{_table(head, [[r.get(k) for k in keys] for r in o['rows']])}\n"
        f"specviz - transformers: {o['specviz_minus_transformers_ms']:+.2f} ms per round "
        f"(specviz / transformers {o['specviz_over_transformers']:.3f})"
    )


def _compiled(res: dict) -> str:
    cp = res["compiled"]
    mode = f'mode="{cp["mode"]}", ' if "mode" in cp else ""
    head = ["model", "eager ms", "compiled ms", "speedup", "compile s", "recompiles", "graph skips"]
    keys = ["model", "eager_ms", "compiled_ms", "speedup", "compile_s", "recompiles"]
    rows = [[r.get(k) for k in keys] + [r.get("graph_skips", r.get("skipped"))] for r in cp["rows"]]
    reasons = sorted({m for r in cp["rows"] for m in r.get("graph_skip_reasons", [])})
    return (
        f'One decode step with a StaticCache, eager against torch.compile({mode}backend="'
        f'{cp["backend"]}"):\n{_table(head, rows)}\nc with a static cache: eager '
        f"{_f(cp['c_eager'], 3)}, compiled {_f(cp.get('c_compiled'), 3)}"
        + "".join(f"\n{m}" for m in reasons)
    )


def _projection(res: dict) -> str:
    head = ["c", "alpha", "gamma", "speedup", "gamma (priced)", "speedup (priced)"]
    keys = ["alpha", "gamma", "speedup", "gamma_priced", "speedup_priced"]
    rows = [[f"{r['c_of']} {r['c']:.3f}"] + [r[k] for k in keys] for r in res["projection"]]
    return (
        "Leviathan's projected speedup, best gamma in 1..8; plain (verify = 1 step) and with "
        f"the verify call priced as measured:\n{_table(head, rows)}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", action="store_true", help="tiny networks on the CPU (tests)")
    ap.add_argument("--out", type=Path, default=Path("gpu_check.json"), help="JSON report")
    ap.add_argument(
        "--compile",
        choices=("inductor", "eager", "off"),
        default=None,
        help="torch.compile backend (default: inductor on CUDA, eager with --tiny)",
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="skip compiling once this many seconds have gone (default 420)",
    )
    args = ap.parse_args(argv)
    try:
        plan = Plan.make(args.tiny, args.compile, args.budget_s)
    except ValueError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    res = run_check(plan, args.out, lambda msg: print(msg, file=sys.stderr, flush=True))
    print(format_table(res))
    print(f"written: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
