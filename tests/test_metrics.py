"""Leviathan's formulas and the trace metrics, against answers worked out by hand.

The traces here are written out literally (no engine, no model), so every expected value
below is arithmetic on the numbers in ``synthetic_pair``, not the formula under test.
"""

from __future__ import annotations

import pytest

from specviz import metrics
from specviz.metrics import summarize
from specviz.trace import Added, Drafted, Round, Stats, Trace


def drafted(status: str, overlap: float | None) -> Drafted:
    u = None if status == "discarded" else 0.5
    return Drafted(1, "a", 0.5, 0.5, 1.0, u, status, overlap, [])


def added(status: str) -> Added:
    return Added(2, "b", status, 0.5, 0.5, [])


def rnd(i: int, start: int, drafts: str, add: str | None, draft_ms: float, t_s: float) -> Round:
    """A round from "status:overlap ..." (a, r, d: accepted, rejected, discarded)."""
    names = {"a": "accepted", "r": "rejected", "d": "discarded"}
    ds = [drafted(names[x[0]], float(x[2:])) for x in drafts.split()]
    return Round(i, start, 3, ds, added(add) if add else None, draft_ms, 5.0, t_s)


def synthetic_pair(alpha: float | None = None, c: float = 0.02) -> tuple[Trace, Trace]:
    """An autoregressive trace at 10 ms per step and a speculative one of four rounds.

    Round  drafted (status overlap)             added      tokens  draft ms
    0      acc .9, acc .8, rej .4               resampled  3       3.0 (reads the prompt)
    1      acc .7, acc .6, acc .5               bonus      4       3 * 10c
    2      rej .3, discarded, discarded         resampled  1       3 * 10c
    3      acc .5 (EOS)                         none       1       1 * 10c
    Verified: 8, accepted: 6, alpha = (.9+.8+.4+.7+.6+.5+.3+.5) / 8 = 0.5875; 9 tokens.
    """
    per_draft = 10.0 * c  # ms per draft step; c = per_draft / 10 ms per target step
    rounds = [
        rnd(0, 0, "a:.9 a:.8 r:.4", "resampled", 3.0, 0.008),
        rnd(1, 3, "a:.7 a:.6 a:.5", "bonus", 3 * per_draft, 0.016),
        rnd(2, 7, "r:.3 d:.2 d:.1", "resampled", 3 * per_draft, 0.024),
        rnd(3, 8, "a:.5", None, per_draft, 0.036),
    ]
    settings = {"gamma": 3, "greedy": False, "temperature": 1.0}
    spec = Trace("spec", "x", [1], settings, {}, rounds=rounds, token_ids=[1] * 9)
    spec.timeline = [[0.008, 3.0], [0.016, 7.0], [0.024, 8.0], [0.036, 9.0]]
    spec.stats = summarize(spec, wall_s=0.036)
    if alpha is not None:
        spec.stats.alpha = alpha
    ar = Trace("ar", "x", [1], {**settings}, {}, token_ids=[1] * 9)
    ar.timeline = [[0.01 * (i + 1), float(i + 1)] for i in range(9)]
    ar.stats = Stats(new_tokens=9, target_calls=9, wall_s=0.09, ms_per_token=10.0)
    return ar, spec


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


def test_trace_metrics_on_a_trace_worked_out_by_hand():
    _, t = synthetic_pair()
    assert metrics.acceptance_rate(t) == 6 / 8
    assert metrics.alpha(t) == pytest.approx(4.7 / 8)
    assert metrics.mean_accepted(t) == 6 / 4
    assert metrics.mean_accepted(t, with_added=True) == (6 + 3) / 4
    assert metrics.tokens_per_call(t) == 9 / 4
    # position 1: acc, acc, rej, acc; position 2: acc, acc; position 3: rej, acc
    assert metrics.acceptance_by_position(t) == [0.75, 1.0, 0.5]
    assert metrics.accepted_histogram(t) == {0: 1, 1: 1, 2: 1, 3: 1}


def test_summarize_on_a_trace_worked_out_by_hand():
    _, t = synthetic_pair()
    s = t.stats
    assert (s.new_tokens, s.rounds, s.target_calls) == (9, 4, 4)
    assert (s.drafted, s.verified, s.accepted) == (10, 8, 6)
    assert s.acceptance_rate == 0.75 and s.alpha == pytest.approx(0.5875)
    assert s.tokens_per_call == 2.25 and s.first_token_ms == pytest.approx(8.0)
    assert s.draft_ms == pytest.approx(3.0 + 7 * 0.2) and s.verify_ms == 20.0
    assert s.ms_per_token == pytest.approx(4.0)


