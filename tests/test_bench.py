"""The benchmark's plumbing on the tiny pair: contenders, fairness, ratios, reports.

No timing is asserted: these tests check that both sides are asked for the same thing and
that every figure reaches the table, the CSV files and the HTML report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz import bench
from specviz.bench import report as bench_report
from tests.tiny import tiny_pair

TOKENS = 10
PROMPTS = [
    bench.BenchPrompt("chat", "tiny-1", "1 2 3 1 2"),
    bench.BenchPrompt("copy-edit", "tiny-2", "4 5 6 4 5"),
]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair():
    # EOS = 3 is likely within ten tokens: both sides must ignore it all the same
    return tiny_pair(vocab=16, eos=3, target_seed=0, draft_seed=2)


@pytest.fixture(scope="module")
def opts():
    return bench.BenchOptions.make(
        quick=True, gammas=(2, 4), max_new_tokens=TOKENS, warmup_tokens=4, load_probe=False
    )


@pytest.fixture(scope="module")
def result(pair, opts):
    messages: list[str] = []
    r = bench.run_bench(pair, opts, log=messages.append, prompts=PROMPTS)
    r.machine["messages"] = messages
    return r


def test_every_contender_runs_every_repetition(result, opts, pair):
    names = {c.name for c in bench.all_contenders(pair, "greedy", opts)}
    assert "transformers assisted g=2" in names and "specviz spec g=4 minimal trace" in names
    expected = len(PROMPTS) * len(opts.modes) * len(names) * opts.reps
    assert len(result.rows) == expected
    assert all(r["new_tokens"] == TOKENS for r in result.rows)  # EOS ignored on both sides
    # progress on stderr as it goes: each warm-up run, then each timed run
    messages = result.machine["messages"]
    warm = messages.index("warm-up done")
    assert warm >= 1 and all(m.startswith("warm-up ") for m in messages[:warm])
    timed = [m for m in messages if "ms/token" in m]
    assert len(timed) == expected and "repetition 1/" in timed[0]


def test_the_machine_and_the_draft_are_recorded(result):
    m = result.machine
    assert m["cpu"] and isinstance(m["cpu_flags"], list) and m["torch_threads"] >= 1
    assert m["torch"] and "draft_variant" in m  # None for the tiny pair: no variant
    assert "CPU flags:" in bench.format_report(result)


def test_repetitions_are_interleaved(result):
    rows = [r for r in result.rows if r["prompt"] == "tiny-1" and r["mode"] == "greedy"]
    per_rep = len(rows) // 3
    firsts = [rows[i * per_rep]["contender"] for i in range(3)]
    assert len(set(firsts)) == 3  # each repetition starts with a different contender
    assert [r["rep"] for r in rows] == sorted(r["rep"] for r in rows)
    # the trace overhead's two runs are neighbours, and each goes first in turn
    full, minimal = "specviz spec g=4", "specviz spec g=4 minimal trace"
    orders = [[r["contender"] for r in rows if r["rep"] == i] for i in range(3)]
    gaps = [o.index(minimal) - o.index(full) for o in orders]
    assert gaps[0] == 1 and gaps[1] == -1


def test_greedy_outputs_agree_in_fp32(result):
    greedy = [r for r in result.rows if r["mode"] == "greedy"]
    assert all(r["same_as_ar"] for r in greedy), [
        (r["contender"], r["first_difference"]) for r in greedy if not r["same_as_ar"]
    ]


def test_constant_gamma_reaches_transformers(result):
    """At most gamma + 1 tokens per target forward after the prefill: the constant
    schedule really was applied (passing it to generate() alone would not be)."""
    for g in (2, 4):
        rows = [r for r in result.rows if r["contender"] == f"transformers assisted g={g}"]
        assert rows
        for r in rows:
            # the first forward scores the prompt plus up to g drafts
            assert r["tokens_per_forward"] <= g + 1


CONSTANT_2 = {
    "num_assistant_tokens": 2,
    "num_assistant_tokens_schedule": "constant",
    "assistant_confidence_threshold": 0.0,
}


def test_schedule_is_read_from_the_draft_config_not_from_generate_kwargs():
    """With a draft identical to the target every draft is accepted, so tokens per forward
    show how many were drafted: gamma + 1 with the config set, far more with the default
    of 20 even when num_assistant_tokens is passed to generate()."""
    same = tiny_pair(vocab=16, target_seed=0, draft_seed=0)
    ids = [1, 2, 3]
    configured = bench.hf_run(same, "greedy", assistant=CONSTANT_2)(ids, "", 0, 12)
    assert configured.target_calls == 4  # 3 tokens per forward: 2 drafts + 1
    ignored = bench.hf_run(same, "greedy", assistant={}, num_assistant_tokens=2)(ids, "", 0, 12)
    assert ignored.target_calls < configured.target_calls


def test_the_assistant_sees_every_prompt_token(pair):
    """An EOS inside the prompt (a chat template's end of turn) stays in the draft's
    context: transformers infers an attention mask from the pad id when none reaches the
    assistant, and with the EOS as pad it would mask those tokens out."""
    eos = min(pair.eos_ids)
    ids = [1, eos, 2, eos, 4]
    masks: list = []
    hook = pair.draft.model.register_forward_pre_hook(
        lambda _m, _a, kw: masks.append(kw.get("attention_mask")), with_kwargs=True
    )
    try:
        bench.hf_run(pair, "greedy", assistant=CONSTANT_2)(ids, "", 0, 8)
    finally:
        hook.remove()
    assert masks, "the draft never ran"
    assert all(m is None or bool((m == 1).all()) for m in masks), masks


def test_assistant_config_is_restored(pair):
    gc = pair.draft.model.generation_config
    before = gc.to_dict()
    with bench.assistant_config(pair.draft.model, num_assistant_tokens=3, eos_token_id=None):
        assert gc.num_assistant_tokens == 3
    assert gc.to_dict() == before


def test_every_ratio_is_present(result, opts):
    items = {(r["item"], r["gamma"]) for r in result.ratios}
    for g in opts.gammas:
        assert {
            ("transformers_assisted_over_specviz_spec", g),
            ("specviz_ar_over_specviz_spec", g),
            ("measured_over_leviathan_tokens_per_round", g),
        } <= items
    assert {
        "transformers_ar_over_specviz_ar",
        "transformers_assisted_default_over_specviz_best_schedule",
        "transformers_prompt_lookup_over_specviz_ngram",
        "full_trace_overhead_vs_minimal",
        "full_trace_cost_over_run",
        "best_constant_gamma_over_adaptive",
    } <= {i for i, _ in items}
    overheads = {"full_trace_overhead_vs_minimal", "full_trace_cost_over_run"}
    values = [r["value"] for r in result.ratios if r["item"] not in overheads]
    assert all(v is not None and v > 0 for v in values)
    assert len(result.summary) == len({(s["mode"], s["item"], s["gamma"]) for s in result.summary})


def test_tokens_per_round_ratio_on_synthetic_rows():
    # alpha = 0.5, gamma = 2: Leviathan expects (1 - 0.125) / 0.5 = 1.75 tokens per round
    row = {
        "contender": "specviz spec g=2",
        "full_rounds": 4,
        "full_round_tokens": 7,
        "full_round_accepted": 3,
        "full_round_verified": 6,
    }
    assert bench.tokens_per_round_ratio([row], 2) == pytest.approx(1.0)


def test_the_report_compares_the_target_calls_of_each_pair_greedy():
    from specviz.bench.report import calls_line

    def row(side, kind, gamma, prompt, calls, mode="greedy"):
        return {
            "mode": mode,
            "side": side,
            "type": kind,
            "gamma": gamma,
            "prompt": prompt,
            "target_forwards": calls,
        }

    rows = [
        row("specviz", "spec", 4, "a", 8),
        row("specviz", "spec", 4, "a", 8),
        row("transformers", "assisted", 4, "a", 8),
        row("transformers", "assisted", 4, "a", 9),
        row("specviz", "spec", 4, "b", 7),
        row("transformers", "assisted", 4, "b", 6),
        row("specviz", "spec", 8, "a", 5),  # no transformers contender at gamma 8
        row("specviz", "confident", 20, "a", 3),
        row("transformers", "default", None, "a", 4),
        row("specviz", "ngram", 4, "b", 13),
        row("transformers", "lookup", 4, "b", 15),
        row("specviz", "spec", 4, "a", 99, mode="sample"),  # sampled runs are left out
    ]
    assert calls_line(rows) == (
        "greedy target calls, specviz/transformers per prompt (a, b): gamma 4: 8/8.5, 7/6; "
        "default schedule, specviz confident g=20: 3/4, n/a; n-gram g=4: n/a, 13/15"
    )
    assert calls_line(rows[7:8]) == "greedy target calls: no pair of contenders to compare"


def test_report_table_and_files(result, tmp_path):
    text = bench.format_report(result)
    assert "greedy target calls, specviz/transformers per prompt" in text
    for item, label in bench.ITEM_LABELS.items():
        assert (label in text) == (item not in bench.COMPILED_ITEMS)
    paths = bench.write_outputs(result, tmp_path)
    names = {p.name for p in paths}
    assert {"runs.csv", "ratios.csv", "summary.csv", "bench.json", "report.html"} <= names
    assert "plotly" in (tmp_path / "report.html").read_text()
    # the machine in every output: JSON, CSV (machine.csv and a column of runs.csv), HTML
    cpu = result.machine["cpu"]
    assert json.loads((tmp_path / "bench.json").read_text())["machine"]["cpu_flags"] is not None
    assert "cpu_flags" in (tmp_path / "machine.csv").read_text()
    assert cpu in (tmp_path / "runs.csv").read_text().splitlines()[1]
    assert "CPU flags:" in (tmp_path / "report.html").read_text()
    assert json.loads((tmp_path / "bench.json").read_text())["options"]["max_new_tokens"] == TOKENS
    assert len(bench.bench_figures(result)) == 2
    # the PNG copies: every figure's where kaleido renders, else none; nothing half-written
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs in ([], ["report-1.png", "report-2.png"]), pngs
    assert not list(tmp_path.glob(".*"))


def test_png_copies_are_all_written_or_none(result, tmp_path, monkeypatch):
    """A render that fails after the first figure leaves no PNG behind."""
    import plotly.io as pio

    def first_then_fail(figs, files, **kw):
        Path(files[0]).write_bytes(b"\x89PNG")
        raise RuntimeError("no Chrome")

    monkeypatch.setattr(pio, "write_images", first_then_fail)
    figs = bench.bench_figures(result)
    assert bench_report.write_pngs(figs, tmp_path) == [] and not list(tmp_path.iterdir())


def test_prompt_set_has_every_kind_and_humaneval():
    quick = bench.prompt_set(quick=True)
    assert [p.kind for p in quick] == list(bench.KINDS)
    code = [p for p in bench.prompt_set(quick=False) if p.kind == "code"]
    assert [p.name for p in code] == ["HumanEval/0", "HumanEval/2"]
    assert "def has_close_elements" in code[0].text


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"reps": 2}, "reps"),
        ({"gammas": (0,)}, "gammas"),
        ({"kinds": ("poetry",)}, "kind"),
        ({"modes": ("beam",)}, "mode"),
    ],
)
def test_bad_options(changes, match):
    with pytest.raises(ValueError, match=match):
        bench.BenchOptions.make(quick=True, **changes)


def test_quick_defaults():
    o = bench.BenchOptions.make(quick=True)
    assert o.gammas == bench.QUICK_GAMMAS and o.max_new_tokens == bench.QUICK_TOKENS
    assert [p.kind for p in bench.prompt_set(True, o.kinds)] == ["chat", "code", "copy-edit"]
    full = bench.BenchOptions.make()
    assert full.gammas == (1, 2, 4, 8) and full.reps >= 3


def test_cli_bench_json(pair, monkeypatch, capsys, tmp_path):
    from specviz.cli import bench as bench_cli
    from specviz.cli import main as cli

    monkeypatch.setattr(bench_cli, "load_pair_from_args", lambda args, compiled=True: pair)
    monkeypatch.setattr(bench.running, "prompt_set", lambda quick, kinds: PROMPTS[:1])
    argv = ["bench", "--quick", "--max-new-tokens", "4", "--modes", "greedy", "--gammas", "2"]
    argv.append("--json")
    assert cli.main([*argv, "--no-load-probe", "--out", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["options"]["modes"] == ["greedy"] and out["rows"]
    assert (tmp_path / "report.html").exists()
    assert cli.main(["bench", "--reps", "1"]) == 2


@pytest.fixture(scope="module")
def compiled_result(pair):
    opts = bench.BenchOptions.make(
        quick=True,
        gammas=(4,),
        max_new_tokens=TOKENS,
        warmup_tokens=4,
        load_probe=False,
        hf=True,
        compile="aot_eager",
    )
    return opts, bench.run_bench(pair, opts, prompts=PROMPTS[:1])


def test_the_compiled_bench_adds_its_contenders_and_ratios(compiled_result):
    opts, result = compiled_result
    names = {r["contender"] for r in result.rows}
    compiled = {"specviz AR compiled", "specviz spec g=4 compiled"}
    assert compiled | {"specviz spec g=4 minimal trace compiled"} <= names
    greedy = [r for r in result.rows if r["mode"] == "greedy" and r["contender"] in compiled]
    assert greedy and all(r["same_as_ar"] for r in greedy)
    found = {r["item"] for r in result.ratios if r["value"] is not None}
    assert set(bench.COMPILED_ITEMS) <= found
    text = bench.format_report(result)
    for item in bench.COMPILED_ITEMS:
        assert bench.ITEM_LABELS[item] in text
    c = result.loads["compile"]
    assert c["backend"] == "aot_eager" and c["restart_s"] is None  # no probe off the offline pair
    assert "compiling (aot_eager" in text


def test_the_bench_refuses_an_unknown_backend():
    with pytest.raises(ValueError, match="compile backend"):
        bench.BenchOptions.make(quick=True, compile="tvm")


def test_the_trace_overhead_pairs_each_repetition_s_runs():
    """Seeds 0 to 2 make runs of 40, 60 and 50 ms/token; the full trace adds 2 % to each,
    except one outlier. The median of the three paired ratios finds the 2 %; the ratio of
    each contender's median would say -10 % (45 against 50: another seed's run)."""
    from specviz.bench.ratios import paired_overhead

    base = [40.0, 60.0, 50.0]
    rows = [{"contender": "full", "rep": r, "ms_per_token": ms * 1.02} for r, ms in enumerate(base)]
    rows += [{"contender": "minimal", "rep": r, "ms_per_token": ms} for r, ms in enumerate(base)]
    rows[1]["ms_per_token"] = 45.0  # seed 1's full run happened to be fast: an outlier
    assert paired_overhead(rows, "full", "minimal") == pytest.approx(0.02)
    assert paired_overhead(rows[:1], "full", "minimal") is None  # no minimal run to pair


def test_the_trace_cost_is_the_time_outside_the_model_calls():
    """Twins whose model calls took 0.90 s and 1.00 s (machine noise) and whose time outside
    them was 0.05 s against 0.03 s: the trace cost is 0.02 s over the minimal run's 1.03 s,
    whatever the noise in the calls; the wall ratio would say -8 %."""
    from specviz.bench.ratios import paired_overhead, paired_trace_cost

    def row(name: str, rep: int, calls_s: float, outside_s: float) -> dict:
        wall = calls_s + outside_s
        return {"contender": name, "rep": rep, "wall_s": wall, "ms_per_token": wall * 1e3 / 32,
                "draft_ms": calls_s * 400, "verify_ms": calls_s * 600}  # fmt: skip

    rows = [row("full", 0, 0.90, 0.05), row("minimal", 0, 1.00, 0.03)]
    assert paired_trace_cost(rows, "full", "minimal") == pytest.approx(0.02 / 1.03)
    assert paired_overhead(rows, "full", "minimal") == pytest.approx(0.95 / 1.03 - 1)
    rows += [row("full", 1, 1.0, 0.04), row("minimal", 1, 1.0, 0.03), row("full", 2, 1.0, 0.9)]
    assert paired_trace_cost(rows, "full", "minimal") == pytest.approx(
        (0.02 / 1.03 + 0.01 / 1.03) / 2  # the median of two pairs; rep 2 has no twin
    )
    assert paired_trace_cost(rows[:1], "full", "minimal") is None


def test_the_confident_contender_mirrors_transformers_default_schedule():
    """specviz's "confident" contender drafts as transformers' default assistant schedule
    does (the defaults as this transformers sets them), and the default-schedule row sets
    transformers against whichever specviz schedule was quicker."""
    from transformers import GenerationConfig

    from specviz.bench import contenders, ratios

    defaults = GenerationConfig()._get_default_generation_params()
    assert defaults["num_assistant_tokens"] == contenders.HF_DEFAULT_TOKENS
    assert defaults["num_assistant_tokens_schedule"] == "constant"
    assert defaults["assistant_confidence_threshold"] == contenders.HF_DEFAULT_CONFIDENCE
    confident = contenders.contender_name("specviz", "confident", contenders.HF_DEFAULT_TOKENS)
    assert ratios._best_schedule({confident: 40.0}, 50.0, 8, 44.0) == (20, 44.0 / 40.0)
    assert ratios._best_schedule({confident: 60.0}, 50.0, 8, 44.0) == (8, 44.0 / 50.0)
    assert ratios._best_schedule({}, 50.0, 8, 44.0) == (8, 44.0 / 50.0)


def test_the_confident_contender_runs_with_its_stop(result, opts, pair):
    from specviz.bench import contenders

    name = contenders.contender_name("specviz", "confident", 20)
    assert name in {c.name for c in bench.all_contenders(pair, "greedy", opts)}
    rows = [r for r in result.rows if r["contender"] == name]
    assert rows and all(r["new_tokens"] == TOKENS for r in rows)


# --- the roofline's prediction beside each speedup ---------------------------------------------


def test_the_roofline_predictions_on_synthetic_rows():
    from specviz.bench import ratios

    roof = ratios.roofline(1_000_000_000, 250_000_000, 10.0)  # floors 100 ms and 25 ms
    assert roof["target_floor_ms"] == pytest.approx(100.0)
    assert roof["draft_floor_ms"] == pytest.approx(25.0)
    rows = [
        {"contender": f"specviz spec g=2{s}", "full_round_accepted": 3, "full_round_verified": 6}
        for s in ("", " compiled")
    ]
    # alpha 0.5, gamma 2: 1.75 tokens a round; a round at the floor 2 x 25 + 100 = 150 ms
    assert ratios.spec_floor_ms(roof, 0.5, 2) == pytest.approx(150 / 1.75)
    # both at the floor: Leviathan's formula at c = 0.25
    want = 1.75 / (2 * 0.25 + 1)
    med = {"specviz AR": 200.0}
    for key in (ratios.SPEEDUP, ratios.COMPILED_PATH_SPEEDUP):
        assert ratios.roofline_prediction(key, 2, rows, med, roof) == pytest.approx(want)
    # eager AR as measured against the compiled spec at its floor
    got = ratios.roofline_prediction(ratios.COMPILED_SPEEDUP, 2, rows, med, roof)
    assert got == pytest.approx(200 / (150 / 1.75))
    assert ratios.roofline_prediction(ratios.AR_PARITY, None, rows, med, roof) is None
    assert ratios.roofline_prediction(ratios.SPEEDUP, 2, rows, med, None) is None
    assert ratios.roofline_prediction(ratios.SPEEDUP, 4, rows, med, roof) is None  # no rows


def test_the_compiled_rows_carry_the_roofline(compiled_result):
    from specviz.bench import ratios

    _, result = compiled_result
    roof = result.machine["roofline"]
    assert roof["target_bytes"] >= roof["draft_bytes"] > 0 and roof["bandwidth_gb_s"] > 0
    for key in ratios.ROOFLINE_ITEMS:
        rs = [r for r in result.ratios if r["item"] == key and r["gamma"] == 4]
        assert rs and all(r["roofline"] is not None and r["roofline"] > 0 for r in rs)
        summary = [s for s in result.summary if s["item"] == key and s["gamma"] == 4]
        assert summary and all(s["roofline"] is not None for s in summary)
    text = bench.format_report(result)
    assert "roofline's prediction" in text and "roofline: memory bandwidth" in text


def test_the_first_token_after_a_restart(monkeypatch):
    import subprocess
    from types import SimpleNamespace

    from specviz.bench import report, running

    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd[3:])
        return SimpleNamespace(returncode=0, stdout='{"first_token_s": 12.5, "load_s": 3.0}\n')

    monkeypatch.setattr(subprocess, "run", fake_run)
    got = running.first_token_after_restart("cpu", "inductor")
    assert got == {"first_token_s": 12.5, "load_s": 3.0, "compiled": "inductor"}
    assert seen[0][:2] == ["cpu", "inductor"]
    got["floor_ms"] = 55.0
    line = report._first_token_line(got)
    assert line.startswith("first token after a restart (inductor path, fresh process")
    assert "12.5 s, of which loading 3.0 s; the roofline's floor for it: 55.0 ms" in line
    monkeypatch.setattr(
        subprocess, "run", lambda cmd, **kw: SimpleNamespace(returncode=1, stderr="x\nboom")
    )
    assert running.first_token_after_restart("cpu", None) == {"error": "boom"}


def test_the_eagle_head_joins_the_contenders_where_this_machine_has_one(
    opts, tmp_path, monkeypatch
):
    """No head for the target: no eagle contender. A head saved for the target's weights
    (as train-head saves it): one, at the reference gamma, and it runs."""
    from safetensors.torch import save_file

    from specviz.bench.options import reference_gamma
    from specviz.head_cache import head_file
    from tests import head_check
    from tests.tiny import tiny_pair

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    pair = tiny_pair()
    assert not [c for c in bench.all_contenders(pair, "greedy", opts) if c.kind == "eagle"]
    head = head_check.trained_head(pair, 3)
    path = head_file(pair.target.model)
    path.parent.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in head.own_state().items()}, str(path))
    found = [c for c in bench.all_contenders(pair, "greedy", opts) if c.kind == "eagle"]
    assert [c.name for c in found] == [f"specviz eagle head g={reference_gamma(opts.gammas)}"]
    sample = found[0].run([1, 2, 3], "1 2 3", 0, 6)
    assert len(sample.tokens) == 6 and sample.trace.models["drafter"] == "eagle"
