"""The distribution check: its statistics, its samples (full-depth drafts, runs stopped at
the length, shared caches, the work they cost) and its verdict on the real and the broken
rules.

The tiny pair (target seed 0, draft seed 2, vocabulary 8) has an overlap of about 0.4 at the
first position, so each wrong rule moves the first token's distribution by a total
variation of 0.24 or more: with N = 200 per method a real rule passes and a broken one fails
by many orders of magnitude, and every run is seeded.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from specviz.analysis import binning, chisquare, distribution_check
from specviz.config import Limits, Settings
from specviz.views import check_figure
from tests.broken import break_exact_match
from tests.tiny import tiny_pair

N = 200
PROMPT = "1 2"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab=8, target_seed=0, draft_seed=2)


@pytest.fixture(scope="module")
def exact_run(pair):
    progress: list[distribution_check.Progress] = []
    result = distribution_check.run_check(
        pair, PROMPT, Settings(gamma=2), n=N, length=2, progress_cb=progress.append
    )
    return result, progress


@pytest.fixture(scope="module")
def exact_result(exact_run):
    return exact_run[0]


# --- pure statistics -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "dof", "expected"),
    [(3.841458820694124, 1, 0.05), (5.991464547107979, 2, 0.05), (23.209251158954356, 10, 0.01)],
)
def test_chi2_sf_matches_tabulated_quantiles(x, dof, expected):
    assert chisquare.chi2_sf(x, dof) == pytest.approx(expected, rel=1e-9)


def test_chi2_sf_edges():
    assert chisquare.chi2_sf(0.0, 3) == 1.0
    assert chisquare.chi2_sf(math.inf, 3) == 0.0
    assert chisquare.chi2_sf(0.0, 0) == 1.0
    assert chisquare.chi2_sf(1.0, 0) == 0.0


def test_goodness_of_fit_perfect_and_impossible():
    perfect = chisquare.goodness_of_fit([50, 30, 20], [0.5, 0.3, 0.2])
    assert perfect.statistic == 0.0 and perfect.dof == 2 and perfect.p_value == 1.0
    impossible = chisquare.goodness_of_fit([50, 30, 1], [0.5, 0.5, 0.0])
    assert impossible.p_value == 0.0
    # an unobserved zero-probability bin is simply dropped
    assert chisquare.goodness_of_fit([50, 50, 0], [0.5, 0.5, 0.0]).dof == 1


def test_goodness_of_fit_statistic_by_hand():
    t = chisquare.goodness_of_fit([60, 40], [0.5, 0.5])
    assert t.statistic == pytest.approx((10**2 / 50) * 2)
    assert t.dof == 1


def test_the_pooled_statistic_by_hand():
    # n = 100: a (50 expected), b (40) get cells; c (6) too; d, e (2 each) pool into 4 < 5,
    # which joins the smallest cell, c: expected 10
    exact = {"a": 0.5, "b": 0.4, "c": 0.06, "d": 0.02, "e": 0.02}
    counts = {"a": 45, "b": 43, "c": 9, "d": 3}
    stat, dof = chisquare.pooled_statistic(counts, exact, 100)
    assert dof == 2
    assert stat == pytest.approx(5**2 / 50 + 3**2 / 40 + (12 - 10) ** 2 / 10)
    _, p = chisquare.pooled_chi_square(counts, exact, 100)
    assert p == pytest.approx(chisquare.chi2_sf(stat, 2))
    assert chisquare.pooled_chi_square({**counts, "z": 1}, exact, 101) == (math.inf, 0.0)


def test_critical_values_match_the_tables():
    assert chisquare.critical_value(1, 0.05) == pytest.approx(3.8415, abs=1e-3)
    assert chisquare.critical_value(10, 0.01) == pytest.approx(23.209, abs=1e-2)


def test_two_sample_identical_and_disjoint():
    assert chisquare.two_sample([10, 20, 30], [10, 20, 30]).p_value == pytest.approx(1.0)
    assert chisquare.two_sample([100, 0], [0, 100]).p_value < 1e-12
    assert chisquare.two_sample([0, 0], [1, 2]).p_value == 1.0


def test_total_variation_and_frequencies():
    assert chisquare.total_variation([0.5, 0.5], [0.5, 0.5]) == 0.0
    assert chisquare.total_variation([1.0, 0.0], [0.0, 1.0]) == 1.0
    assert chisquare.frequencies([1, 3]) == [0.25, 0.75]
    assert chisquare.frequencies([0, 0]) == [0.0, 0.0]


def test_bins_and_counts():
    exact = {(1,): 0.6, (2,): 0.3, (3,): 0.09, (4,): 0.01}
    bins = binning.choose_bins(exact, n=100, min_expected=5)
    assert bins == [(1,), (2,), (3,)]
    assert binning.bin_counts([(1,), (1,), (4,), (2,)], bins) == [2, 1, 0, 1]


def test_small_other_bin_is_merged_but_zero_stays():
    counts, probs = binning.merge_small_other([50, 40, 8, 2], [0.5, 0.4, 0.08, 0.02], n=100)
    assert counts == [50, 40, 10] and probs == pytest.approx([0.5, 0.4, 0.1])
    same = binning.merge_small_other([50, 50, 1], [0.5, 0.5, 0.0], n=100)
    assert same == ([50, 50, 1], [0.5, 0.5, 0.0])


class FixedRows:
    """Target rows that are the same after every prefix: p = [0.6, 0.4 - e, e]."""

    def __init__(self, e: float) -> None:
        self.p = torch.tensor([0.6, 0.4 - e, e], dtype=torch.float32)

    def row(self, prefix: tuple[int, ...]) -> torch.Tensor:
        return self.p


def test_a_tiny_other_bin_keeps_its_exact_mass(pair):
    # Two tokens, n = 1000: the four outcomes of 0 and 1 get bins; the other five (those
    # with a 2) have a true mass of about 8e-7. One correct sample landing there must not
    # be called impossible.
    probs = FixedRows(4e-7)
    e = float(probs.p[2])
    p = probs.p.double().tolist()
    rare = sum(p[a] * p[b] for a in range(3) for b in range(3) if 2 in (a, b))
    ar = [(0, 0)] * 360 + [(0, 1)] * 240 + [(1, 0)] * 240 + [(1, 1)] * 160  # n p, rounded
    spec = ar[:-1] + [(0, 2)]
    views = distribution_check.compare(pair, probs, spec, ar, length=2)
    other = views[1]
    assert other.labels[-1] == binning.OTHER and len(other.labels) == 5
    assert other.p[-1] == pytest.approx(rare, rel=1e-3) and 0 < other.p[-1] < 1e-6
    assert other.spec_test.p_value > 0.0 and math.isfinite(other.spec_test.statistic)
    assert views[0].p[-1] == pytest.approx(e, rel=1e-6)  # first token: complete anyway


def test_continuations_enumerate_the_whole_tree(pair):
    probs = distribution_check.TargetProbs(pair, [1, 2], Settings().target_warp())
    every, none = distribution_check.continuations(probs, 2, frozenset(), min_prob=0.0)
    assert len(every) == 8 * 8 and none == 0.0
    assert sum(every.values()) == pytest.approx(1.0, abs=1e-5)
    frequent, rest = distribution_check.continuations(probs, 2, frozenset(), min_prob=0.05)
    assert frequent == {o: p for o, p in every.items() if p >= 0.05}
    assert rest == pytest.approx(sum(p for p in every.values() if p < 0.05), abs=1e-6)


def test_eos_ends_a_continuation_early():
    pair = tiny_pair(vocab=8, eos=3, target_seed=0, draft_seed=2)
    probs = distribution_check.TargetProbs(pair, [1, 2], Settings(temperature=3.0).target_warp())
    every, _ = distribution_check.continuations(probs, 2, pair.eos_ids, min_prob=0.0)
    assert (3,) in every
    assert sum(every.values()) == pytest.approx(1.0, abs=1e-5)


# --- the check on tiny models ----------------------------------------------------------------


def test_exact_rule_passes(exact_result):
    r = exact_result
    assert r.passed, r.summary()
    assert [v.name for v in r.comparisons] == ["first token", "continuation of 2 tokens"]
    for v in r.comparisons:
        assert sum(v.spec) == N and sum(v.ar) == N
        assert sum(v.p) == pytest.approx(1.0, abs=1e-5)
        assert v.labels[-1] == binning.OTHER
        assert v.spec_test.p_value > 0.05 and v.ar_test.p_value > 0.05
    assert 0.1 < r.spec_acceptance < 0.9  # the rule really was exercised
    assert r.predicted_tv == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(
    ("rule", "length"),
    # length 1 drafts gamma tokens too: a round is never cut by the check's budget
    [("resample-from-p", 1), ("accept-without-draw", 2)],
)
def test_each_broken_rule_fails(pair, rule, length):
    r = distribution_check.run_check(pair, PROMPT, Settings(gamma=2), n=N, length=length, rule=rule)
    assert not r.passed, r.summary()
    assert len(r.comparisons) == length
    first = r.comparisons[0]
    assert first.spec_test.p_value < 1e-6
    assert first.ar_test.p_value > 0.05  # the autoregressive control is unaffected
    assert first.tv_spec > 0.1 and r.predicted_tv > 0.2


# Exact match differs from its broken twin (tests/broken.py) only where q is spread out and
# unlike p: a flatter pair at temperature 1 (the break moves the first token by TV = 0.11;
# at the module's pair top-p leaves q one-hot there, and the break changes nothing).
N_MATCH = 1000
MATCH = Settings(gamma=2, temperature=1.0, top_p=1.0, verification="exact-match")


@pytest.mark.parametrize("broken", [False, True], ids=["exact-match", "broken exact match"])
def test_exact_match_passes_and_a_broken_one_fails(monkeypatch, broken):
    """The same check for exact match as for the rule; an exact match that draws from the
    residual at a mismatch fails it by many orders of magnitude."""
    pair = tiny_pair(vocab=8, target_seed=0, draft_seed=1, sharpness=1.0)
    if broken:
        break_exact_match(monkeypatch)
    r = distribution_check.run_check(pair, PROMPT, MATCH, n=N_MATCH, length=2)
    assert r.settings["verification"] == "exact-match" and r.verifier == "exact match"
    assert r.summary().startswith(("FAIL" if broken else "PASS") + ": exact match, N = 1000")
    assert r.predicted_tv == pytest.approx(0.0, abs=1e-6)  # what exact match itself gives
    assert all(v.ar_test.p_value > 0.05 for v in r.comparisons)  # the control
    if broken:
        assert not r.passed and max(v.spec_test.p_value for v in r.comparisons) < 1e-10
    else:
        assert r.passed and all(v.spec_test.p_value > 0.05 for v in r.comparisons), r.summary()
        assert 0.05 < r.spec_acceptance < 0.5  # drafts accepted, and many mismatches


def test_a_broken_rule_with_exact_match_is_refused(pair, capsys, monkeypatch):
    with pytest.raises(ValueError, match="cannot be combined with exact-match"):
        distribution_check.run_check(
            pair, PROMPT, Settings(verification="exact-match"), n=N, rule="resample-from-p"
        )
    from specviz.cli import check as check_cli
    from specviz.cli import main as cli

    def no_load(args):
        raise AssertionError("no model loads for a refused combination")

    monkeypatch.setattr(check_cli, "load_pair_from_args", no_load)
    argv = ["check", "--verification", "exact-match", "--break-rule", "accept-without-draw"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "cannot be combined with exact-match" in err and err.count("\n") == 1


def test_ngram_drafter_passes(pair):
    r = distribution_check.run_check(
        pair, "1 2 1", Settings(drafter="ngram", gamma=2), n=N, length=2
    )
    assert r.passed, r.summary()
    assert r.predicted_tv is None


def test_greedy_is_a_single_outcome(pair):
    r = distribution_check.run_check(pair, PROMPT, Settings(greedy=True, gamma=2), n=N, length=2)
    assert r.passed
    for v in r.comparisons:
        assert v.spec[0] == N and v.ar[0] == N and v.p[0] == pytest.approx(1.0)


def test_progress_is_reported(exact_run):
    progress = exact_run[1]
    assert progress[0].done == 0 and progress[-1].done == progress[-1].total == 2 * N
    assert [p.done for p in progress if p.stage == "sampling"] == list(range(0, 2 * N + 1, 2))


def test_samples_are_reproducible(pair, exact_result):
    base = Settings(gamma=2, max_new_tokens=2, trace_level="minimal")
    for i in (0, 7, N - 1):
        spec, ar, _ = distribution_check.draw_samples(pair, PROMPT, base, i, 2)
        assert list(spec) == exact_result.spec_samples[i]
        assert list(ar) == exact_result.ar_samples[i]


# --- the samples ----------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 2, 3])
@pytest.mark.parametrize("adaptive", [False, True], ids=["gamma 3", "adaptive"])
def test_every_round_drafts_to_full_depth_and_a_run_stops_at_the_length(pair, length, adaptive):
    """No round before the stop has its draft cut, and the run stops after the first round
    that brings its output to `length` tokens (the module docstring's stopping time)."""
    s = Settings(gamma=3, adaptive_gamma=adaptive, trace_level="minimal")
    sampler = distribution_check.Sampler(pair, PROMPT, s, length)
    rounds = 0
    try:
        for seed in range(40):
            t = sampler.run("spec", seed)
            assert len(t.token_ids) >= length  # no EOS on this pair
            assert all(len(r.drafted) == r.gamma for r in t.rounds), t.rounds
            assert all(r.start < length for r in t.rounds)
            rounds += len(t.rounds)
            ar = sampler.run("ar", seed)
            assert len(ar.token_ids) == length
    finally:
        sampler.close()
    assert length == 1 or rounds > 40  # later rounds were met, and drafted in full too


def test_the_check_shares_one_prefill_and_never_feeds_a_prompt_token_again(pair):
    """Length 1, gamma 3, no rows reused beyond the prompt end: each sample costs exactly one
    target call of gamma positions (the verify; the baseline's one token comes from the
    prompt-end row) and gamma - 1 draft calls of one position (the first draft too)."""
    gamma, n, prompt_len = 3, 200, len(PROMPT.split())
    r = distribution_check.run_check(
        pair, PROMPT, Settings(gamma=gamma), n=n, length=1, reuse_rows=False
    )
    assert r.passed, r.summary()
    assert r.work == {
        "draft_calls": 1 + n * (gamma - 1),
        "draft_fed": prompt_len + n * (gamma - 1),
        "draft_reused": n,  # the first draft's q
        "target_calls": 1 + n,
        "target_fed": prompt_len + n * gamma,
        "target_reused": 2 * n,  # p at the prompt end: the verify's first row, the baseline's
    }
    reused = distribution_check.run_check(pair, PROMPT, Settings(gamma=gamma), n=n, length=1)
    # the same rows, whether computed again or not: the same samples
    assert reused.spec_samples == r.spec_samples and reused.ar_samples == r.ar_samples
    for k in ("draft_calls", "target_calls"):  # rows met before cost nothing the next time
        assert reused.work[k] < r.work[k] / 4, reused.work


def test_a_prompt_near_the_end_of_the_context_drafts_what_fits(pair):
    prompt = " ".join(["1"] * (pair.context_len - 2))
    s = Settings(gamma=4, trace_level="minimal", limits=Limits(max_gamma=8))
    sampler = distribution_check.Sampler(pair, prompt, s, 2)
    assert sampler.settings.max_new_tokens == 2
    try:
        spec, ar, _ = sampler.draw(0)
    finally:
        sampler.close()
    assert len(spec) == len(ar) == 2
    with pytest.raises(ValueError, match="exceeds the model's context"):
        distribution_check.Sampler(pair, prompt + " 1", s, 2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"n": 10}, "n must"), ({"length": 4}, "length must"), ({"rule": "nope"}, "rule must")],
)
def test_bad_input_is_a_value_error(pair, kwargs, match):
    args = {"n": N, "length": 2, "rule": None} | kwargs
    with pytest.raises(ValueError, match=match):
        distribution_check.run_check(pair, PROMPT, Settings(), **args)


