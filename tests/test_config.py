"""Settings validate themselves: every bad value is one clear ValueError line."""

from __future__ import annotations

import pytest

from specviz.config import Limits, Settings

BAD = [
    ({"gamma": 0}, "gamma must be in 1..32"),
    ({"gamma": 33}, "gamma must be in 1..32"),
    ({"temperature": -0.1}, "temperature must be a number >= 0"),
    ({"top_p": 0.0}, "top_p must be in (0, 1]"),
    ({"top_p": 1.5}, "top_p must be in (0, 1]"),
    ({"top_k": -1}, "top_k must be in >= 0"),
    ({"max_new_tokens": 0}, "max_new_tokens must be in 1..2048"),
    ({"max_new_tokens": 2049}, "max_new_tokens must be in 1..2048"),
    ({"method": "beam"}, "method must be one of"),
    ({"gamma": 2.5}, "gamma must be an integer"),
    ({"temperature": float("nan")}, "temperature must be a number"),
    ({"draft_temperature": -1.0}, "draft_temperature must be a number >= 0"),
    # logits / 1e-40 overflow float32: refused, not a NaN distribution and a traceback
    ({"temperature": 1e-40}, "temperature must be 0 (greedy) or at least 0.01, got 1e-40"),
    ({"temperature": 0.009}, "temperature must be 0 (greedy) or at least 0.01"),
    ({"draft_temperature": 1e-40}, "draft_temperature must be 0 (greedy) or at least 0.01"),
    ({"verification": "exact"}, "verification must be one of rejection, exact-match"),
    # the ranges and choices each field's schema entry declares
    ({"seed": -1}, "seed must be in 0..9223372036854775807, got -1"),
    ({"top_n": 0}, "top_n must be in 1..100, got 0"),
    ({"ngram_size": 17}, "ngram_size must be in 1..16, got 17"),
    ({"rule": "lenient"}, "rule must be one of rejection, resample-from-p, accept-without-draw"),
    ({"trace_level": "some"}, "trace_level must be one of full, minimal"),
    ({"top_p": True}, "top_p must be in (0, 1], got True"),
    ({"draft_temperature": "hot"}, "draft_temperature must be a number >= 0, got 'hot'"),
    # a deliberately wrong rule is a variant of the rejection rule only
    (
        {"verification": "exact-match", "rule": "resample-from-p"},
        "rule 'resample-from-p' is a broken rejection rule: it cannot be combined with",
    ),
]


@pytest.mark.parametrize("change,message", BAD)
def test_bad_settings_raise_one_line(change, message):
    with pytest.raises(ValueError) as err:
        Settings(**change)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_smallest_temperature_gives_a_finite_distribution():
    import torch

    from specviz.sampling import warp

    s = Settings(temperature=0.01, draft_temperature=0.01)
    logits = torch.tensor([3.0e3, -3.0e3, 0.0, 2.9e3])  # far wider than any real model's
    for w in (s.target_warp(), s.draft_warp()):
        probs = warp(logits, w)
        assert torch.isfinite(probs).all() and probs.sum().item() == 1.0


def test_greedy_means_one_hot_p_and_q():
    s = Settings(greedy=True, temperature=0.7, draft_temperature=1.5)
    assert s.target_warp().greedy and s.draft_warp().greedy
    assert Settings(temperature=0.0).is_greedy


def test_draft_temperature_changes_q_only():
    s = Settings(temperature=0.7, top_k=5, draft_temperature=1.5)
    assert s.target_warp().temperature == 0.7 and s.draft_warp().temperature == 1.5
    assert s.draft_warp().top_k == 5


def test_limits_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_GAMMA", "8")
    monkeypatch.setenv("SPECVIZ_MAX_NEW_TOKENS", "64")
    lim = Limits.from_env()
    assert (lim.max_gamma, lim.max_new_tokens) == (8, 64)
    with pytest.raises(ValueError, match="gamma must be in 1..8"):
        Settings(gamma=9, limits=lim)


def test_settings_round_trip_through_plain_values():
    s = Settings(gamma=7, temperature=0.8, top_p=0.95, seed=11)
    assert Settings.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError, match="unknown setting"):
        Settings.from_dict({**s.to_dict(), "beam_width": 4})


def test_verification_defaults_to_the_rejection_rule():
    assert Settings().verification == "rejection"
    s = Settings(verification="exact-match")
    assert Settings.from_dict(s.to_dict()) == s
    old = Settings().to_dict()
    del old["verification"]  # settings stored before the field existed
    assert Settings.from_dict(old).verification == "rejection"
    assert Settings.from_trace(old).verification == "rejection"
    assert Settings.from_trace(s.to_dict()) == s


def test_a_traces_settings_parse_with_defaults_old_names_and_no_strays():
    """A trace's stored settings become a Settings: a field written before it existed takes
    its default, the rejection rule's old name "exact" is mapped, a key no field has is
    dropped, and a value today's schema refuses is refused with one line."""
    old = {"gamma": 3, "rule": "exact", "temperature": 0.5, "tree": [2, 1], "gone": 1}
    s = Settings.from_trace(old)
    assert (s.gamma, s.rule, s.temperature, s.tree) == (2, "rejection", 0.5, (2, 1))
    assert s.top_p == Settings().top_p and s.verification == Settings().verification
    with pytest.raises(ValueError, match="gamma"):
        Settings.from_trace({"gamma": 0})
