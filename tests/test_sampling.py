"""The distributions: warping logits into p and q, draws, the overlaps (the decisions are
tests/test_verdict.py's)."""

from __future__ import annotations

import pytest
import torch

from specviz.config import Warp
from specviz.sampling import draw, match_prob, outside_nucleus, overlap, warp


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


def test_overlap_is_sum_of_minimum():
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.5, 0.3])
    assert overlap(p, q).item() == pytest.approx(0.2 + 0.3 + 0.2)


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


def test_top2_gap_is_the_margin_of_the_argmax():
    from specviz.sampling import top2_gap

    gaps = top2_gap(torch.tensor([[1.0, 3.0, 2.5], [4.0, 4.0, 0.0]]))
    assert gaps.tolist() == [0.5, 0.0]
