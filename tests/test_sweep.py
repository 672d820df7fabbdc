"""The measured sweep on tiny models: structure, figures read from the traces, progress,
stop, and the CLI's one-line errors. No timing is asserted."""

from __future__ import annotations

import json
import statistics

import pytest

from specviz import metrics
from specviz.analysis.sweep import (
    ROW_KEYS,
    SweepPlan,
    cell_row,
    csv_text,
    format_table,
    run_sweep,
    sweep,
)
from specviz.cli.main import main
from specviz.config import Settings
from tests.tiny import tiny_pair

PROMPT = "1 2 3"


@pytest.fixture(scope="module")
def pair(one_thread):
    # eos 6, this pair's most likely token: every run must still reach max_new_tokens
    return tiny_pair(vocab=16, eos=6, target_seed=0, draft_seed=2, sharpness=2.0)


def plan(**changes) -> SweepPlan:
    base = {
        "gammas": (1, 3),
        "temperatures": (0.7, 1.0),
        "settings": Settings(max_new_tokens=10, seed=5),
        "reps": 2,
        "prompt": PROMPT,
    }
    return SweepPlan(**(base | changes))


@pytest.fixture(scope="module")
def events(pair):
    return list(sweep(pair, plan()))


def test_one_row_per_cell_with_exactly_the_documented_keys(events):
    rows = [e.row for e in events if e.row is not None]
    cells = [(r["gamma"], r["temperature"]) for r in rows]
    assert cells == [(1, 0.7), (3, 0.7), (1, 1.0), (3, 1.0)]
    assert all(tuple(r) == ROW_KEYS for r in rows)
    # per temperature and repetition: one baseline and one run per gamma
    assert [e.done for e in events] == list(range(1, 13)) and {e.total for e in events} == {12}


def test_each_repetition_has_one_baseline_for_every_gamma_on_one_seed(events):
    at = [e for e in events if e.temperature == 0.7]
    assert [(e.rep, e.method, e.gamma) for e in at] == [
        (0, "ar", 0),
        (0, "spec", 1),
        (0, "spec", 3),
        (1, "ar", 0),
        (1, "spec", 1),
        (1, "spec", 3),
    ]
    assert [e.trace.settings.seed for e in at] == [5, 5, 5, 6, 6, 6]
    assert [e.trace.settings.gamma for e in at if e.method == "spec"] == [1, 3, 1, 3]
    # EOS is ignored: every run has exactly max_new_tokens tokens
    assert all(len(e.trace.token_ids) == 10 for e in events)
    assert any(6 in e.trace.token_ids[:-1] for e in events)


def test_figures_come_from_the_cells_traces(events):
    for last in (e for e in events if e.row is not None):
        cell = [e for e in events if (e.gamma, e.temperature) == (last.gamma, last.temperature)]
        spec = [e.trace for e in cell if e.method == "spec"]
        ar = [e.trace for e in events if e.method == "ar" and e.temperature == last.temperature]
        verified = [d for t in spec for r in t.rounds for d in r.drafted if d.status != "discarded"]
        row = last.row
        assert row["alpha"] == pytest.approx(sum(d.overlap for d in verified) / len(verified))
        match = sum(d.match_prob for d in verified) / len(verified)
        assert row["match_alpha"] == pytest.approx(match) and match <= row["alpha"] + 1e-9
        calls = sum(t.stats.target_calls for t in spec)
        assert row["tokens_per_call"] == pytest.approx(20 / calls)
        assert 0 < row["alpha"] < 1 and 1 <= row["tokens_per_call"] <= last.gamma + 1
        c = statistics.median(metrics.cost_ratio(s, a) for s, a in zip(spec, ar, strict=True))
        assert row["c"] == pytest.approx(c)
        # the baselines' seconds over the speculative runs' for the same tokens, pooled
        measured = metrics.pooled_speedup(list(zip(ar, spec, strict=True)))
        assert row["measured_speedup"] == pytest.approx(measured.value)
        assert (row["measured_low"], row["measured_high"]) == (measured.low, measured.high)
        assert row["measured_low"] <= row["measured_speedup"] <= row["measured_high"]
        seconds = sum(metrics.paired_speedup(a, s).ar_s for a, s in zip(ar, spec, strict=True))
        assert measured.ar_s == pytest.approx(seconds) and measured.tokens == 20
        expected = metrics.expected_speedup(row["alpha"], last.gamma, row["c"])
        assert row["expected_speedup"] == pytest.approx(expected)
        # the refined prediction: the cell's alpha at the costs measured before the sweep
        assert last.costs is events[0].costs and last.costs is not None
        predicted = last.costs.predicted(row["alpha"], last.gamma)
        assert row["predicted_speedup"] == pytest.approx(predicted)


def test_a_plan_may_skip_the_cost_measurement(pair):
    p = plan(gammas=(2,), temperatures=(0.7,), reps=1, costs=False)
    events = list(sweep(pair, p))
    assert events[-1].costs is None and events[-1].row["predicted_speedup"] is None
    assert "-" in format_table([events[-1].row])


