"""Where a round's time goes (specviz.views.timing), on a hand-built trace with known timings."""

from __future__ import annotations

import json

import pytest

from specviz.trace import Round, Stats, Trace
from specviz.views import timing


def timed_trace(wall_s: float = 0.0) -> Trace:
    """Three rounds: (draft ms, verify ms, t_s) = (10, 20, 0.040), (5, 15, 0.070),
    (8, 30, 0.100). Their wall times are 40, 30 and 30 ms, so the rests are 10, 10 and
    -8, clamped to 0."""
    timings = [(10.0, 20.0, 0.040), (5.0, 15.0, 0.070), (8.0, 30.0, 0.100)]
    rounds = [
        Round(i, i, 2, [], None, draft_ms=d, verify_ms=v, t_s=t)
        for i, (d, v, t) in enumerate(timings)
    ]
    return Trace("spec", "x", [1], {}, {}, rounds=rounds, stats=Stats(wall_s=wall_s))


def test_each_round_splits_into_draft_verify_and_the_rest() -> None:
    times = timing.round_times(timed_trace())
    assert [t.number for t in times] == [1, 2, 3]  # numbered from 1, as on the page
    assert [t.draft_ms for t in times] == [10.0, 5.0, 8.0]
    assert [t.verify_ms for t in times] == [20.0, 15.0, 30.0]
    assert [t.rest_ms for t in times] == pytest.approx([10.0, 10.0, 0.0])  # clamped at 0


def test_the_run_totals_share_its_wall_time() -> None:
    got = timing.totals(timed_trace(wall_s=0.125))
    assert got["draft"] == pytest.approx((23.0, 23 / 125))
    assert got["verify"] == pytest.approx((65.0, 65 / 125))
    assert got["rest"] == pytest.approx((37.0, 37 / 125))
    # while the run goes on (no wall_s yet) the wall time is the last round's t_s
    assert timing.totals(timed_trace())["rest"] == pytest.approx((12.0, 0.12))
    rows = dict(timing.totals_rows(timed_trace(wall_s=0.125)))
    assert rows["wall time"] == "125 ms" and rows[timing.NAMES["verify"]] == "65 ms · 52%"


def test_the_figure_stacks_the_bars_per_round() -> None:
    spec = timing.breakdown_spec(timed_trace(wall_s=0.125))
    json.dumps(spec)  # plain JSON: cheap to send every round of a live run
    assert spec["layout"]["barmode"] == "stack"
    bars = {d["name"]: d for d in spec["data"]}
    assert list(bars) == [timing.NAMES[p] for p in timing.PARTS]
    assert bars[timing.NAMES["draft"]]["y"] == [10.0, 5.0, 8.0]
    assert bars[timing.NAMES["rest"]]["y"] == pytest.approx([10.0, 10.0, 0.0])
    assert all(d["x"] == [1, 2, 3] for d in spec["data"])
    title = spec["layout"]["title"]["text"]
    assert "draft 18% · verify 52% · rest 30% of 0.12 s" in title
    fig = timing.breakdown_figure(timed_trace(wall_s=0.125))
    assert [list(t.y) for t in fig.data][1] == [20.0, 15.0, 30.0]


def test_no_rounds_no_bars() -> None:
    empty = Trace("ar", "x", [1], {}, {})
    assert timing.round_times(empty) == []
    assert timing.totals(empty)["rest"] == (0.0, 0.0)
    assert "no speculative rounds" in timing.breakdown_spec(empty)["layout"]["title"]["text"]
