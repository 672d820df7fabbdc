"""Leviathan's formulas and the trace metrics."""

from __future__ import annotations

import pytest

from specviz import metrics
from specviz.config import Settings
from specviz.engine import generate
from tests.tiny import tiny_pair


def test_expected_tokens_per_round():
    assert metrics.expected_tokens_per_round(0.0, 4) == 1.0
    assert metrics.expected_tokens_per_round(1.0, 4) == 5.0
    assert metrics.expected_tokens_per_round(0.5, 2) == pytest.approx(1.75)


def test_expected_speedup_and_best_gamma():
    assert metrics.expected_speedup(0.8, 1, 0.0) == pytest.approx(1.8)
    # alpha = 0.8, c = 0.05: (1 - 0.8^9) / (0.2 * (8 * 0.05 + 1)) = 3.0921 at gamma = 8
    assert metrics.best_gamma(0.8, 0.05) == 8
    assert metrics.expected_speedup(0.8, 8, 0.05) == pytest.approx(3.0921, abs=1e-4)
    assert metrics.best_gamma(0.2, 0.5) == 1


def test_trace_metrics_agree_with_stats():
    pair = tiny_pair(vocab=8, sharpness=1.0)
    t = generate(pair, "1 2", Settings(gamma=3, max_new_tokens=40))
    s = t.stats
    assert metrics.acceptance_rate(t) == pytest.approx(s.accepted / s.verified)
    assert metrics.tokens_per_call(t) == pytest.approx(s.new_tokens / s.rounds)
    assert metrics.mean_accepted(t, with_added=True) == pytest.approx(s.new_tokens / s.rounds)
    assert metrics.mean_accepted(t) == pytest.approx(s.accepted / s.rounds)
    assert sum(metrics.accepted_histogram(t).values()) == s.rounds
    by_pos = metrics.acceptance_by_position(t)
    assert 1 <= len(by_pos) <= 3 and all(0 <= x <= 1 for x in by_pos)
    frame = metrics.rounds_frame(t)
    assert len(frame) == s.drafted + s.rounds - (t.rounds[-1].added is None)
    assert set(frame["status"]) <= {"accepted", "rejected", "discarded", "resampled", "bonus"}


def test_speedup_is_the_ms_per_token_ratio():
    pair = tiny_pair(vocab=8, sharpness=1.0)
    ar = generate(pair, "1 2", Settings(method="ar", max_new_tokens=10))
    spec = generate(pair, "1 2", Settings(max_new_tokens=10))
    row = metrics.table1_row(ar, spec)
    assert row["speedup"] == pytest.approx(row["ar_ms_per_token"] / row["spec_ms_per_token"])
    assert metrics.cost_ratio(spec, ar) > 0
