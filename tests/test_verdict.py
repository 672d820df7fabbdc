"""A chain's decisions on hand-made rows, through the verification classes: the residual,
the rejection rule and its wrong variants, exact match, and a test on p alone."""

from __future__ import annotations

import pytest
import torch

from specviz.config import Warp
from specviz.sampling import draw, warp
from specviz.verify.exact_match import ExactMatch
from specviz.verify.rejection import AcceptWithoutDraw, Rejection, ResampleFromP
from specviz.verify.top_k_match import TopKMatch
from specviz.verify.verdict import residual

RULE, MATCH = Rejection(), ExactMatch()


def test_residual_is_normalised_positive_part():
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.5, 0.3])
    assert torch.allclose(residual(p, q), torch.tensor([1.0, 0.0, 0.0]))


def test_residual_falls_back_to_p_when_p_equals_q():
    p = torch.tensor([0.25, 0.75])
    r = residual(p, p.clone())
    assert torch.equal(r, p) and not torch.isnan(r).any()


def test_a_token_with_zero_target_probability_is_never_accepted():
    p = torch.tensor([[0.0, 1.0], [0.5, 0.5]])
    q = torch.tensor([[1.0, 0.0]])
    v = RULE.decide(p, q, torch.tensor([0]), torch.tensor([0.0]))  # u = 0 exactly
    assert v.n_accepted == 0 and v.resampled
    assert v.dist.tolist() == [0.0, 1.0]


def test_rule_accepts_iff_u_below_ratio():
    p = torch.tensor([[0.3, 0.7], [0.3, 0.7], [0.5, 0.5]])
    q = torch.tensor([[0.6, 0.4], [0.5, 0.5]])
    drafts = torch.tensor([0, 1])  # ratios 0.5 and 1.4
    assert RULE.decide(p, q, drafts, torch.tensor([0.49, 0.99])).n_accepted == 2
    assert RULE.decide(p, q, drafts, torch.tensor([0.5, 0.0])).n_accepted == 0
    full = RULE.decide(p, q, drafts, torch.tensor([0.1, 0.99]))
    assert not full.resampled and torch.equal(full.dist, p[2])  # bonus from p


def test_equal_p_and_q_always_accept():
    p = torch.tensor([[0.2, 0.8], [0.6, 0.4]])
    v = RULE.decide(p, p[:1].clone(), torch.tensor([0]), torch.tensor([0.999999]))
    assert v.n_accepted == 1


def test_wrong_rules_differ_from_the_exact_one():
    p = torch.tensor([[0.3, 0.7], [0.5, 0.5]])
    q = torch.tensor([[0.6, 0.4]])
    exact = RULE.decide(p, q, torch.tensor([0]), torch.tensor([0.9]))
    from_p = ResampleFromP().decide(p, q, torch.tensor([0]), torch.tensor([0.9]))
    no_draw = AcceptWithoutDraw().decide(p, q, torch.tensor([0]), torch.tensor([0.1]))
    assert exact.dist.tolist() == [0.0, 1.0] and from_p.dist.tolist() == pytest.approx([0.3, 0.7])
    assert no_draw.n_accepted == 0  # the exact rule would accept: u = 0.1 < 0.5


def test_exact_match_accepts_while_the_target_samples_agree():
    p = torch.tensor([[0.3, 0.7], [0.5, 0.5], [0.9, 0.1], [0.2, 0.8]])
    q = torch.tensor([[0.6, 0.4], [0.5, 0.5], [0.1, 0.9]])
    drafts = torch.tensor([0, 1, 1])
    v = MATCH.decide(p, q, drafts, torch.tensor([0, 0, 1, 1]))
    assert v.n_accepted == 1 and v.resampled and torch.equal(v.dist, p[1])
    assert v.added_token(torch.Generator(), greedy=False) == 0  # the target's own sample
    assert v.accept_prob.tolist() == pytest.approx([0.3, 0.5, 0.1])  # p(x_i), not min(1, p/q)
    full = MATCH.decide(p, q, drafts, torch.tensor([0, 1, 1, 0]))
    assert full.n_accepted == 3 and not full.resampled and torch.equal(full.dist, p[3])
    assert full.added_token(torch.Generator(), greedy=False) == 0  # y_{k+1}: the bonus
    none = MATCH.decide(p[:1], q[:0], drafts[:0], torch.tensor([1]))
    assert none.n_accepted == 0 and not none.resampled
    assert none.added_token(torch.Generator(), greedy=False) == 1


def test_exact_match_equals_the_rule_in_greedy_mode():
    """One-hot p and q: the target's sample is argmax p, and both verifications accept the
    same prefix and add the same token."""
    g = torch.Generator().manual_seed(5)
    for _ in range(200):
        k = int(torch.randint(1, 5, (1,), generator=g))
        logits_p = torch.randn(k + 1, 4, generator=g)
        p = warp(logits_p, Warp(0.0, 0, 1.0))
        # drafts agree with the target's argmax often, not always
        agree = torch.rand(k, generator=g) < 0.6
        drafts = torch.where(agree, p[:k].argmax(-1), torch.randint(0, 4, (k,), generator=g))
        q = torch.nn.functional.one_hot(drafts, 4).float()
        rule = RULE.decide(p, q, drafts, None)
        match = MATCH.decide(p, q, drafts, draw(p, g, greedy=True))
        assert match.n_accepted == rule.n_accepted
        assert match.added_token(g, True) == rule.added_token(g, True)


def test_exact_match_draws_only_from_the_given_generator():
    p = torch.full((3, 50), 0.02)
    drafts = torch.tensor([1, 2])
    q = torch.full((2, 50), 0.02)
    a = MATCH.decide(p, q, drafts, draw(p, torch.Generator().manual_seed(3), False))
    torch.manual_seed(1)  # the global RNG must not matter
    b = MATCH.decide(p, q, drafts, draw(p, torch.Generator().manual_seed(3), False))
    assert torch.equal(a.samples, b.samples) and a.n_accepted == b.n_accepted


def test_a_test_on_p_stops_at_the_first_draft_that_fails_it():
    p = torch.tensor([[0.3, 0.7], [0.6, 0.4], [0.5, 0.5]])
    q = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    top1 = TopKMatch(1)  # keeps x iff it is p's most likely token
    v = top1.decide(p, q, torch.tensor([1, 1]), None)
    assert v.n_accepted == 1 and v.resampled and torch.equal(v.dist, p[1])
    assert v.samples is None and v.u is None and v.accept_prob.tolist() == [1.0, 0.0]
    full = top1.decide(p, q, torch.tensor([1, 0]), None)
    assert full.n_accepted == 2 and not full.resampled and torch.equal(full.dist, p[2])
