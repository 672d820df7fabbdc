"""Running the benchmark: warm-up, interleaved repetitions, per-run rows, and where the
numbers came from (memory, load times, the machine).

A warm-up pass runs every contender once; then each repetition runs every contender once,
in an order rotated from one repetition to the next and reversed in every other one, so
that slow drift of the machine hits all of them alike and neighbours (a full trace and its
minimal twin) take turns at going first. Figures are medians over the repetitions (see
specviz.bench.ratios).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from specviz import metrics
from specviz.analysis.distribution_check import json_safe
from specviz.backend.draft_choice import machine_key
from specviz.bench.contenders import Contender, Sample, all_contenders, contender_name
from specviz.bench.options import BenchOptions, reference_gamma
from specviz.bench.prompts import BenchPrompt, prompt_set
from specviz.bench.ratios import case_ratios, summarize_ratios
from specviz.costs import interleaved_calls
from specviz.pair import ModelPair
from specviz.threads import cpu_info
from specviz.trace import Trace


@dataclass
class BenchResult:
    """Raw rows, the ratio table and the environment they came from."""

    options: dict[str, Any]
    machine: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    ratios: list[dict[str, Any]] = field(default_factory=list)
    summary: list[dict[str, Any]] = field(default_factory=list)
    loads: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return json_safe(dataclasses.asdict(self))


def run_bench(
    pair: ModelPair,
    opts: BenchOptions,
    log: Callable[[str], None] | None = None,
    prompts: list[BenchPrompt] | None = None,
) -> BenchResult:
    """Warm up, run every (prompt, mode) with interleaved repetitions, compute the ratios."""
    import transformers

    say = log or (lambda _msg: None)
    t_start = time.perf_counter()
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # assisted generation warns about itself
    try:
        return _run_bench(pair, opts, say, prompts, t_start)
    finally:
        transformers.logging.set_verbosity(verbosity)


def _run_bench(
    pair: ModelPair,
    opts: BenchOptions,
    say: Callable[[str], None],
    prompts: list[BenchPrompt] | None,
    t_start: float,
) -> BenchResult:
    prompts = prompts if prompts is not None else prompt_set(opts.quick, opts.kinds)
    if opts.compile:
        pair.with_compile(opts.compile)  # refuses a pair the compiled path cannot run
    result = BenchResult(options=dataclasses.asdict(opts), machine=machine_info(pair))
    result.machine["roofline"] = pair_roofline(pair)
    empty = compile_cache_is_empty() if opts.compile else None
    warm_up_contenders(pair, opts, prompts[0], say)
    say(
        f"bench: {len(prompts)} prompts x {len(opts.modes)} modes x {opts.reps} repetitions "
        f"on {result.machine['cpu']} ({result.machine['torch_threads']} threads); "
        f"draft {result.machine['draft']}"
    )
    for bp in prompts:
        ids = pair.encode_prompt(bp.text)
        for mode in opts.modes:
            cs = all_contenders(pair, mode, opts)
            rows = _measure(cs, bp, ids, mode, opts, say)
            result.rows += rows
            result.ratios += case_ratios(rows, bp, mode, opts, result.machine.get("roofline"))
    result.summary = summarize_ratios(result.ratios)
    if opts.load_probe and pair.name == "default":
        say("timing a cold and a warm load in fresh processes")
    result.loads = memory_and_loads(pair, opts)
    if opts.compile:
        say("timing first compiles")
        result.loads["compile"] = compile_times(pair, opts, prompts[0], empty)
    if opts.load_probe and pair.name == "default":
        say("timing the first token after a restart")
        first = first_token_after_restart(pair.device.type, opts.compile)
        first["floor_ms"] = (result.machine["roofline"] or {}).get("target_floor_ms")
        result.loads["first_token_after_restart"] = first
    result.machine["loadavg_end"] = _loadavg()
    result.elapsed_s = time.perf_counter() - t_start
    return result


def warm_up_contenders(
    pair: ModelPair, opts: BenchOptions, bp: BenchPrompt, say: Callable[[str], None]
) -> None:
    """The bench's warm-up: every contender of every mode once, warmup_tokens long, on bp."""
    ids = pair.encode_prompt(bp.text)
    for mode in opts.modes:
        cs = all_contenders(pair, mode, opts)
        for i, contender in enumerate(cs, start=1):
            say(f"warm-up {mode} {i}/{len(cs)}: {contender.name}")
            contender.run(ids, bp.text, opts.seed, opts.warmup_tokens)
    say("warm-up done")


