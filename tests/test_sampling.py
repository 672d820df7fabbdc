"""The pure pieces: warping logits into p and q, draws, the residual, the rule, exact match."""

from __future__ import annotations

import pytest
import torch

from specviz.config import Warp
from specviz.sampling import (
    draw,
    match_prob,
    outside_nucleus,
    overlap,
    residual,
    verify,
    verify_exact_match,
    warp,
)


def test_greedy_warp_is_one_hot_on_the_argmax():
    probs = warp(torch.tensor([[0.1, 3.0, 2.9], [5.0, 1.0, 5.0]]), Warp(0.0, 0, 1.0))
    assert probs.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]  # first max wins a tie


def test_temperature_scales_logits_before_softmax():
    logits = torch.tensor([1.0, 2.0, 4.0])
    assert torch.allclose(warp(logits, Warp(0.5, 0, 1.0)), torch.softmax(logits / 0.5, -1))


def test_top_k_keeps_the_k_largest():
    probs = warp(torch.tensor([1.0, 4.0, 3.0, 2.0]), Warp(1.0, 2, 1.0))
    assert (probs > 0).tolist() == [False, True, True, False]
    assert probs.sum().item() == pytest.approx(1.0)


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert (warp(logits, Warp(1.0, 0, 0.8)) > 0).tolist() == [True, True, False, False]
    assert (warp(logits, Warp(1.0, 0, 0.81)) > 0).tolist() == [True, True, True, False]
    # the most likely token always survives
    assert (warp(logits, Warp(1.0, 0, 0.01)) > 0).tolist() == [True, False, False, False]


def test_draw_uses_only_the_given_generator():
    probs = torch.full((50,), 0.02)
    a = draw(probs, torch.Generator().manual_seed(7), greedy=False)
    torch.manual_seed(123)  # the global RNG must not matter
    b = draw(probs, torch.Generator().manual_seed(7), greedy=False)
    assert a == b


def test_a_row_is_drawn_over_its_support_with_its_probabilities():
    """One row (drawn over its nonzero tokens) and a batch of the same row (drawn over the
    whole vocabulary) give the row's distribution: never a token of probability 0, and each
    token's frequency within a few standard errors of its probability."""
    row = torch.zeros(5000)
    row[[3, 700, 4999]] = torch.tensor([0.6, 0.3, 0.1])
    gen = torch.Generator().manual_seed(0)
    n = 4000
    one = torch.tensor([int(draw(row, gen, greedy=False)) for _ in range(n)])
    batch = draw(row.expand(n, -1), gen, greedy=False)
    for got in (one, batch):
        freq = torch.bincount(got, minlength=5000).double() / n
        assert set(got.tolist()) <= {3, 700, 4999}
        assert torch.allclose(freq[[3, 700, 4999]], row[[3, 700, 4999]].double(), atol=0.03)
    assert draw(row[None], gen, greedy=False).shape == (1,)


def test_residual_is_normalised_positive_part():
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.5, 0.3])
    assert torch.allclose(residual(p, q), torch.tensor([1.0, 0.0, 0.0]))


def test_residual_falls_back_to_p_when_p_equals_q():
    p = torch.tensor([0.25, 0.75])
    r = residual(p, p.clone())
    assert torch.equal(r, p) and not torch.isnan(r).any()


def test_overlap_is_sum_of_minimum():
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.5, 0.3])
    assert overlap(p, q).item() == pytest.approx(0.2 + 0.3 + 0.2)


def test_a_token_with_zero_target_probability_is_never_accepted():
    p = torch.tensor([[0.0, 1.0], [0.5, 0.5]])
    q = torch.tensor([[1.0, 0.0]])
    v = verify(p, q, torch.tensor([0]), torch.tensor([0.0]))  # u = 0 exactly
    assert v.n_accepted == 0 and v.resampled
    assert v.dist.tolist() == [0.0, 1.0]


def test_rule_accepts_iff_u_below_ratio():
    p = torch.tensor([[0.3, 0.7], [0.3, 0.7], [0.5, 0.5]])
    q = torch.tensor([[0.6, 0.4], [0.5, 0.5]])
    drafts = torch.tensor([0, 1])  # ratios 0.5 and 1.4
    assert verify(p, q, drafts, torch.tensor([0.49, 0.99])).n_accepted == 2
    assert verify(p, q, drafts, torch.tensor([0.5, 0.0])).n_accepted == 0
    full = verify(p, q, drafts, torch.tensor([0.1, 0.99]))
    assert not full.resampled and torch.equal(full.dist, p[2])  # bonus from p


def test_equal_p_and_q_always_accept():
    p = torch.tensor([[0.2, 0.8], [0.6, 0.4]])
    v = verify(p, p[:1].clone(), torch.tensor([0]), torch.tensor([0.999999]))
    assert v.n_accepted == 1


def test_wrong_rules_differ_from_the_exact_one():
    p = torch.tensor([[0.3, 0.7], [0.5, 0.5]])
    q = torch.tensor([[0.6, 0.4]])
    exact = verify(p, q, torch.tensor([0]), torch.tensor([0.9]))
    from_p = verify(p, q, torch.tensor([0]), torch.tensor([0.9]), from_p=True)
    no_draw = verify(p, q, torch.tensor([0]), None)  # keeps iff p >= q, as accept-without-draw
    assert exact.dist.tolist() == [0.0, 1.0] and from_p.dist.tolist() == pytest.approx([0.3, 0.7])
    assert no_draw.n_accepted == 0  # the exact rule would accept: u = 0.1 < 0.5


def _outside_nucleus_by_full_sort(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    drop_sorted = sorted_p.cumsum(-1) - sorted_p >= top_p
    return torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)


