"""The roofline (specviz.costs): the memory's bandwidth, measured once per process and never
at import; the bytes a step of each model reads, per dtype and variant; each call's distance
from its floor in `costs` and in the app's Speed tab."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from specviz import costs
from specviz.backend.offline import quantize_w8
from specviz.trace import Round, Stats, Trace
from specviz.views import timing
from tests.tiny import tiny_model, tiny_pair

BW = costs.Bandwidth("cpu", 10.0, 10.0, 9.0, "given")


@pytest.fixture()
def known_bandwidth(monkeypatch):
    monkeypatch.setattr(costs, "_bandwidths", {"cpu": BW})
    return BW


def test_importing_measures_nothing():
    code = "import specviz.costs as c, specviz.views.timing; print(len(c._bandwidths))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


def test_the_bandwidth_is_measured_once_per_process(monkeypatch):
    monkeypatch.setattr(costs, "_bandwidths", {})
    calls = []
    monkeypatch.setattr(costs, "measure_bandwidth", lambda device: calls.append(device) or BW)
    assert costs.known_bandwidth("cpu") is None
    assert costs.bandwidth("cpu") is BW and costs.bandwidth("cpu") is BW
    assert calls == ["cpu"] and costs.known_bandwidth("cpu") is BW


def test_a_small_measurement_is_a_plausible_rate():
    bw = costs.measure_bandwidth("cpu", mib=8, reps=3)
    assert 0.1 < bw.gb_s < 10_000 and bw.gb_s == max(bw.sum_gb_s, bw.copy_gb_s)
    assert "median of 3 sums" in bw.how and "8 MiB" in bw.how
    # the floor of reading 1 GB at 10 GB/s is 100 ms
    assert BW.floor_ms(10**9) == pytest.approx(100.0)


def params_bytes(m: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in m.parameters())


def test_a_step_reads_every_weight_once_and_one_row_of_the_embedding_table():
    m = tiny_model(64, 0)  # untied: embedding [64, 16] and head [64, 16], fp32
    rows = 64 * 16 * 4
    buffers = sum(b.numel() * b.element_size() for b in m.buffers())
    assert costs.weight_bytes(m) == params_bytes(m) - rows + 16 * 4 + buffers
    tied = tiny_model(64, 0, tie_word_embeddings=True)
    # tied: the head reads the table whole, and it counts once
    assert costs.weight_bytes(tied) == params_bytes(tied) + buffers
    # a 16-bit copy reads half as many bytes
    half = tiny_model(64, 0).to(torch.bfloat16)
    assert costs.weight_bytes(half) == pytest.approx(costs.weight_bytes(m) / 2, abs=buffers)


def test_int8_weights_count_one_byte_each():
    m = tiny_model(64, 0)
    q = quantize_w8(m, torch.bfloat16)
    int8 = sum(
        b.numel()
        for name, b in q.named_buffers()
        if name.endswith("weight") and b.dtype == torch.int8
    )
    assert int8 > 0 and costs.weight_bytes(q) < costs.weight_bytes(m) / 2
    assert costs.weight_bytes(q) >= int8


def test_a_dynamic_int8_layer_counts_its_packed_weight():
    lin = torch.nn.Sequential(torch.nn.Linear(64, 32))
    dyn = torch.ao.quantization.quantize_dynamic(lin, {torch.nn.Linear}, dtype=torch.qint8)
    # int8 weights and a float32 bias
    assert costs.weight_bytes(dyn) == 64 * 32 + 32 * 4


def test_the_kv_cache_of_a_position():
    m = tiny_model(64, 0, layers=2)  # 2 layers, 2 key-value heads of 8, fp32
    assert costs.kv_bytes_per_position(m) == 2 * 2 * 2 * 8 * 4
    assert costs.step_bytes(m, 10) == costs.weight_bytes(m) + 10 * 2 * 2 * 2 * 8 * 4


def step_costs() -> costs.StepCosts:
    return costs.StepCosts(
        device="cpu",
        threads=2,
        draft_variant=None,
        target_step_ms=120.0,
        draft_step_ms=30.0,
        draft_step2_ms=33.0,
        verify=[costs.VerifyCost(5, 200.0, 200 / 120)],
        overhead_ms_per_round=2.0,
    )


def test_each_call_against_its_floor_and_the_printed_lines():
    roof = costs.roofline_of(step_costs(), BW, 540_000_000, 135_000_000, 1000, 500, 100)
    by = {c.call: c for c in roof.calls}
    # 540.1 MB at 10 GB/s: a floor of 54.01 ms
    assert by["target step"].floor_ms == pytest.approx(54.01)
    assert by["target step"].ratio == pytest.approx(120 / 54.01)
    assert by["verify, 5 positions"].floor_ms == pytest.approx(54.01)
    assert by["draft step"].floor_ms == pytest.approx(13.505)
    assert set(by) == {"target step", "verify, 5 positions", "draft step", "draft, 2 tokens"}
    text = "\n".join(costs.roofline_lines(roof))
    assert "memory bandwidth 10.0 GB/s" in text and "target reads 540.0 MB a step" in text
    assert "floor 54.00 ms" in text and "2.22x" in text


def test_the_roofline_round_trips_through_the_costs_json():
    sc = step_costs()
    sc.roofline = costs.roofline_of(sc, BW, 540_000_000, None)
    back = costs.StepCosts.from_dict(json.loads(json.dumps(sc.to_dict())))
    assert back == sc
    d = sc.to_dict()["roofline"]
    assert d["target_floor_ms"] == pytest.approx(54.0) and d["draft_bytes"] is None
    assert d["calls"][0]["ratio"] == pytest.approx(120 / 54.0)


def test_costs_measures_the_roofline_when_asked(known_bandwidth):
    pair = tiny_pair(vocab=32)
    from specviz.config import Settings

    s = Settings(temperature=1.0, top_p=1.0)
    sc = costs.measure_costs(
        pair, s, gammas=(2,), prompt="1 2 3 4", reps=3, tokens=12, roofline=True
    )
    assert sc.roofline is not None and sc.roofline.bandwidth is BW
    assert sc.roofline.target_bytes == costs.weight_bytes(pair.target.model)
    assert [c.call for c in sc.roofline.calls][:2] == ["target step", "verify, 3 positions"]
    assert (
        costs.measure_costs(pair, s, gammas=(2,), prompt="1 2", reps=3, tokens=8).roofline is None
    )


def speed_trace(models: dict) -> Trace:
    rounds = [
        Round(0, 0, 2, [], None, draft_ms=20.0, verify_ms=100.0, t_s=0.15, tree=[1, 1]),
        Round(1, 3, 2, [], None, draft_ms=20.0, verify_ms=120.0, t_s=0.30, tree=[1, 1]),
    ]
    return Trace("spec", "x", [1, 2], {}, models, rounds=rounds, stats=Stats(wall_s=0.3))


def test_the_speed_tab_rows():
    rows = dict(timing.roofline_rows(speed_trace({}), 10.0, (500_000_000, 1000), None))
    assert rows["memory bandwidth (measured once)"] == "10.0 GB/s"
    # mean verify 110 ms; context 2 + 1 = 3 positions: 500.003 MB, a floor of 50.0 ms
    ((label, value),) = [(k, v) for k, v in rows.items() if k.startswith("target's verify")]
    assert "reads 500 MB" in label and value == "50.0 ms · measured 110.0 ms = 2.20x the floor"
    assert not any(k.startswith("draft") for k in rows)  # the draft's bytes are not known
    rows = dict(timing.roofline_rows(speed_trace({}), 10.0, (500_000_000, 0), (2_000, 0)))
    assert rows["draft's step: floor (reads 2.0 kB)"] == (
        "0.0 ms · measured 10.0 ms = 50000.00x the floor"
    )


def test_the_speed_tab_shows_the_roofline_of_a_pair_the_app_opened(known_bandwidth, monkeypatch):
    from specviz.ui import frames, pairs

    pair = tiny_pair(vocab=32)
    monkeypatch.setattr(costs, "_step_bytes", {})
    tr = speed_trace(pair.describe())
    assert "floor" not in frames.time_html(tr)  # the app has not opened this pair
    pairs.remember(pair)
    html = frames.time_html(tr)
    assert "memory bandwidth" in html and "verify call: floor" in html
    assert "step: floor" in html and "measured 10.0 ms" in html  # 20 ms over 2 draft calls


def test_a_live_frame_never_measures_the_bandwidth(monkeypatch):
    from specviz.ui import frames, pairs

    pair = tiny_pair(vocab=32)
    monkeypatch.setattr(costs, "_bandwidths", {})
    monkeypatch.setattr(costs, "_step_bytes", {})
    monkeypatch.setattr(costs, "measure_bandwidth", lambda d: pytest.fail("measured live"))
    pairs.remember(pair)
    assert "floor" not in frames.time_html(speed_trace(pair.describe()))
