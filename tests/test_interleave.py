"""Compared runs in turn (engine.interleave), each on its own clock, and the one speedup
every view states (metrics.paired_speedup, costs.SpeedStory): order, equal lengths, the
clock, greedy identity, the spread, the guard and the speed line."""

from __future__ import annotations

import time

import numpy as np
import pytest

from specviz import metrics
from specviz.config import Settings
from specviz.costs import SpeedStory, printed_below_one, speed_story
from specviz.engine import Run, compare, generate, interleave
from specviz.trace import Trace
from specviz.views import markup
from tests.tiny import tiny_pair

SAMPLED = Settings(max_new_tokens=40, gamma=3, temperature=1.0, seed=0)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab=8, eos=3)  # token 3 ends the text: runs end at different lengths


def test_the_run_with_fewer_tokens_goes_next_and_the_baseline_never_leads(pair) -> None:
    spec = Run(pair, "1 2", SAMPLED.with_(method="spec"))
    ar = Run(pair, "1 2", SAMPLED.with_(method="ar"))
    done: set[int] = set()
    order = []
    for i, upd in interleave([spec, ar]):
        before = upd.n_tokens - len(upd.new_ids)
        other = (spec, ar)[1 - i]
        if 1 - i not in done:
            # the run advanced held fewer tokens than the other (a tie goes to the first)
            mine, theirs = before, len(other.trace.token_ids)
            assert mine < theirs or (mine == theirs and i == 0)
        order.append(i)
        done |= {j for j, r in enumerate((spec, ar)) if r.trace.stop_reason != "running"}
        if spec.trace.stop_reason == "running":
            assert len(ar.trace.token_ids) <= len(spec.trace.token_ids)
    assert 0 in order and 1 in order and order.index(1) == 1  # they alternate from the start


@pytest.mark.parametrize("seed", range(6))
def test_the_baseline_makes_as_many_tokens_as_the_speculative_run(pair, seed: int) -> None:
    s = SAMPLED.with_(seed=seed)
    spec, ar = compare(pair, "1 2", s)
    assert len(ar.token_ids) == len(spec.token_ids)
    alone = generate(pair, "1 2", s.with_(method="ar"))  # the same baseline, not paced
    assert ar.token_ids[: len(alone.token_ids)] == alone.token_ids[: len(ar.token_ids)]
    if len(alone.token_ids) < len(spec.token_ids):  # it went on past its end-of-text
        assert ar.stop_reason == "matched"
    assert ar.stop_reason in ("eos", "matched", "max_new_tokens")


def test_paced_baselines_end_where_the_speculative_runs_do_across_seeds(pair) -> None:
    """Over seeds, some baselines end before their speculative run would have: pacing must
    have been exercised, not only the equal case."""
    went_past = 0
    for seed in range(12):
        s = SAMPLED.with_(seed=seed)
        spec, ar = compare(pair, "1 2", s)
        went_past += ar.stop_reason == "matched"
        assert len(ar.token_ids) == len(spec.token_ids)
    assert went_past >= 1


def test_greedy_interleaved_runs_are_identical(pair) -> None:
    for gamma in (1, 4):
        s = Settings(greedy=True, max_new_tokens=30, gamma=gamma)
        spec, ar = compare(pair, "5 6 7", s)
        assert spec.token_ids == ar.token_ids
        assert spec.token_ids == generate(pair, "5 6 7", s).token_ids


def test_a_run_is_not_charged_for_the_time_its_consumer_holds_it(pair) -> None:
    run = Run(pair, "1 2", Settings(greedy=True, max_new_tokens=8, gamma=2))
    slept, t0 = 0.0, time.perf_counter()
    for _ in run:
        time.sleep(0.05)
        slept += 0.05
    elapsed = time.perf_counter() - t0
    # the run's clock counts its own work only: at most the elapsed time less the sleeps
    assert run.trace.timeline[-1][0] <= elapsed - slept + 1e-3
    assert run.trace.stats.wall_s <= elapsed - slept + 1e-3


def test_closing_the_interleaving_closes_every_run(pair) -> None:
    spec = Run(pair, "1 2", SAMPLED)
    ar = Run(pair, "1 2", SAMPLED.with_(method="ar"))
    it = interleave([spec, ar])
    for _ in range(3):
        next(it)
    it.close()
    assert spec.trace.stop_reason == "stopped" and ar.trace.stop_reason == "stopped"