def _measure(
    cs: list[Contender],
    bp: BenchPrompt,
    ids: list[int],
    mode: str,
    opts: BenchOptions,
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Interleaved repetitions through the costs' one timing loop
    (specviz.costs.interleaved_calls, no warm-up of its own: warm_up_contenders ran): of n
    contenders, repetition r of R runs them rotated by r * n // R (starts spread over the
    line-up), reversed when r is odd. Each contender's r-th run uses seed + r."""
    rows: list[dict[str, Any]] = []

    def timed(contender: Contender) -> Callable[[], float]:
        done = [0]  # this contender's runs so far: its repetition

        def call() -> float:
            rep = done[0]
            done[0] += 1
            s = contender.run(ids, bp.text, opts.seed + rep, opts.max_new_tokens)
            rows.append(_row(contender, s, bp, mode, rep, len(ids)))
            say(
                f"{bp.name} {mode} repetition {rep + 1}/{opts.reps}: "
                f"{contender.name} {s.ms_per_token:.1f} ms/token"
            )
            return s.ms_per_token

        return call

    interleaved_calls({i: timed(each) for i, each in enumerate(cs)}, opts.reps, warmup=0)
    _mark_agreement(rows, mode)
    return rows


def _row(
    contender: Contender, s: Sample, bp: BenchPrompt, mode: str, rep: int, prompt_tokens: int
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "prompt": bp.name,
        "kind": bp.kind,
        "mode": mode,
        "contender": contender.name,
        "side": contender.side,
        "type": contender.kind,
        "gamma": contender.gamma,
        "rep": rep,
        "prompt_tokens": prompt_tokens,
        "new_tokens": len(s.tokens),
        "wall_s": s.wall_s,
        "ms_per_token": s.ms_per_token,
        "target_forwards": s.target_calls,
        "tokens_per_forward": len(s.tokens) / s.target_calls if s.target_calls else None,
        "tokens": s.tokens,
    }
    if s.trace is not None:
        row.update(_trace_fields(s.trace))
    return row


def _trace_fields(tr: Trace) -> dict[str, Any]:
    """Per-run figures from a specviz trace: acceptance, rounds, first token, timings."""
    st = tr.stats
    fields: dict[str, Any] = {"first_token_ms": tr.timeline[0][0] * 1e3 if tr.timeline else None}
    if tr.method != "spec":
        return fields
    full = [r for r in tr.rounds if len(r.drafted) == r.gamma and r.gamma > 0]
    fields.update(
        rounds=st.rounds,
        acceptance_rate=st.acceptance_rate,
        alpha_overlap=st.alpha,  # None for a minimal trace: not measured
        accepted=st.accepted,
        verified=st.verified,
        full_rounds=len(full),
        full_round_tokens=sum(r.emitted for r in full),
        full_round_accepted=sum(r.n_accepted for r in full),
        full_round_verified=sum(len(r.verified) for r in full),
        acceptance_by_position=metrics.acceptance_by_position(tr),
        draft_ms=st.draft_ms,
        verify_ms=st.verify_ms,
        drafted=st.drafted,
        mean_gamma=statistics.fmean(r.gamma for r in tr.rounds) if tr.rounds else None,
    )
    return fields


def _mark_agreement(rows: list[dict[str, Any]], mode: str) -> None:
    """Greedy: does each run's output equal transformers' (else specviz's) AR output?"""
    if mode != "greedy":
        return
    ref = next((r for r in rows if r["contender"] == contender_name("transformers", "ar")), None)
    ref = ref or next(r for r in rows if r["contender"] == contender_name("specviz", "ar"))
    for r in rows:
        r["same_as_ar"] = r["tokens"] == ref["tokens"]
        r["first_difference"] = _first_difference(r["tokens"], ref["tokens"])


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# --- memory, loads, machine ----------------------------------------------------------------


def peak_rss_mib() -> float:
    """This process's peak resident memory in MiB: VmHWM where /proc has it (ru_maxrss
    would carry a parent's peak into a child process), else ru_maxrss."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory_and_loads(pair: ModelPair, opts: BenchOptions) -> dict[str, Any]:
    """(f): the warm load this process did, a cold load in a subprocess, peak memory."""
    d: dict[str, Any] = {
        "warm_target_load_s": pair.target.load_s,
        "warm_target_source": pair.target.source,
        "warm_draft_load_s": pair.draft.load_s if pair.draft else None,
        "peak_rss_mib": peak_rss_mib(),
    }
    if pair.device.type == "cuda":
        d["cuda_peak_allocated_mib"] = torch.cuda.max_memory_allocated(pair.device) / 2**20
    if opts.load_probe and pair.name == "default":
        for cold in (True, False):
            probe = load_in_subprocess(cold=cold, device=pair.device.type)
            d.update({f"{'cold' if cold else 'warm'}_{k}": value for k, value in probe.items()})
    return d


LOAD_PROBE = """
import json, sys, time
t0 = time.perf_counter()
from specviz.bench.running import peak_rss_mib
from specviz.models import load_pair
pair = load_pair(device=sys.argv[1])
total = time.perf_counter() - t0
print(json.dumps({
    "process_load_s": total,
    "target_load_s": pair.target.load_s,
    "target_source": pair.target.source,
    "draft_load_s": pair.draft.load_s,
    "peak_rss_mib": peak_rss_mib(),
}))
"""


def load_in_subprocess(cold: bool, device: str) -> dict[str, Any]:
    """Load the offline pair in a fresh process: cold converts the GGUF into an empty cache."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    root = Path(__file__).resolve().parents[2]  # the checkout that holds specviz/
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory(prefix="specviz-cold-") as tmp:
        if cold:
            env["SPECVIZ_CACHE"] = tmp
        t0 = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", LOAD_PROBE, device],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        wall = time.perf_counter() - t0
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d["subprocess_s"] = wall
    return d