@pytest.mark.parametrize("scale", [0.3, 3.0, 12.0])
@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.99])
def test_the_top_p_cut_equals_a_full_sort_s(scale, top_p):
    """Short nuclei (read off the top candidates) and long ones (sorted in full), mixed in
    one batch: the same tokens are dropped as by sorting every row."""
    gen = torch.Generator().manual_seed(int(scale * 10 + top_p * 100))
    logits = torch.randn(4, 3, 5000, generator=gen) * scale
    logits[0, 0] *= 40.0  # one row with a tiny nucleus in every batch
    probs = torch.softmax(logits, -1)
    got = outside_nucleus(probs, top_p)
    assert torch.equal(got, _outside_nucleus_by_full_sort(probs, top_p))
    assert (~got).sum(-1).min() >= 1


@pytest.mark.parametrize("scale", [0.5, 40.0])
def test_warp_keeps_the_nucleus_of_a_full_sort_and_renormalises_it(scale):
    """Rows whose nuclei all end among the top candidates (scale 40: a few tokens each)
    take warp's short path, the others (scale 0.5) the masked one: either way the kept
    tokens are the full sort's and their probabilities are p renormalised over them."""
    gen = torch.Generator().manual_seed(int(scale))
    logits = torch.randn(5, 6000, generator=gen) * scale
    w = Warp(0.7, 0, 0.9)
    probs = torch.softmax(logits / 0.7, -1)
    drop = _outside_nucleus_by_full_sort(probs, 0.9)
    want = probs.masked_fill(drop, 0.0)
    want = want / want.sum(-1, keepdim=True)
    got = warp(logits, w)
    assert torch.equal(got > 0, ~drop)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-7)
    assert torch.allclose(warp(logits[2], w), got[2], rtol=1e-6, atol=1e-7)  # one row alike


# --- exact match ------------------------------------------------------------------------


def test_exact_match_accepts_while_the_target_samples_agree():
    p = torch.tensor([[0.3, 0.7], [0.5, 0.5], [0.9, 0.1], [0.2, 0.8]])
    q = torch.tensor([[0.6, 0.4], [0.5, 0.5], [0.1, 0.9]])
    drafts = torch.tensor([0, 1, 1])
    v = verify_exact_match(p, q, drafts, torch.tensor([0, 0, 1, 1]))
    assert v.n_accepted == 1 and v.resampled and torch.equal(v.dist, p[1])
    assert v.added_token(torch.Generator(), greedy=False) == 0  # the target's own sample
    assert v.accept_prob.tolist() == pytest.approx([0.3, 0.5, 0.1])  # p(x_i), not min(1, p/q)
    full = verify_exact_match(p, q, drafts, torch.tensor([0, 1, 1, 0]))
    assert full.n_accepted == 3 and not full.resampled and torch.equal(full.dist, p[3])
    assert full.added_token(torch.Generator(), greedy=False) == 0  # y_{k+1}: the bonus
    none = verify_exact_match(p[:1], q[:0], drafts[:0], torch.tensor([1]))
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
        rule = verify(p, q, drafts, None)
        match = verify_exact_match(p, q, drafts, draw(p, g, greedy=True))
        assert match.n_accepted == rule.n_accepted
        assert match.added_token(g, True) == rule.added_token(g, True)


def test_exact_match_accepts_less_than_the_rule_in_expectation():
    """sum_x p q <= sum_x min(p, q) on random distributions, sharp and flat, with equality
    only where p and q are the same one-hot."""
    g = torch.Generator().manual_seed(11)
    for scale in (0.1, 1.0, 5.0, 50.0):
        p = torch.softmax(torch.randn(500, 20, generator=g) * scale, -1)
        q = torch.softmax(torch.randn(500, 20, generator=g) * scale, -1)
        for a, b in ((p, q), (p, p), (q, p)):
            assert (match_prob(a, b) <= overlap(a, b) + 1e-6).all()
    same = torch.softmax(torch.randn(500, 20, generator=g), -1)
    assert (match_prob(same, same) < overlap(same, same) - 1e-3).all()  # p == q, not one-hot
    hot = torch.eye(4)
    assert torch.equal(match_prob(hot, hot), overlap(hot, hot))


def test_exact_match_draws_only_from_the_given_generator():
    p = torch.full((3, 50), 0.02)
    drafts = torch.tensor([1, 2])
    q = torch.full((2, 50), 0.02)
    a = verify_exact_match(p, q, drafts, draw(p, torch.Generator().manual_seed(3), False))
    torch.manual_seed(1)  # the global RNG must not matter
    b = verify_exact_match(p, q, drafts, draw(p, torch.Generator().manual_seed(3), False))
    assert torch.equal(a.samples, b.samples) and a.n_accepted == b.n_accepted


def test_verify_kept_stops_at_the_first_draft_that_fails_its_test():
    from specviz.sampling import verify_kept

    p = torch.tensor([[0.3, 0.7], [0.6, 0.4], [0.5, 0.5]])
    q = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    v = verify_kept(p, q, torch.tensor([1, 0]), torch.tensor([True, False]))
    assert v.n_accepted == 1 and v.resampled and torch.equal(v.dist, p[1])
    assert v.samples is None and v.accept_prob.tolist() == [1.0, 0.0]
    full = verify_kept(p, q, torch.tensor([1, 0]), torch.tensor([True, True]))
    assert full.n_accepted == 2 and not full.resampled and torch.equal(full.dist, p[2])


def test_top2_gap_is_the_margin_of_the_argmax():
    from specviz.sampling import top2_gap

    gaps = top2_gap(torch.tensor([[1.0, 3.0, 2.5], [4.0, 4.0, 0.0]]))
    assert gaps.tolist() == [0.5, 0.0]
