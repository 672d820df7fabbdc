"""Views across runs built from traces alone: the experiment log, the race replay, overlap
shading, round narration and their figures. Every token text is escaped."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from specviz.analysis.runlog import LOG_COLUMNS, ExperimentLog, changed_settings, log_csv, log_row
from specviz.config import Settings
from specviz.engine import generate
from specviz.trace import Added, Drafted, Round, Stats, Trace
from specviz.views import across_runs, markup, narration, race_replay
from tests.test_render import NASTY, drafted, sample_trace
from tests.tiny import tiny_pair


@pytest.fixture(scope="module")
def compared(one_thread):
    pair = tiny_pair(vocab=16, target_seed=0, draft_seed=2, sharpness=2.0)
    s = Settings(gamma=3, temperature=1.0, max_new_tokens=12, seed=1)
    return generate(pair, "1 2", s), generate(pair, "1 2", s.with_(method="ar"))


# --- experiment log ------------------------------------------------------------------------


def test_log_row_of_a_compared_run(compared):
    spec, ar = compared
    row = log_row(1, spec, ar)
    assert tuple(row) == LOG_COLUMNS
    assert row["changed"] == "gamma=3, temperature=1.0, max_new_tokens=12, seed=1"
    assert row["method"] == "spec + ar" and row["new_tokens"] == 12
    assert row["acceptance"] == spec.stats.acceptance_rate and row["alpha"] == spec.stats.alpha
    # the baseline's seconds over the speculative run's, for the same tokens
    assert row["speedup"] == pytest.approx(ar.timeline[-1][0] / spec.timeline[-1][0])
    assert row["c"] > 0 and row["tokens_per_call"] == spec.stats.tokens_per_call


def test_log_rows_leave_out_what_a_run_cannot_give(compared):
    spec, ar = compared
    alone = log_row(2, None, ar)
    assert alone["method"] == "ar" and alone["acceptance"] is None and alone["speedup"] is None
    spec.settings = spec.settings.with_(trace_level="minimal")
    try:
        assert log_row(3, spec)["alpha"] is None
    finally:
        spec.settings = spec.settings.with_(trace_level="full")
    assert changed_settings(Settings()) == {}
    with pytest.raises(ValueError, match="needs a speculative or an autoregressive trace"):
        log_row(1, None)
    with pytest.raises(ValueError, match="spec must be a speculative trace"):
        log_row(1, ar)


def test_log_keeps_traces_for_reloading_and_bounds_them(compared):
    spec, ar = compared
    log = ExperimentLog(max_runs=2)
    for _ in range(3):
        log.add(spec, ar)
    assert [r["run"] for r in log.rows] == [2, 3]
    assert log.traces(3) == (spec, ar)
    with pytest.raises(ValueError, match="run 1 is not in the log"):
        log.traces(1)
    assert list(log.frame().columns) == list(LOG_COLUMNS) and len(log.frame()) == 2
    lines = log.csv().splitlines()
    assert lines[0] == ",".join(LOG_COLUMNS) and len(lines) == 3
    assert log_csv([]).strip() == ",".join(LOG_COLUMNS)


def test_runs_figure_plots_speedup_and_acceptance_per_run(compared):
    spec, ar = compared
    rows = [log_row(1, spec, ar), log_row(2, spec) | {"changed": NASTY}]
    fig = across_runs.runs_figure(rows)
    assert [list(t.y) for t in fig.data] == [
        [rows[0]["speedup"], None],
        [rows[0]["acceptance"], rows[1]["acceptance"]],
    ]
    assert "<" not in fig.data[0].text[1]
    assert across_runs.runs_figure([]).layout.annotations


# --- race replay ---------------------------------------------------------------------------


def race_traces() -> tuple[Trace, Trace]:
    spec = Trace("spec", "p", [1], {}, {}, token_ids=[1, 2, 3, 4])
    spec.token_texts = ["a", NASTY, "c", "d"]
    spec.timeline = [[0.1, 2.0], [0.2, 4.0]]
    ar = Trace("ar", "p", [1], {}, {}, token_ids=[1, 2, 3, 4])
    ar.token_texts = ["a", NASTY, "c", "d"]
    ar.timeline = [[0.1, 1.0], [0.2, 2.0], [0.3, 3.0], [0.4, 4.0]]
    return spec, ar


def test_replay_shows_both_texts_escaped_and_says_it_is_a_replay():
    spec, ar = race_traces()
    html = race_replay.replay_animation_html(spec, ar, 1.0)
    assert re.findall(r'data-method="(\w+)" data-shown="(\d+)"', html) == [
        ("spec", "4"),
        ("ar", "4"),
    ]
    assert "Replay of measured timings at 1x" in html
    assert "<script" not in html and "&lt;script&gt;" in html and "${" not in html
    assert "measured 0.20 s" in html and "measured 0.40 s" in html


def test_replay_animation_delays_each_token_by_its_time():
    spec, ar = race_traces()
    html = race_replay.replay_animation_html(spec, ar, speed=0.25)
    delays = re.findall(r"animation-delay: ([\d.]+)s", html)
    assert delays == ["0.400", "0.400", "0.800", "0.800", "0.400", "0.800", "1.200", "1.600"]
    assert "<script" not in html and "<style" not in html
    assert race_replay.replay_animation_html(spec, ar, 0.25, nonce=1) != html  # restarts it
    css = (Path(__file__).parents[1] / "assets" / "specviz.css").read_text()
    assert "@keyframes sv-race-in" in css and ".sv-race-tok" in css


@pytest.mark.parametrize("speed", [0, -1, math.inf, math.nan, 101, True])
def test_replay_refuses_bad_speeds(speed):
    spec, ar = race_traces()
    with pytest.raises(ValueError, match="replay speed must be in"):
        race_replay.replay_animation_html(spec, ar, speed)


def test_replay_refuses_swapped_or_textless_traces():
    spec, ar = race_traces()
    with pytest.raises(ValueError, match="needs a speculative and an autoregressive"):
        race_replay.replay_animation_html(ar, spec)
    ar.token_texts = []
    with pytest.raises(ValueError, match="no text"):
        race_replay.replay_animation_html(spec, ar)


# --- overlap shading -----------------------------------------------------------------------


def test_shading_darkens_drafted_tokens_as_overlap_falls():
    t = sample_trace()
    t.rounds[0].drafted[0].overlap, t.rounds[0].drafted[1].overlap = 0.9, 0.2
    html = markup.trace_tokens_html(t, shade_overlap=True)
    shades = re.findall(
        r'data-overlap="([\d.]+)" style="background: color-mix\(in srgb, \S+ (\d+)%', html
    )
    assert shades == [("0.900", "14"), ("0.200", "58"), ("0.500", "39")]
    assert html.count("style=") == 3  # the resampled and the bonus token keep their colours
    assert "<script" not in html
    assert "data-overlap" not in markup.trace_tokens_html(t)  # off by default


def test_shading_refuses_traces_without_overlaps():
    t = sample_trace()
    t.settings = t.settings.with_(trace_level="minimal")
    assert not markup.has_overlaps(t)
    with pytest.raises(ValueError, match="no overlaps"):
        markup.trace_tokens_html(t, shade_overlap=True)
    assert "0.00" in markup.overlap_legend_html()


# --- round narration -----------------------------------------------------------------------


def test_narration_tells_the_round_from_its_numbers():
    lines = narration.narrate_round(sample_trace().rounds[0])
    assert lines[0].startswith(
        "The draft proposed 3 tokens, in 3.0 ms (its first call also read the prompt): 'Hi', "
    )
    assert lines[1] == (
        "One target call scored 4 positions (the 3 drafts and the position after them) in "
        "5.0 ms (it also read the prompt)."
    )
    later = narration.narrate_round(sample_trace().rounds[1])
    assert "read the prompt" not in later[0] and "read the prompt" not in later[1]
    assert lines[2] == (
        "Draft 1 'Hi': p = 0.500, q = 0.400, min(1, p/q) = 1.00; u = 0.30 < 1.00, "
        "so it was accepted."
    )
    assert lines[3].endswith("min(1, p/q) = 0.20; u = 0.90 ≥ 0.20, so it was rejected.")
    assert lines[4] == "Draft 3 was discarded without a test ('x'): they came after the rejection."
    assert lines[5].startswith("Draft 2 was rejected, so the same target call drew ' there\\n'")
    assert "residual" in lines[5] and "probability 0.60 (p = 0.30)" in lines[5]
    assert lines[6] == "The round emitted 2 tokens for one target call."


def test_narration_of_bonus_greedy_and_eos_rounds():
    bonus = narration.narrate_round(sample_trace().rounds[1])
    assert bonus[-2] == (
        "The draft was accepted, so the same target call drew the bonus token '!' "
        "from p at position 2 (p = 0.70)."
    )
    greedy = Round(0, 0, 2, [drafted("a", "accepted", 1.0, 1.0, None)], None, 1.0, 2.0, 0.1)
    lines = narration.narrate_round(greedy)
    assert "(gamma was 2; it proposed fewer)" in lines[0]
    assert "greedy, no u drawn: the draft's argmax equals the target's, accepted." in lines[2]
    assert lines[3].startswith("The last accepted draft was the end of the sequence")
    empty = Round(0, 0, 4, [], Added(5, "z", "bonus", 0.4, 0.4, []), 0.1, 2.0, 0.1)
    assert narration.narrate_round(empty)[1].startswith("One target call scored 1 position ")


def test_narration_of_an_exact_match_round():
    from tests.test_render import match_trace

    rnd = match_trace().rounds[0]
    lines = narration.narrate_round(rnd)
    assert lines[2] == (
        "Draft 1 'Hi': p = 0.500, q = 0.400; exact match: the target sampled 'Hi'; "
        "the draft proposed 'Hi': accepted."
    )
    assert lines[3].endswith(f"the target sampled {NASTY!r}; the draft proposed 'blue': rejected.")
    assert lines[5].startswith("Draft 2 did not match, so the round kept the target's own sample")
    assert "residual" not in " ".join(lines)
    html = narration.narration_html(rnd)
    assert "<script" not in html and "&lt;script&gt;" in html and "${" not in html


def test_narration_html_is_numbered_and_escaped():
    html = narration.narration_html(sample_trace().rounds[0])
    assert html.count("<li>") == 7 and "<ol>" in html
    assert "<script" not in html and "&lt;script&gt;" in html and "${" not in html
    assert narration.narrate_round(sample_trace().rounds[1])[0].startswith("The draft proposed 1")


# --- figures -------------------------------------------------------------------------------


def test_sweep_figure_puts_points_over_the_formula():
    rows = [
        {"gamma": g, "temperature": 0.7, "alpha": 0.6, "c": 0.1, "tokens_per_call": 2.0}
        | {"measured_speedup": 1.2 + g / 10, "expected_speedup": 1.5}
        for g in (1, 2, 4)
    ]
    fig = across_runs.sweep_figure(rows)
    curve, points = fig.data
    assert list(curve.x) == [1, 2, 3, 4] and list(points.x) == [1, 2, 4]
    from specviz.metrics import expected_speedup

    assert curve.y[3] == pytest.approx(expected_speedup(0.6, 4, 0.1))
    assert across_runs.sweep_figure([]).layout.annotations


def test_reliability_figure_has_the_diagonal_and_error_bars():
    b = {"lo": 0.2, "hi": 0.3, "n": 50, "predicted": 0.25, "observed": 0.3}
    b |= {"ci_low": 0.2, "ci_high": 0.4, "within": True, "judged": True}
    fig = across_runs.reliability_figure({"bins": [b], "residual_bins": [], "traces": 3})
    diag, drafts = fig.data
    assert list(diag.x) == [0, 1] and list(diag.y) == [0, 1]
    assert drafts.error_y.array[0] == pytest.approx(0.1)
    assert drafts.error_y.arrayminus[0] == pytest.approx(0.1)
    assert across_runs.reliability_figure({"bins": []}).layout.annotations


def test_stats_are_untouched_by_views():
    # the views read traces; none of them writes to one
    t = sample_trace()
    t.stats = Stats(new_tokens=4)
    before = t.to_json()
    markup.trace_tokens_html(t, shade_overlap=True)
    narration.narration_html(t.rounds[0])
    assert t.to_json() == before


def test_drafted_overlap_is_what_shading_reads():
    d = Drafted(1, "a", 0.5, 0.5, 1.0, 0.1, "accepted", 0.25, [])
    span = markup.token_span(d.text, d.status, 0, 0, d.overlap)
    assert 'data-overlap="0.250"' in span and "overlap sum_x min(p, q) = 0.25" in span