def pair_roofline(pair: ModelPair) -> dict[str, Any] | None:
    """The pair's bytes per step and floors at this process's bandwidth (measured once,
    specviz.costs.bandwidth); None where a model cannot be sized."""
    from specviz import costs
    from specviz.bench.ratios import roofline

    try:
        draft = costs.weight_bytes(pair.draft.model) if pair.draft else None
        bw = costs.bandwidth(pair.device.type)
        return roofline(costs.weight_bytes(pair.target.model), draft, bw.gb_s)
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None


FIRST_TOKEN_PROBE = """
import json, sys, time
t0 = time.perf_counter()
from specviz.config import Settings
from specviz.engine import Run
from specviz.models import load_pair
pair = load_pair(device=sys.argv[1])
loaded = time.perf_counter() - t0
if sys.argv[2] != "off":
    pair = pair.with_compile(sys.argv[2])
run = Run(pair, sys.argv[3], Settings(max_new_tokens=4))
for _ in run:
    break
print(json.dumps({"first_token_s": time.perf_counter() - t0, "load_s": loaded}))
"""


def first_token_after_restart(device: str, compile: str | None) -> dict[str, Any]:
    """The time to the first token of a fresh process: imports, loading the offline pair
    (its caches filled), on the compiled path its compile (inductor's cache filled, so a
    restart's), the prefill and the first round; measured inside the process from its first
    line."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))
    from specviz.config import DEFAULT_PROMPT

    args = [device, compile or "off", DEFAULT_PROMPT]
    out = subprocess.run(
        [sys.executable, "-c", FIRST_TOKEN_PROBE, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d["compiled"] = compile or "off"
    return d


def compile_cache_is_empty() -> bool:
    from specviz.backend import compile_cache_dir

    d = Path(compile_cache_dir())
    return not d.is_dir() or not any(d.iterdir())


def compile_times(
    pair: ModelPair, opts: BenchOptions, bp: BenchPrompt, empty: bool | None
) -> dict[str, Any]:
    """The compiled path's compile time in this process (its warm-up compiled every shape),
    and in a restarted process that finds the compile cache this one filled (offline pair)."""
    from specviz.backend import compiler_for

    comp = compiler_for(str(opts.compile))
    d: dict[str, Any] = {
        "backend": opts.compile,
        "shapes": len(comp.compile_s),
        "first_s": sum(comp.compile_s.values()),
        "cache_was_empty": empty,
        "restart_s": None,
    }
    if pair.name == "default":
        g = reference_gamma(opts.gammas)
        args = [str(opts.compile), pair.device.type, bp.text, str(g), str(opts.max_new_tokens)]
        probe = _probe(COMPILE_PROBE, args, {})
        if "error" in probe:
            d["restart_error"] = probe["error"]
        else:
            d["restart_s"] = probe["compile_s"]
    return d


COMPILE_PROBE = """
import json, sys
from specviz.backend import compiler_for
from specviz.config import Settings
from specviz.engine import warm_up
from specviz.models import load_pair
backend, device, prompt, gamma, tokens = sys.argv[1:]
pair = load_pair(device=device).with_compile(backend)
warm_up(pair, prompt, Settings(gamma=int(gamma), max_new_tokens=int(tokens)))
print(json.dumps({"compile_s": sum(compiler_for(backend).compile_s.values())}))
"""


def _probe(code: str, args: list[str], extra_env: dict[str, str]) -> dict[str, Any]:
    """Run a probe in a fresh process with this checkout importable; its last line is JSON."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", **extra_env)
    root = Path(__file__).resolve().parents[2]  # the checkout that holds specviz/
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=900
    )
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d["subprocess_s"] = time.perf_counter() - t0
    return d


def _loadavg() -> list[float] | None:
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def machine_info(pair: ModelPair) -> dict[str, Any]:
    """Where the numbers came from."""
    import transformers

    d = {
        "cpu": cpu_info()[0],
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device": str(pair.device),
        "pair": pair.name,
        "target": pair.target.describe(),
        "draft": pair.draft.describe() if pair.draft else None,
        "draft_variant": pair.draft.variant if pair.draft else None,
        "cpu_flags": machine_key(pair.device)["flags"],
        "loadavg_start": _loadavg(),
    }
    if pair.device.type == "cuda":
        d["gpu"] = torch.cuda.get_device_name(pair.device)
    return d
