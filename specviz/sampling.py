"""Distributions only: logits to distributions (warp), draws with an explicit generator, and
the overlaps of two distributions, in torch (the top-p cut in specviz's own kernel,
``torch.ops.specviz.top_p``, where the CPU backend has registered it: see _top_p_registered).
Every decision a verification makes lives in specviz.verify.

Notation as in both papers: p is the target's distribution, q the draft's. Every function
here is stateless; randomness only ever comes from the ``torch.Generator`` passed in, so
two requests never share RNG state.
"""

from __future__ import annotations

import torch

from specviz.config import Warp


def warp(logits: torch.Tensor, w: Warp) -> torch.Tensor:
    """Logits [..., V] -> probabilities [..., V] (float32) after temperature, top-k, top-p.

    Greedy (temperature 0) gives a one-hot on the argmax. top-k keeps the k largest logits
    (ties with the k-th kept); top-p keeps the smallest prefix, in order of decreasing
    probability, whose mass reaches top_p (the most likely token always survives).
    """
    logits = logits.float()
    if w.greedy:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    if w.temperature != 1.0:  # x / 1 is x
        logits = logits / w.temperature
    if 0 < w.top_k < logits.shape[-1]:
        kth = torch.topk(logits, w.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if w.top_p < 1.0:
        short = _kernel_cut(probs, w.top_p)
        if short is None:
            short = _short_nucleus(probs, w.top_p)
        if short is not None:
            return short
        probs = probs.masked_fill(outside_nucleus(probs, w.top_p), 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def _kernel_cut(probs: torch.Tensor, top_p: float) -> torch.Tensor | None:
    """probs [..., V] cut to their nucleus and renormalised by specviz's own kernel
    (``torch.ops.specviz.top_p``, specviz/backend/csrc/top_p.cpp), where it is loaded and the rows
    are a CPU's float32; None otherwise, or where the kernel cannot show a row's nucleus
    ends among the candidates it collects (the torch cut below then decides). It keeps as
    many tokens, and the same probabilities, as the full sort's cut; where tokens of equal
    probability straddle the cut, it keeps those of lower id, while torch's sort and topk
    order ties as they happen to (about 1 row in 1,500 random rows keeps another of the tied
    tokens). p and q of one run pass through the same cut, so q stays the distribution each
    draft was drawn from. One pass over a row, where ``topk`` and the masked
    cut take several, and on a CPU fresh from a model call each ATen operation's code is
    fetched again: at the defaults the draft's cut took about 0.6 ms a token with them."""
    if probs.device.type != "cpu" or probs.dtype != torch.float32 or probs.numel() == 0:
        return None
    if not 0.0 < top_p < 1.0 - 1e-4 or not _top_p_registered():  # the margin: the kernel's tau
        return None
    cut = torch.ops.specviz.top_p(probs.reshape(-1, probs.shape[-1]), top_p)
    return cut.reshape(probs.shape) if cut.numel() else None


def _top_p_registered() -> bool:
    """Whether ``torch.ops.specviz.top_p`` is there: the CPU backend registers it when it
    loads its library (specviz.backend.kernels.ready(), on every CPU pair's load), so this
    module reaches the kernel through torch's op registry and imports nothing of the backend."""
    if _TOP_P:
        return True
    found = hasattr(torch.ops.specviz, "top_p")
    if found:
        _TOP_P.append(True)  # registered ops stay registered for the process's life
    return found


_TOP_P: list[bool] = []


def _short_nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor | None:
    """probs [..., V] cut to their nucleus and renormalised, when every row's nucleus ends
    among its NUCLEUS_CANDIDATES most likely tokens (None otherwise): the same tokens
    outside_nucleus keeps, read off the same ``topk`` and running sums, and each kept
    probability divided by the kept mass, summed over the candidates alone. A full row is
    written once (the zeros), where masking and renormalising over the vocabulary would
    pass over it four more times; at the defaults a nucleus is 1 to 10 tokens."""
    shape = probs.shape
    if NUCLEUS_CANDIDATES >= shape[-1]:
        return None
    flat = probs.reshape(-1, shape[-1])  # [R, V]
    head, order = torch.topk(flat, NUCLEUS_CANDIDATES, dim=-1)  # sorted, descending
    keep = head.cumsum(-1) - head < top_p
    if bool(keep[:, -1].any()):  # some nucleus goes past the candidates
        return None
    kept = head.masked_fill(~keep, 0.0)
    kept = kept / kept.sum(-1, keepdim=True)
    return torch.zeros_like(flat).scatter_(-1, order, kept).reshape(shape)


# How many of the most likely tokens the top-p cut looks at first (see outside_nucleus).
NUCLEUS_CANDIDATES = 256


def outside_nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The tokens top-p drops [..., V] (bool): in order of decreasing probability, those
    whose preceding mass already reaches top_p.

    A full sort of a vocabulary-wide row is costly on a CPU, and the nucleus is usually a
    few hundred tokens. So the cut first takes each row's NUCLEUS_CANDIDATES most
    likely tokens (``topk``: the same values in the same order as a full sort's head, and
    the same running sums). In a row whose nucleus ends among them (the last candidate is
    dropped), every later token would be dropped too, since the running mass only grows:
    the row's mask is the full sort's. Only the other rows are sorted in full."""
    shape = probs.shape
    flat = probs.reshape(-1, shape[-1])  # [R, V]
    if NUCLEUS_CANDIDATES >= shape[-1]:
        return _outside_nucleus_sorted(flat, top_p).reshape(shape)
    head, order = torch.topk(flat, NUCLEUS_CANDIDATES, dim=-1)  # sorted, descending
    mass_before = head.cumsum(-1) - head
    keep = torch.zeros(flat.shape, dtype=torch.bool, device=flat.device)
    drop = ~keep.scatter_(-1, order, mass_before < top_p)
    longer = mass_before[:, -1] < top_p  # [R] rows whose nucleus goes past the candidates
    if bool(longer.any()):
        drop[longer] = _outside_nucleus_sorted(flat[longer], top_p)
    return drop.reshape(shape)


def _outside_nucleus_sorted(flat: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_p, order = torch.sort(flat, dim=-1, descending=True)
    mass_before = sorted_p.cumsum(-1) - sorted_p  # [R, V]
    drop_sorted = mass_before >= top_p
    return torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)


def draw(probs: torch.Tensor, generator: torch.Generator, greedy: bool) -> torch.Tensor:
    """One token per row of probs [..., V] -> ids [...]; greedy takes the argmax, no RNG.

    torch.multinomial draws one sample by racing an exponential variate per column (V of
    them: about a millisecond for a 49,152-token row on one CPU core). A single row is
    drawn over its support instead (the tokens of nonzero probability, a handful after
    top-p): the same distribution, and as many variates as the support has tokens."""
    if greedy:
        return probs.argmax(-1)
    shape = probs.shape[:-1]
    if shape.numel() == 1:
        row = probs.reshape(-1)
        support = row.nonzero().squeeze(1)
        if 0 < support.shape[0] < row.shape[0]:
            return support[torch.multinomial(row[support], 1, generator=generator)].reshape(shape)
        return torch.multinomial(row, 1, generator=generator).reshape(shape)
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(shape)


def next_token(logits: torch.Tensor, w: Warp, generator: torch.Generator) -> int:
    """One token from logits [V] under w: draw(warp(...)), without building the one-hot
    row that greedy warping would (its argmax is the logits' argmax)."""
    if w.greedy:
        return int(logits.argmax(-1))
    return int(draw(warp(logits, w), generator, greedy=False))


def top2_gap(logits: torch.Tensor) -> torch.Tensor:
    """The largest logit minus the second largest, per row of logits [..., V] -> [...]: how
    near greedy decoding is to a tie there."""
    top = torch.topk(logits.float(), min(2, logits.shape[-1]), dim=-1).values
    return top[..., 0] - top[..., -1]


def overlap(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """sum_x min(p(x), q(x)) per row: the probability that the rejection rule accepts a
    draw from q."""
    return torch.minimum(p, q).sum(-1)


def match_prob(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """sum_x p(x) q(x) per row: the probability that exact match accepts a draw from q.
    Never above overlap(p, q), since p(x) q(x) <= min(p(x), q(x)) when both are <= 1."""
    return (p * q).sum(-1)
