"""Speculative rounds on a drafted tree, and their records.

:class:`TreeRounds` is the round strategy the engine's loop (specviz.engine.Run) uses when a
run's settings carry a tree (a fixed shape, or a dynamic tree's node budget). Each round:
draft the tree depth by depth (specviz.tree.draft_tree, or draft_budget_tree), score every
node with one target call, walk the verdict down from the root (specviz.tree.verify_tree,
asking the run's verification), add the resampled or bonus token, then gather the accepted
path in both caches. The round's record holds the recorded path in ``drafted`` (what every
positional reader uses) and every node in ``nodes``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from specviz.config import Settings
from specviz.lm import ModelCache, tree_refusal
from specviz.pair import ModelPair
from specviz.record import round_decisions
from specviz.sampling import warp
from specviz.trace import Added, Drafted, Node, Round
from specviz.tree import (
    ROOT,
    TreeDraft,
    TreeVerdict,
    draft_budget_tree,
    draft_tree,
    keep_path,
    target_rows,
    verify_tree,
)
from specviz.updates import clock
from specviz.verify.base import Verification
from specviz.verify.verdict import Verdict


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


class TreeRounds:
    """The round strategy of a tree: round(seq, room, gen) drafts, verifies and records
    one tree round, extending seq by the tokens it emits."""

    def __init__(
        self,
        settings: Settings,
        pair: ModelPair,
        target: ModelCache,
        draft: ModelCache,
        verification: Verification,
    ) -> None:
        self.s, self.pair, self.target, self.lm = settings, pair, target, draft
        self.verification = verification
        self.max_depth = len(settings.tree) if settings.tree is not None else settings.gamma

    @torch.inference_mode()
    def round(
        self, seq: list[int], room: int, gen: torch.Generator
    ) -> tuple[list[int], Round, torch.Tensor]:
        """One round: its new tokens, its record (index, start and t_s for the loop to set),
        and the target's logit rows [len(new), V] that scored the new tokens."""
        s, pair, lm, target = self.s, self.pair, self.lm, self.target
        dev, eos, pw, dw = pair.device, pair.eos_ids, s.target_warp(), s.draft_warp()
        depth = min(self.max_depth, room)  # never draft past the budget
        ta = clock(dev)
        tree, stop = TreeDraft(greedy=dw.greedy), "budget"
        if depth > 0 and s.tree_budget is not None:
            tree, stop = draft_budget_tree(lm, seq, s.tree_budget, depth, dw, eos, gen)
        elif depth > 0 and s.tree is not None:
            tree = draft_tree(lm, seq, s.tree, depth, dw, eos, gen)
            stop = "eos" if max(tree.depths) < depth else "gamma"
        if stop == "gamma" and depth < self.max_depth:
            stop = "budget"
        tb = clock(dev)
        logits, _ = target_rows(target, seq, tree)
        p = warp(logits, pw)  # [n + 1, V]
        draws = self.verification.tree_draws(p, len(tree), gen, pw.greedy)
        verdict = verify_tree(p, tree, draws, eos, self.verification)
        accepted = [tree.ids[j] for j in verdict.path]
        ends_on_eos = bool(accepted) and accepted[-1] in eos
        added = None if ends_on_eos else verdict.added_token(gen, pw.greedy)
        new = accepted + ([] if added is None else [added])
        keep_path(target, len(seq), [len(seq) + j for j in verdict.path])
        keep_path(lm, len(seq), [tree.slots[j] for j in verdict.path if j in tree.slots])
        seq.extend(new)
        target.rollback(seq)
        lm.rollback(seq)
        tc = clock(dev)
        u = draws if self.verification.draws == "u" else None
        drafted, added_record, nodes = tree_decisions(
            s, pair.token_text, tree, p, verdict, u, added, self.verification
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
        rows = [ROOT + 1] + [j + 1 for j in verdict.path]  # the rows that scored new
        return new, rnd, logits[rows[: len(new)]]


def recorded_path(tree: TreeDraft, verdict: TreeVerdict) -> list[int]:
    """The nodes a tree round records as a chain's drafts: the accepted path; where every
    child was rejected, the first child tried, then its first descendants (discarded, as a
    chain's drafts after a rejection)."""
    path = list(verdict.path)
    if verdict.resampled:
        j = tree.children(verdict.stop)[0]
        path.append(j)
        while kids := tree.children(j):
            j = kids[0]
            path.append(j)
    return path


def tree_decisions(
    settings: Settings,
    text: Callable[[int], str],
    tree: TreeDraft,
    p: torch.Tensor,  # [n + 1, V]
    verdict: TreeVerdict,
    u: torch.Tensor | None,  # [n]
    added: int | None,
    verification: Verification,
) -> tuple[list[Drafted], Added | None, list[Node]]:
    """The round's records: the path path's decisions (built as a chain's, by
    specviz.record, with each tried node's p' and turn), the added token, and every node
    with its trial."""
    path = recorded_path(tree, verdict)
    rows = [tree.parents[node] + 1 for node in path] + [(path[-1] if path else ROOT) + 1]
    p_path = p[rows]  # [k + 1, V]
    q_path = torch.stack([tree.q(node) for node in path]) if path else torch.empty(0, p.shape[-1])
    ids = [tree.ids[node] for node in path]
    idx = torch.arange(len(path))
    drafts = torch.tensor(ids, dtype=torch.long)
    p_x, q_x = p_path[idx, drafts], q_path[idx, drafts]
    tried = {t.node: t for t in verdict.trials}
    # a(x) as the trial computed it from p'; an untried (discarded) node's from its own p
    accept = verification.keep_prob(p_path[: len(path)], q_path)[idx, drafts].to(p.dtype)
    for i, node in enumerate(path):
        if node in tried:
            accept[i] = tried[node].accept_prob
    # the recorded path as a chain's verdict: the walk's decisions, read along the path
    chain = Verdict(
        n_accepted=len(verdict.path),
        p_x=p_x,
        q_x=q_x,
        accept_prob=accept,
        dist=verdict.dist,
        samples=None if verdict.samples is None else verdict.samples[rows],
        u=None if u is None else u[torch.tensor(path, dtype=torch.long)],
        source=verdict.source,
    )
    # where each tried node's siblings came first: the updated target it was tried against
    trial_of = [tried.get(node) for node in path]
    drafted, added_record = round_decisions(
        settings,
        text,
        ids,
        p_path,
        q_path,
        chain,
        added,
        verification,
        p_primes=[(t.p_prime if t is not None and t.updated else None) for t in trial_of],
        fan=[len(tree.children(tree.parents[node])) for node in path],
    )
    return drafted, added_record, node_records(text, tree, p, verdict, u)


def node_records(
    text: Callable[[int], str],
    tree: TreeDraft,
    p: torch.Tensor,
    verdict: TreeVerdict,
    u: torch.Tensor | None,
) -> list[Node]:
    """Every node of the tree, breadth first, with its trial if it had one."""
    if not len(tree):
        return []
    parent_rows = torch.tensor([par + 1 for par in tree.parents])
    p_x = p[parent_rows, torch.tensor(tree.ids)].tolist()
    q_x = tree.q_x().tolist()
    u_l = u.tolist() if u is not None else [None] * len(tree)
    tried = {t.node: t for t in verdict.trials}
    on_path = set(verdict.path)
    nodes = []
    for j, x in enumerate(tree.ids):
        t = tried.get(j)
        status = "accepted" if j in on_path else "rejected" if t is not None else "untried"
        nodes.append(
            Node(
                id=x,
                text=text(x),
                parent=tree.parents[j],
                depth=tree.depths[j],
                q=q_x[j],
                p=p_x[j],
                status=status,
                trial=None if t is None else t.trial,
                p_prime=None if t is None else t.p_prime,
                accept_prob=None if t is None else t.accept_prob,
                u=u_l[j] if t is not None else None,
            )
        )
    return nodes