def test_greedy_rows_say_temperature_0(pair):
    p = plan(gammas=(2,), temperatures=(0.7,), settings=Settings(greedy=True, max_new_tokens=6))
    events = list(sweep(pair, p))
    assert events[-1].row["temperature"] == 0.0
    spec = [e.trace for e in events if e.method == "spec"]
    ar = [e.trace for e in events if e.method == "ar"]
    assert all(s.token_ids == a.token_ids for s, a in zip(spec, ar, strict=True))
    assert cell_row(p.cells()[0], spec, ar, events[-1].costs) == events[-1].row


def test_stop_flag_ends_after_the_current_run_and_keeps_finished_rows(pair):
    seen = []
    result = run_sweep(pair, plan(), progress=seen.append, stop=lambda: len(seen) >= 5)
    assert result.stopped and len(seen) == 5
    assert [(r["gamma"], r["temperature"]) for r in result.rows] == [(1, 0.7)]
    d = result.to_dict()
    assert d["stopped"] and d["eos_ignored"] and d["gammas"] == [1, 3]
    assert "gamma" not in d["settings"] and d["settings"]["max_new_tokens"] == 10


def test_table_and_csv_list_every_row():
    rows = [dict.fromkeys(ROW_KEYS, 1.0) | {"gamma": g} for g in (1, 2)]
    assert len(format_table(rows).splitlines()) == 3
    lines = csv_text(rows).splitlines()
    assert lines[0] == ",".join(ROW_KEYS) and len(lines) == 3


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"gammas": ()}, "gammas is empty"),
        ({"gammas": (1, 33)}, "gamma must be in 1..32"),
        ({"gammas": (2, 2)}, "gammas repeats a value"),
        ({"temperatures": (-1.0,)}, "temperature must be a number >= 0"),
        ({"reps": 0}, "reps must be in 1..50"),
        ({"prompt": " "}, "prompt is empty"),
        ({"settings": Settings(adaptive_gamma=True)}, "constant gammas"),
        ({"settings": Settings(greedy=True)}, "greedy decoding has no temperature"),
    ],
)
def test_bad_plans_are_one_line_value_errors(changes, message):
    with pytest.raises(ValueError, match=message) as exc:
        plan(**changes)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--gammas", "0"], "gamma must be in 1..32"),
        (["--gammas", "a,b"], "could not parse 'a,b'"),
        (["--gammas", ","], "gammas is empty"),
        (["--gammas", "1", "--gamma", "4"], "not --gamma"),
        (["--gammas", "1", "--reps", "0"], "reps must be in 1..50"),
        (["--gammas", "1", "--temperatures", "-1"], "temperature must be a number >= 0"),
        (["--gammas", "1", "--temperature", "1", "--temperatures", "1"], "not both"),
        (["--gammas", "1", "--adaptive-gamma"], "constant gammas"),
        (["--gammas", "1", "--prompt", " "], "prompt is empty"),
        (["--gammas", "1", "--pair", "gpt-5"], "unknown pair 'gpt-5'"),
        (["--gammas", "1", "--max-new-tokens", "0"], "max_new_tokens must be in 1..2048"),
        (["--reps", "2"], "the following arguments are required: --gammas"),
        (["--gammas", "1", "--verification", "exact"], "argument --verification: invalid"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_code_2(capsys, argv, message):
    assert main(["sweep", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_json_and_csv(capsys, monkeypatch, tmp_path, pair):
    monkeypatch.setattr(
        "specviz.cli.across_runs.load_pair_from_args", lambda args, compiled=True: pair
    )
    path = tmp_path / "sweep.csv"
    argv = ["sweep", "--gammas", "1,2", "--temperatures", "0.5", "--reps", "1", "--json"]
    argv += ["--max-new-tokens", "5", "--prompt", PROMPT, "--raw", "--csv", str(path)]
    assert main(argv) == 0
    out, _ = capsys.readouterr()
    d = json.loads(out)
    assert [tuple(r) for r in d["rows"]] == [ROW_KEYS, ROW_KEYS]
    assert [r["gamma"] for r in d["rows"]] == [1, 2] and d["temperatures"] == [0.5]
    assert len(path.read_text().splitlines()) == 3


def test_cli_exact_match_sweep_expects_from_sum_p_q(capsys, monkeypatch, pair):
    monkeypatch.setattr(
        "specviz.cli.across_runs.load_pair_from_args", lambda args, compiled=True: pair
    )
    argv = ["sweep", "--gammas", "2", "--temperatures", "1.0", "--reps", "1", "--json"]
    argv += ["--max-new-tokens", "8", "--prompt", PROMPT, "--raw"]
    assert main([*argv, "--verification", "exact-match"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["settings"]["verification"] == "exact-match"
    (row,) = d["rows"]
    expected = metrics.expected_speedup(row["match_alpha"], 2, row["c"])
    assert row["expected_speedup"] == pytest.approx(expected)
