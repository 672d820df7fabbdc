"""One speculative round, top to bottom, as Leviathan et al. 2022's Algorithm 1 (Chen et al.
2023's Algorithm 2): a chain of drafts (:class:`ChainRounds`) and its sibling, a tree of
drafts (:class:`TreeRounds`), each in the same five steps:

1. draft: up to gamma tokens from q (a tree: depth by depth, several children a node);
2. one target call scores them all: k + 1 rows of p (a tree: one row after every node);
3. the verification object (specviz.verify) decides: the accepted prefix (a tree: path)
   and the distribution the added token comes from;
4. emit the accepted drafts and the resampled or bonus token, and crop both caches to the
   accepted sequence;
5. the round's record (specviz.record), read off the verification's decisions.

A drafter may draft nothing in a round (the offline draft, until it has taken the target's
keys and values of the prompt: specviz.drafters.model): the round is then the target's call
alone, which gives one token.

The engine's loop (specviz.engine.Run) owns the budget, the clock, the trace and the stop;
a strategy's ``round`` is one round. Greedy means one-hot p and q; every draw comes from the
run's generator, in a fixed order (drafts, then the decision's draws, then the added token).
"""

from __future__ import annotations

from typing import Protocol

import torch

from specviz.clock import clock
from specviz.config import Settings
from specviz.drafters.base import Draft, Drafter, target_out
from specviz.lm import ModelCache, tree_refusal
from specviz.pair import ModelPair
from specviz.record import round_decisions, tree_decisions
from specviz.sampling import warp
from specviz.trace import Round
from specviz.tree import ROOT, keep_path, target_rows
from specviz.verify.base import Verification


class RoundStrategy(Protocol):
    """How a round drafts and verifies: a chain or a tree."""

    def round(
        self, seq: list[int], room: int, gen: torch.Generator
    ) -> tuple[list[int], Round, torch.Tensor]:
        """Draft at most `room` tokens after seq, verify them with one target call, extend
        seq by the new tokens; return them, the round's record (the loop sets its index,
        start and t_s) and the target's logit rows that scored them [len(new), V]."""
        ...


class ChainRounds:
    """A chain of drafts, with adaptive gamma where the settings ask for it."""

    def __init__(
        self,
        settings: Settings,
        pair: ModelPair,
        target: ModelCache,
        drafter: Drafter,
        verification: Verification,
    ) -> None:
        self.s, self.pair, self.target, self.drafter = settings, pair, target, drafter
        self.verification = verification
        self.gamma = settings.gamma

    def round(
        self, seq: list[int], room: int, gen: torch.Generator
    ) -> tuple[list[int], Round, torch.Tensor]:
        s, dev, eos, pw = self.s, self.pair.device, self.pair.eos_ids, self.s.target_warp()
        gamma = self.gamma
        # a round emits at most k + 1 tokens: never past the budget
        k_max = min(gamma, room)
        # 1. draft k <= gamma tokens x_1..x_k, each with the row q it was drawn from
        ta = clock(dev)
        draft = self.drafter.propose(seq, k_max, gen) if k_max > 0 else self._no_draft()
        tb = clock(dev)
        k = len(draft.ids)
        # 2. one target call over seq + x_1..x_k: k + 1 rows of p (row k gives the bonus).
        # Both are over the tokenizer's V ids (padded columns are cut: specviz.lm).
        logits = self.target.logits(seq + draft.ids, keep=k + 1)  # [k+1, V]
        p = warp(logits, pw)  # [k+1, V]
        q = draft.q.to(dev)  # [k, V]
        drafts = torch.tensor(draft.ids, dtype=torch.long, device=dev)  # [k]
        # 3. the verification decides: x_1..x_n accepted, and the added token's distribution
        verdict = self.verification.decide_chain(p, q, drafts, gen, pw.greedy)
        n = verdict.n_accepted
        # 4. emit x_1..x_n and the resampled (or bonus) token; none after an accepted EOS
        accepted = draft.ids[:n]
        ends_on_eos = bool(accepted) and accepted[-1] in eos
        added = None if ends_on_eos else verdict.added_token(gen, pw.greedy)
        new = accepted + ([] if added is None else [added])
        seq.extend(new)
        self.target.rollback(seq)  # both caches back to the accepted sequence
        # the drafter hears the rows that scored the new tokens, and (a feature drafter) the
        # target's hidden state along the root and the n accepted drafts
        out = target_out(self.target, logits, slice(0, len(new)), list(range(n + 1)))
        self.drafter.after_round(seq, out)
        tc = clock(dev)
        # 5. the round's record, read off the verdict
        drafted, added_record = round_decisions(
            s, self.pair.token_text, draft.ids, p, q, verdict, added, self.verification
        )
        rnd = Round(
            index=0,
            start=0,
            gamma=gamma,
            drafted=drafted,
            added=added_record,
            draft_ms=(tb - ta) * 1e3,
            verify_ms=(tc - tb) * 1e3,
            t_s=0.0,
            stop=draft.stop if k_max == gamma or draft.stop != "gamma" else "budget",
        )
        if s.adaptive_gamma:
            self.gamma = next_gamma(gamma, k, n, s.limits.max_gamma)
        return new, rnd, logits[: len(new)]

    def _no_draft(self) -> Draft:
        """A round that drafts nothing because the budget is spent: a plain target step."""
        return Draft([], torch.empty(0, self.pair.vocab_size), "budget")