def test_alpha_is_none_when_no_overlap_was_measured():
    _, t = synthetic_pair()
    t.rounds[1].drafted[0].overlap = None  # as a minimal trace records it
    assert metrics.alpha(t) is None and summarize(t, 1.0).alpha is None
    t.rounds = []
    assert metrics.alpha(t) is None and metrics.alpha_text(None) == "not measured"
    assert metrics.alpha_text(0.5875) == "0.588"


def test_rounds_frame_rows_and_positions():
    _, t = synthetic_pair()
    frame = metrics.rounds_frame(t)
    assert len(frame) == 10 + 3  # every drafted token, and the three added ones
    added = frame[frame["kind"] == "added"]
    assert list(added["status"]) == ["resampled", "bonus", "resampled"]
    assert list(added["pos"]) == [2, 6, 7]  # start + accepted drafts
    accepted = frame[frame["status"] == "accepted"]
    assert list(accepted["pos"]) == [0, 1, 3, 4, 5, 8]
    assert frame[frame["status"] == "discarded"]["pos"].isna().all()


def test_speedup_and_cost_ratio_worked_out_by_hand():
    ar, spec = synthetic_pair(c=0.02)
    assert metrics.speedup(ar, spec) == 10.0 / 4.0
    assert metrics.table1_row(ar, spec) == {
        "ar_ms_per_token": 10.0,
        "spec_ms_per_token": 4.0,
        "speedup": 2.5,
    }
    # after the first round: 7 drafts in 1.4 ms = 0.2 ms each; AR: 10 ms per later step
    assert metrics.cost_ratio(spec, ar) == pytest.approx(0.02)


def test_one_best_gamma_for_the_command_line_and_the_app(capsys):
    import re

    from specviz.cli.generate import print_comparison
    from specviz.config import Limits
    from specviz.views import theory_figures

    # alpha 0.9, c 0.01: the expected speedup peaks at gamma 24, inside the settings' range
    alpha, c = 0.9, 0.01
    ar, spec = synthetic_pair(alpha=alpha, c=c)
    print_comparison(ar, spec)
    cli = re.search(r"best gamma (\d+)", capsys.readouterr().out)
    app = re.search(
        r"best gamma = (\d+)", theory_figures.theory_figure(alpha, c, 4, None).layout.title.text
    )
    assert (int(cli[1]), int(app[1])) == (24, 24)
    assert metrics.best_gamma(alpha, c) == 24
    assert list(metrics.GAMMAS) == list(range(1, Limits().max_gamma + 1))


def test_exact_match_metrics_on_a_trace_worked_out_by_hand():
    _, t = synthetic_pair()
    # sum p q per verified position: the overlaps halved (4.7 / 2 in all)
    for r in t.rounds:
        for d in r.drafted:
            d.match_prob = d.overlap / 2
    assert metrics.match_alpha(t) == pytest.approx(4.7 / 16)
    assert summarize(t, 1.0).match_alpha == pytest.approx(4.7 / 16)
    t.rounds[0].drafted[0].match_prob = None  # not measured (or an older trace)
    assert metrics.match_alpha(t) is None


def test_acceptance_rows_put_each_verification_beside_its_expectation():
    _, t = synthetic_pair()
    t.stats.match_alpha = 0.25
    rows = metrics.acceptance_rows(t)  # the settings have no verification: the rule
    assert [k for k, _ in rows] == ["verification", "acceptance rate", "alpha", "sum p q"]
    assert rows[0][1].startswith("rejection") and rows[1][1].startswith("0.750")
    assert rows[2][1].startswith("0.588  (expected acceptance under the rejection rule")
    assert metrics.expected_acceptance(t) == ("alpha", pytest.approx(0.5875))
    t.settings = t.settings.with_(verification="exact-match")
    rows = metrics.acceptance_rows(t)
    assert [k for k, _ in rows] == ["verification", "acceptance rate", "sum p q", "alpha"]
    assert rows[2][1].startswith("0.250  (expected acceptance under exact match")
    assert metrics.expected_acceptance(t) == ("sum p q", 0.25)
