"""The calibration view: the exact rule lies on the diagonal within its error bars, a wrong
rule departs from it, and the CLI reads traces as `generate --json` writes them."""

from __future__ import annotations

import json

import pytest

from specviz.analysis.calibration import (
    Bins,
    Calibration,
    bonferroni_z,
    residual_candidates,
    wilson,
)
from specviz.cli.main import main
from specviz.config import Settings
from specviz.engine import generate
from tests.tiny import bag_pair

SEEDS = 120


def traces(rule: str, top_n: int = 4, seeds: int = SEEDS):
    # A draft temperature spreads min(1, p/q) over the whole of [0, 1].
    pair = bag_pair()
    base = Settings(temperature=1.0, top_p=1.0, draft_temperature=1.5, gamma=4, top_n=top_n)
    return [
        generate(pair, "1 2", base.with_(max_new_tokens=24, seed=s, rule=rule))
        for s in range(seeds)
    ]


@pytest.fixture(scope="module")
def exact(one_thread):
    return traces("rejection")


def judged(rows):
    return [b for b in rows if b["n"] >= 40]


def test_exact_rule_lies_within_its_error_bars(exact):
    d = Calibration().add_all(exact).to_dict()
    for key in ("bins", "residual_bins"):
        rows = judged(d[key])
        assert len(rows) >= 6, key  # the check has something to judge
        assert all(b["ci_low"] <= b["predicted"] <= b["ci_high"] for b in rows), key
        assert all(b["lo"] <= b["predicted"] <= b["hi"] for b in d[key])
    assert d["summary"]["drafts"]["within"] == d["summary"]["drafts"]["judged"]
    assert d["traces"] == SEEDS and "Wilson" in d["interval"]


def test_accept_without_draw_departs_from_the_diagonal(one_thread):
    d = Calibration().add_all(traces("accept-without-draw", seeds=40)).to_dict()
    outside = [b for b in judged(d["bins"]) if not b["ci_low"] <= b["predicted"] <= b["ci_high"]]
    assert len(outside) >= 3
    assert all(b["observed"] == 0 for b in d["bins"] if b["hi"] <= 0.9)


def test_the_drawn_token_listed_past_top_n_is_left_out(one_thread):
    """With top_n 1 the drawn token is often listed only because it was drawn; counting
    that entry would pile observed frequency onto whatever its residual was."""
    ts = traces("rejection", top_n=1, seeds=60)
    appended = sum(
        len(r.added.top) > 1 for t in ts for r in t.rounds if r.added.status == "resampled"
    )
    assert appended > 20
    rows = judged(Calibration().add_all(ts).to_dict()["residual_bins"])
    assert rows and all(b["ci_low"] <= b["predicted"] <= b["ci_high"] for b in rows)
    top = [{"id": 1, "residual": 0.5}, {"id": 2, "residual": 0.3}, {"id": 7, "residual": 0.01}]
    assert residual_candidates(top, 2) == top[:2] and residual_candidates(top, 3) == top


def test_greedy_and_ar_traces_add_no_decisions(one_thread):
    pair = bag_pair()
    cal = Calibration()
    cal.add(generate(pair, "1", Settings(greedy=True, max_new_tokens=8)))
    cal.add(generate(pair, "1", Settings(method="ar", max_new_tokens=8)))
    assert cal.traces == 2 and cal.drafts.total == 0 and cal.residual.total == 0


def test_wilson_interval_and_bins():
    low, high = wilson(0, 10, 1.96)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    low, high = wilson(5, 10, 1.96)
    assert (low, high) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert bonferroni_z(10) == pytest.approx(2.807, abs=1e-3)
    b = Bins(4)
    for x, hit in [(0.0, False), (0.25, True), (0.5, True), (1.0, True), (0.99, False)]:
        b.add(x, hit)
    assert b.n == [1, 1, 1, 2] and b.hits == [0, 1, 1, 1]
    rows = b.rows(1.96, min_n=2)
    assert [r["judged"] for r in rows] == [False, False, False, True]
    assert rows[-1]["predicted"] == pytest.approx(0.995) and rows[-1]["observed"] == 0.5
    with pytest.raises(ValueError, match="bins must be in 2..100"):
        Bins(1)


def test_cli_reads_json_lines_and_single_trace_files(tmp_path, capsys, exact):
    lines = tmp_path / "samples.jsonl"
    lines.write_text("".join(t.to_json() + "\n" for t in exact[:30]))
    single = tmp_path / "one.json"
    single.write_text(exact[30].to_json(indent=2))
    assert main(["calibration", str(lines), str(single), "--json"]) == 0
    out, err = capsys.readouterr()
    d = json.loads(out)
    assert d["traces"] == 31 and err == ""
    expected = Calibration().add_all(exact[:31]).to_dict()
    assert d["bins"] == json.loads(json.dumps(expected["bins"]))
    keys = {"lo", "hi", "n", "predicted", "observed", "ci_low", "ci_high"}
    assert all(keys <= set(b) for b in d["bins"] + d["residual_bins"])
    assert main(["calibration", str(lines)]) == 0
    assert "lie within their error bars" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "cannot read"),
        ("not json\n", "line 1: not JSON"),
        ('{"method": "spec"}', "trace 1: trace is missing the key"),
        ('{"schema": "other/9"}\n{"a": 1}', "unsupported trace schema"),
    ],
)
def test_cli_bad_files_are_one_line_and_exit_code_2(tmp_path, capsys, content, message):
    path = tmp_path / "t.json"
    if content is not None:
        path.write_text(content)
    assert main(["calibration", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and err.count("\n") == 1


def test_cli_refuses_traces_without_sampled_decisions(tmp_path, capsys, one_thread):
    path = tmp_path / "greedy.json"
    path.write_text(generate(bag_pair(), "1", Settings(greedy=True, max_new_tokens=6)).to_json())
    assert main(["calibration", str(path)]) == 2
    assert "no sampled draft decisions" in capsys.readouterr().err


def test_exact_match_traces_add_no_decisions(one_thread):
    """No u is drawn, and the sample kept at a mismatch is not distributed as p given the
    mismatch: neither diagram counts exact-match rounds."""
    pair = bag_pair()
    s = Settings(temperature=1.0, top_p=1.0, gamma=4, max_new_tokens=24)
    ts = [generate(pair, "1 2", s.with_(seed=i, verification="exact-match")) for i in range(5)]
    assert any(r.added.status == "resampled" for t in ts for r in t.rounds)
    c = Calibration().add_all(ts)
    assert c.traces == 5 and c.drafts.total == 0 and c.residual.total == 0