def next_gamma(gamma: int, k: int, n_accepted: int, max_gamma: int) -> int:
    """Adaptive gamma, as transformers' heuristic: +2 after a full accept, -1 after a rejection."""
    if k == 0:
        return gamma
    if n_accepted == k:
        return min(gamma + 2, max_gamma)
    return max(1, gamma - 1)


class TreeRounds:
    """A tree of drafts (a fixed shape, or a dynamic tree's node budget): the chain's
    sibling, the same five steps. The record holds the recorded path in ``drafted`` (what
    every positional reader uses) and every node in ``nodes``."""

    def __init__(
        self,
        settings: Settings,
        pair: ModelPair,
        target: ModelCache,
        drafter: Drafter,
        verification: Verification,
    ) -> None:
        self.s, self.pair, self.target, self.drafter = settings, pair, target, drafter
        self.verification = verification
        self.max_depth = len(settings.tree) if settings.tree is not None else settings.gamma

    @torch.inference_mode()
    def round(
        self, seq: list[int], room: int, gen: torch.Generator
    ) -> tuple[list[int], Round, torch.Tensor]:
        s, target, eos, pw = self.s, self.target, self.pair.eos_ids, self.s.target_warp()
        dev = self.pair.device
        depth = min(self.max_depth, room)  # never draft past the budget
        # 1. draft the tree depth by depth: n nodes, each with the row q it was drawn from
        ta = clock(dev)
        tree, stop = self.drafter.propose_tree(seq, depth, gen)
        if stop == "gamma" and depth < self.max_depth:
            stop = "budget"
        tb = clock(dev)
        # 2. one target call over seq and every node (a tree mask): n + 1 rows of p
        logits, _ = target_rows(target, seq, tree)  # [n+1, V]: row 0 after seq, 1 + j after j
        p = warp(logits, pw)  # [n+1, V]
        # 3. the verification decides: walking down from the root, each node's children
        # tried in draw order against p' (specviz.verify's sibling rule)
        draws = self.verification.tree_draws(p, len(tree), gen, pw.greedy)
        verdict = self.verification.decide_tree(p, tree, draws, eos)
        # 4. emit the accepted path and the resampled (or bonus) token; none after an EOS
        accepted = [tree.ids[j] for j in verdict.path]
        ends_on_eos = bool(accepted) and accepted[-1] in eos
        added = None if ends_on_eos else verdict.added_token(gen, pw.greedy)
        new = accepted + ([] if added is None else [added])
        keep_path(target, len(seq), [len(seq) + j for j in verdict.path])  # both caches: path
        rows = [ROOT + 1] + [j + 1 for j in verdict.path]  # the root's and the path's rows
        self.drafter.keep_path(tree, verdict.path, seq)
        seq.extend(new)
        target.rollback(seq)
        self.drafter.after_round(seq, target_out(target, logits, rows[: len(new)], rows))
        tc = clock(dev)
        # 5. the round's record: the recorded path as a chain's, and every node
        u = draws if self.verification.draws == "u" else None
        drafted, added_record, nodes = tree_decisions(
            s, self.pair.token_text, tree, p, verdict, u, added, self.verification
        )
        rnd = Round(
            index=0,
            start=0,
            gamma=s.gamma,
            drafted=drafted,
            added=added_record,
            draft_ms=(tb - ta) * 1e3,
            verify_ms=(tc - tb) * 1e3,
            t_s=0.0,
            tree=None if s.tree is None else list(s.tree),
            nodes=nodes,
            stop=stop,
        )
        return new, rnd, logits[rows[: len(new)]]


def check_tree_request(pair: ModelPair, settings: Settings) -> None:
    """Refuse (ValueError, one line) a tree this pair cannot run: on the compiled path, or on
    a model whose attention a custom mask would change."""
    if not settings.drafts_tree:
        return
    pair.check_tree()  # a named compiled path refuses; one auto chose leaves trees eager
    for role, m in (("target", pair.target), ("draft", pair.draft)):
        why = None if m is None else tree_refusal(m.model)
        if why:
            raise ValueError(f"a tree cannot run on this {role}: {why}")
