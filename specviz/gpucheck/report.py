"""The GPU check as one run: every stage in order (a failed stage is one line and the
rest still runs), the JSON result, the Markdown tables, and the command line."""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import LlamaForCausalLM

from specviz import outfiles
from specviz.config import COMPILE_BACKENDS
from specviz.gpucheck.aoti import aoti_stage
from specviz.gpucheck.measure import engine_overhead, projection, steps_and_verify
from specviz.gpucheck.path import EXACT_TOKENS, compiled_steps, engine_runs, exactness
from specviz.gpucheck.plan import SCHEMA, SHAPES, Plan, build, error_line, n_params
from specviz.gpucheck.trees import tree_verify


def run_check(plan: Plan, out: Path | None, say: Callable[[str], None]) -> dict:
    """Every stage in order; the JSON file is rewritten after each, so a run cut short
    still leaves what it measured."""
    t_start = time.perf_counter()
    res: dict[str, Any] = {"schema": SCHEMA, **machine(plan)}

    def stage(name: str, fn: Callable[[], Any]) -> None:
        try:
            res[name] = fn()
        except Exception as exc:  # a GPU run is one shot: record the failure, go on
            res[name] = {"error": error_line(exc)}
        res["wall_s"] = time.perf_counter() - t_start
        if out is not None:
            outfiles.write_json(out, res)
        say(f"{name}: {'failed' if 'error' in res[name] else 'done'} at {res['wall_s']:.0f} s")

    shapes = SHAPES[plan.size]
    draft, target = build(shapes["draft"], plan, 1), build(shapes["target"], plan, 0)
    stage("models", lambda: {"draft": describe(draft), "target": describe(target)})
    stage("steps", lambda: steps_and_verify(draft, target, plan))
    stage("trees", lambda: tree_verify(target, plan))
    stage("exactness", lambda: exactness(plan, t_start))
    stage("overhead", lambda: engine_overhead(target, plan, res["steps"]["verify"]))
    stage("compiled", lambda: compiled_steps(draft, target, plan, t_start))
    stage("aoti", lambda: aoti_stage(target, plan, t_start))
    stage("runs", lambda: engine_runs(draft, target, plan, t_start))
    stage("projection", lambda: projection(measured_c(res), res["steps"]["verify"]))
    stage("packages", imported_packages)
    return res


def measured_c(res: dict) -> dict[str, float]:
    cs = {"eager": res["steps"]["c"]}
    if "c_compiled" in res.get("compiled", {}):
        cs["compiled"] = res["compiled"]["c_compiled"]
    return cs


def imported_packages() -> list[str]:
    """The packages this run imported (what the machine must have), standard library aside."""
    tops = {m.split(".")[0] for m in sys.modules}
    return sorted(t for t in tops if t not in sys.stdlib_module_names and t[0] != "_")


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
    return outfiles.markdown_table(head, ([_f(value) for value in r] for r in rows))