def trace(method: str, points: list[tuple[float, int]]) -> Trace:
    t = Trace(method=method, prompt="", prompt_ids=[], settings=Settings(), models={})
    t.timeline = [[s, float(n)] for s, n in points]
    t.token_ids = [0] * (points[-1][1] if points else 0)
    return t


def test_paired_speedup_against_an_independent_computation() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        n_rounds = int(rng.integers(1, 12))
        sizes = rng.integers(1, 6, n_rounds)
        spec_pts, t = [], 0.0
        for k in np.cumsum(sizes):
            t += float(rng.uniform(0.01, 0.2))
            spec_pts.append((t, int(k)))
        total = int(sizes.sum())
        ar_len = int(rng.integers(1, total + 3))
        ar_times = np.cumsum(rng.uniform(0.005, 0.1, ar_len))
        ar_pts = list(zip(ar_times, range(1, ar_len + 1), strict=True))
        spec, ar = trace("spec", spec_pts), trace("ar", [(float(a), b) for a, b in ar_pts])
        got = metrics.paired_speedup(ar, spec)
        # independently: the last speculative round the baseline covered, and both times there
        covered = [(s, k) for s, k in spec_pts if k <= ar_len]
        if not covered:
            assert got is None
            continue
        s_time, k = covered[-1]
        want = float(ar_pts[k - 1][0]) / s_time
        assert got is not None and got.value == pytest.approx(want)
        assert got.tokens == k and got.stretches == len(covered)
        assert got.low <= got.value <= got.high
        assert metrics.speedup(ar, spec) == pytest.approx(want)
        row = metrics.table1_row(ar, spec)
        assert row["ar_ms_per_token"] / row["spec_ms_per_token"] == pytest.approx(want)


def test_the_spread_is_wide_for_noisy_stretches_and_narrow_for_steady_ones() -> None:
    steady_spec = trace("spec", [(0.1 * i, 4 * i) for i in range(1, 21)])
    steady_ar = trace("ar", [(0.05 * i, i) for i in range(1, 81)])
    p = metrics.paired_speedup(steady_ar, steady_spec)
    assert p is not None and p.value == pytest.approx(2.0) and p.high - p.low < 1e-9
    noisy = [(sum(0.1 * (1 + 3 * (j % 2)) for j in range(i)), 4 * i) for i in range(1, 21)]
    p2 = metrics.paired_speedup(steady_ar, trace("spec", noisy))
    assert p2 is not None and p2.high - p2.low > 0.1
    assert metrics.paired_speedup(steady_ar, trace("spec", noisy)) == p2  # its own generator


def story(measured: float | None, predicted: float | None) -> SpeedStory:
    m = metrics.Speedup(measured, measured, measured, 10, 3, 1.0, 1.0) if measured else None
    return SpeedStory(10, 3, m, 0.3, 1.2, "alpha", 0.8, 4, predicted, None)


@pytest.mark.parametrize("measured", [None, 0.5, 0.994, 0.996, 1.4])
@pytest.mark.parametrize("predicted", [None, 0.7, 0.996, 1.3])
def test_the_guard_speaks_exactly_when_a_speedup_prints_below_one(measured, predicted) -> None:
    said = story(measured, predicted).guard()
    below = any(v is not None and float(f"{v:.2f}") < 1 for v in (measured, predicted))
    assert (said is not None) == below
    if said:
        if measured is not None and printed_below_one(measured):
            assert f"measured {measured:.2f}x" in said
        if predicted is not None:
            assert f"predicted {predicted:.2f}x" in said


def test_the_story_of_a_compared_run_matches_its_traces(pair) -> None:
    spec, ar = compare(pair, "1 2", SAMPLED)
    st = speed_story(spec, ar)
    assert st.tokens == len(spec.token_ids) and st.calls == len(spec.rounds)
    assert st.calls_saved == len(ar.token_ids) - len(spec.rounds)
    assert st.measured is not None and st.measured.value == metrics.speedup(ar, spec)
    assert st.c == metrics.cost_ratio(spec, ar)
    html = markup.speedline_html(st)
    assert (
        f"{st.tokens_per_call:.2f}" in html and f"{st.calls} calls: {st.calls_saved} saved" in html
    )
    assert f"{st.measured.value:.2f}x" in html
    assert ("sv-speedline-warn" in html) == st.below_one()
    alone = speed_story(spec, None)
    assert alone.measured is None and alone.predicted is None
    assert "speedup" not in markup.speedline_html(alone)