def test_figure_and_json(exact_result):
    fig = check_figure.check_figure(exact_result)
    assert len(fig.data) == 3 * len(exact_result.comparisons)
    assert {t.name for t in fig.data} == {"speculative", "autoregressive", "target p"}
    d = json.loads(json.dumps(exact_result.to_dict(), allow_nan=False))
    assert d["passed"] is True and len(d["comparisons"]) == 2


def test_cli_check_on_the_tiny_pair(pair, monkeypatch, capsys):
    from specviz.cli import check as check_cli
    from specviz.cli import main as cli

    monkeypatch.setattr(check_cli, "load_pair_from_args", lambda args: pair)
    argv = ["check", "--prompt", PROMPT, "--raw", "--n", "200", "--gamma", "2", "--json"]
    assert cli.main([*argv, "--break-rule", "accept-without-draw"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] is False and out["rule"] == "accept-without-draw"
    assert cli.main(["check", "--n", "5"]) == 2
    assert "n must be" in capsys.readouterr().err


def test_the_lessons_wrong_rule_fails_on_the_offline_pair_within_the_budget(offline_pair):
    """Step 6's first check on the real pair (the lesson's settings, N = 200, one token):
    the wrong rule fails, and the samples cost at most one target call each (the verify)
    and, with rows reused, a few forwards in all: the budget is about two target steps per
    sample."""
    from specviz import lesson
    from specviz.config import DEFAULT_PROMPT
    from specviz.modelthread import MODEL_THREAD

    n, gamma = lesson.CHECK_N, Settings().gamma
    s = Settings(
        temperature=lesson.CHECK_TEMPERATURE, draft_temperature=lesson.CHECK_DRAFT_TEMPERATURE
    )

    def check() -> distribution_check.CheckResult:
        return distribution_check.run_check(
            offline_pair, DEFAULT_PROMPT, s, n=n, length=lesson.CHECK_LENGTH, rule=lesson.WRONG_RULE
        )

    r = MODEL_THREAD.call(check)
    assert not r.passed and r.comparisons[0].spec_test.p_value < r.threshold, r.summary()
    assert r.comparisons[0].ar_test.p_value > 0.01  # the control
    w, prompt_len = r.work, len(offline_pair.encode_prompt(DEFAULT_PROMPT))
    assert w["target_calls"] <= 1 + n and w["target_fed"] <= prompt_len + n * gamma, w
    assert w["draft_calls"] <= 1 + n * (gamma - 1), w
    assert w["target_calls"] + w["draft_calls"] <= n / 4, w


def test_the_offline_pair_checks_its_rule_on_caches_that_hold_the_prompt(offline_pair) -> None:
    """The offline draft takes the target's keys and values of the prompt when its cache is
    empty; the check's caches hold the prompt already, and its runs draft from them."""
    from specviz.modelthread import MODEL_THREAD

    s = Settings(gamma=2, temperature=1.0, seed=0)
    r = MODEL_THREAD.call(
        lambda: distribution_check.run_check(offline_pair, "Say hi.", s, n=200, length=1)
    )
    assert r.n == 200 and r.spec_acceptance > 0