def format_table(res: dict) -> str:
    """The report as Markdown tables (ready for the README); a failed stage as one line."""
    sections = [
        ("models", _head),
        ("steps", _steps),
        ("steps", _verify),
        ("trees", _trees),
        ("exactness", _exactness),
        ("overhead", _overhead),
        ("compiled", _compiled),
        ("aoti", _aoti),
        ("runs", _runs),
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
    calls = res["steps"]["verify"]
    rows = [["ms", *[r["ms"] for r in calls]], ["/ step", *[r["relative"] for r in calls]]]
    return "A verify call over k + 1 positions, relative to one target step:\n" + _table(
        ["k + 1", *[str(r["positions"]) for r in calls]], rows
    )


def _trees(res: dict) -> str:
    t = res["trees"]
    rows = t["rows"]
    keys = ["chain_ms", "tree_ms", "chain_relative", "tree_relative", "tree_over_chain"]
    labels = ["chain ms", "tree ms", "chain / step", "tree / step", "tree / chain"]
    body = [[label, *[r[k] for r in rows]] for label, k in zip(labels, keys, strict=True)]
    return (
        f"A tree's verify call (one forward, tree attention mask, {t['attention']}) against "
        "a chain's causal call over as many positions; a binary tree of each width:\n"
        + _table(["nodes", *[str(r["width"]) for r in rows]], body)
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
    head = ["model", "eager ms", "compiled ms", "speedup", "compile s", "recompiles", "graph skips"]
    keys = ["model", "eager_ms", "compiled_ms", "speedup", "compile_s", "recompiles"]
    rows = [[r.get(k) for k in keys] + [r.get("graph_skips", r.get("skipped"))] for r in cp["rows"]]
    reasons = sorted({m for r in cp["rows"] for m in r.get("graph_skip_reasons", [])})
    return (
        "One decode step on the engine's paths: eager (DynamicCache) against compiled "
        f'(StaticCache, torch.compile backend "{cp["backend"]}", CUDA graphs on CUDA):\n'
        f"{_table(head, rows)}\nc: eager {_f(cp['c_eager'], 3)}, compiled "
        f"{_f(cp.get('c_compiled'), 3)}" + "".join(f"\n{m}" for m in reasons)
    )


def _aoti(res: dict) -> str:
    a = res["aoti"]
    title = "Ahead of time (torch.export, aoti_compile_and_package, aoti_load_package)"
    if "skipped" in a:
        return f"{title}: {a['skipped']}"
    head = ["model", "cache", "export s", "package s", "load s", "MB", "eager ms", "AOTI ms"]
    head += ["speedup", "max |logit diff|", "argmax equal"]
    keys = ["model", "cache", "export_s", "package_s", "load_s", "package_mb", "eager_ms"]
    keys += ["aoti_ms", "speedup", "max_abs_logit_diff"]
    row = [a.get(k) for k in keys] + ["yes" if a["argmax_equal"] else "NO"]
    return f"{title}, the target's one-token step on a static cache:\n" + _table(head, [row])


def _runs(res: dict) -> str:
    r = res["runs"]
    head = ["path", "method", "ms / token", "tokens / round", "recompiles"]
    keys = ["path", "method", "ms_per_token", "tokens_per_round", "recompiles"]
    lines = [
        f"Whole generations through the engine, greedy, gamma {r['gamma']}, every draft "
        f"accepted; marginal between {r['tokens'][0]} and {r['tokens'][1]} new tokens:",
        _table(head, [[row.get(k) for k in keys] for row in r["rows"]]),
    ]
    ratios = [
        ("spec / AR, eager", "spec_speedup_eager"),
        ("spec / AR, compiled", "spec_speedup_compiled"),
        ("compiled spec / eager spec", "compiled_over_eager_spec"),
        ("compiled AR / eager AR", "compiled_over_eager_ar"),
        ("compiled spec / eager AR", "compiled_spec_over_eager_ar"),
    ]
    lines.append(", ".join(f"{label} {r[k]:.2f}x" for label, k in ratios if k in r))
    if "skipped" in r:
        lines.append(f"compiled path skipped: {r['skipped']}")
    return "\n".join(lines)


def _exactness(res: dict) -> str:
    e = res["exactness"]
    paths = ["eager"] + (["compiled"] if e["compiled"] in COMPILE_BACKENDS else [])
    head = ["prompt"] + [f"{p}: spec = AR, acceptance" for p in paths]
    head += ["compiled = eager"] if len(paths) == 2 else []
    rows = []
    for g in e["greedy"]:
        row = [g["prompt"]]
        row += [
            f"{'yes' if g[f'{p}_spec_equals_ar'] else 'NO'}, {g[f'{p}_acceptance']:.2f}"
            for p in paths
        ]
        if len(paths) == 2:
            row.append("yes" if g["compiled_equals_eager"] else "no")
        rows.append(row)
    lines = [
        f"Exactness on {res['device']}, {e['dtype']}, a {e['vocab']}-token network and a "
        f"perturbed copy as its draft; greedy, gamma 4, {EXACT_TOKENS} tokens:",
        _table(head, rows),
    ]
    if "sampled_trace" in e:
        t = e["sampled_trace"]
        lines.append(
            f"A sampled run, eager against compiled: tokens "
            f"{'equal' if t['tokens_equal'] else 'DIFFER'}, draws and verdicts "
            f"{'equal' if t['verdicts_equal'] else 'DIFFER'} over {t['rounds']} rounds; "
            f"recorded p and q within {max(t['max_abs_dp'], t['max_abs_dq']):.1e}"
        )
    for check in e.get("check", []):
        lines.append(
            f"Distribution check on the compiled path, rule {check['rule']}, N = {check['n']}: "
            f"{'PASS' if check['passed'] else 'FAIL'} "
            f"(smallest p-value {check['min_p_value']:.2g}, "
            f"threshold {check['threshold']:.2g}; acceptance {check['acceptance']:.2f})"
        )
    if e["compiled"] not in COMPILE_BACKENDS:
        lines.append(f"compiled path skipped: {e['compiled']}")
    return "\n".join(lines)


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
        help="skip compiling once this many seconds have gone (default 300)",
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
