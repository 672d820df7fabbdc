"""Speculative rounds on a drafted tree, and their records.

The engine (specviz.engine.Run) hands a run whose settings carry a tree (a fixed shape, or
a dynamic tree's node budget) to :func:`tree_rounds`. Each round: draft the tree depth by
depth (specviz.tree.draft_tree, or draft_budget_tree),
score every node with one target call, walk the verdict down from the root, add the resampled
or bonus token, then gather the accepted path in both caches. The round's record holds the
path view in ``drafted`` (what every positional reader uses) and every node in ``nodes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch

from specviz.compiled.policy import check_tree_path
from specviz.config import Settings
from specviz.drafters import ModelDrafter
from specviz.lm import CachedLM, tree_refusal
from specviz.pair import ModelPair
from specviz.record import round_decisions
from specviz.sampling import Verdict, draw, warp
from specviz.trace import SCHEMA, Added, Drafted, Node, Round
from specviz.tree import (
    ROOT,
    TreeDraft,
    TreeVerdict,
    draft_budget_tree,
    draft_tree,
    keep_path,
    target_rows,
    verify_tree,
    verify_tree_exact_match,
)

if TYPE_CHECKING:
    from specviz.engine import Run, Update


def check_tree_request(pair: ModelPair, settings: Settings) -> None:
    """Refuse (ValueError, one line) a tree this pair cannot run: on the compiled path, or on
    a model whose attention a custom mask would change."""
    if not settings.drafts_tree:
        return
    check_tree_path(pair.compile_backend)
    for role, m in (("target", pair.target), ("draft", pair.draft)):
        why = None if m is None else tree_refusal(m.model)
        if why:
            raise ValueError(f"a tree cannot run on this {role}: {why}")


@torch.inference_mode()
def tree_rounds(run: Run) -> Iterator[Update]:
    """The speculative rounds of a run whose settings carry a tree."""
    from specviz.engine import Update, clock

    s, pair, dev = run.settings, run.pair, run.device
    eos, pw, dw = pair.eos_ids, s.target_warp(), s.draft_warp()
    assert s.drafts_tree and pair.draft is not None
    max_depth = len(s.tree) if s.tree is not None else s.gamma
    target = run.target_lm = CachedLM(pair.target.model, pair.vocab_size, dev)
    lm = CachedLM(pair.draft.model, pair.vocab_size, dev)
    run.drafter = ModelDrafter(lm, dw, eos)
    gen = run._generator()
    run.trace.schema = SCHEMA  # a trace with tree rounds
    seq = list(run.prompt_ids)
    out = run.trace.token_ids
    t0 = clock(dev)
    reason = "stopped"
    try:
        while len(out) < s.max_new_tokens:
            # Never draft past the budget: a round emits at most depth + 1 tokens.
            depth = min(max_depth, s.max_new_tokens - len(out) - 1)
            ta = clock(dev)
            tree, stop = TreeDraft(greedy=dw.greedy), "budget"
            if depth > 0 and s.tree_budget is not None:
                tree, stop = draft_budget_tree(lm, seq, s.tree_budget, depth, dw, eos, gen)
            elif depth > 0 and s.tree is not None:
                tree = draft_tree(lm, seq, s.tree, depth, dw, eos, gen)
                stop = "eos" if max(tree.depths) < depth else "gamma"
            if stop == "gamma" and depth < max_depth:
                stop = "budget"
            tb = clock(dev)
            logits, _ = target_rows(target, seq, tree)
            p = warp(logits, pw)  # [n + 1, V]
            n = len(tree)
            u = None
            if s.verification == "exact-match":
                verdict = verify_tree_exact_match(p, tree, draw(p, gen, pw.greedy), eos)
            else:
                if not pw.greedy and n:
                    u = torch.rand(n, generator=gen, device=dev)
                verdict = verify_tree(p, tree, u, eos, s.rule)
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
            drafted, added_record, nodes = tree_decisions(
                s, pair.token_text, tree, p, verdict, u, added
            )
            rnd = Round(
                index=len(run.trace.rounds),
                start=len(out),
                gamma=s.gamma,
                drafted=drafted,
                added=added_record,
                draft_ms=(tb - ta) * 1e3,
                verify_ms=(tc - tb) * 1e3,
                t_s=clock(dev) - t0,
                tree=None if s.tree is None else list(s.tree),
                nodes=nodes,
                stop=stop,
            )
            run._emit(new, rnd.t_s, rnd)
            yield Update(rnd, new, len(out), rnd.t_s)
            if added is None or added in eos:
                reason = "eos"
                break
        else:
            reason = "max_new_tokens"
    finally:
        run._finish(reason, t0)


def path_view(tree: TreeDraft, verdict: TreeVerdict) -> list[int]:
    """The nodes of the path view: the accepted path; where every child was rejected, the
    first child tried, then its first descendants (discarded, as a chain's drafts after a
    rejection)."""
    view = list(verdict.path)
    if verdict.resampled:
        j = tree.children(verdict.stop)[0]
        view.append(j)
        while kids := tree.children(j):
            j = kids[0]
            view.append(j)
    return view


def tree_decisions(
    settings: Settings,
    text: Callable[[int], str],
    tree: TreeDraft,
    p: torch.Tensor,  # [n + 1, V]
    verdict: TreeVerdict,
    u: torch.Tensor | None,  # [n]
    added: int | None,
) -> tuple[list[Drafted], Added | None, list[Node]]:
    """The round's records: the path view's decisions (built as a chain's, by
    specviz.record), the added token, and every node with its trial."""
    view = path_view(tree, verdict)
    rows = [tree.parents[v] + 1 for v in view] + [(view[-1] if view else ROOT) + 1]
    p_view = p[rows]  # [k + 1, V]
    q_view = torch.stack([tree.q(v) for v in view]) if view else torch.empty(0, p.shape[-1])
    ids = [tree.ids[v] for v in view]
    idx = torch.arange(len(view))
    drafts = torch.tensor(ids, dtype=torch.long)
    p_x, q_x = p_view[idx, drafts], q_view[idx, drafts]
    tried = {t.node: t for t in verdict.trials}
    p_prime = torch.tensor(
        [tried[v].p_prime if v in tried else float(p_x[i]) for i, v in enumerate(view)]
    )
    samples = None
    if verdict.samples is not None:
        samples = verdict.samples[rows]
    chain = Verdict(
        len(verdict.path),
        p_x,
        q_x,
        p_prime.to(q_x.dtype) / q_x,
        verdict.dist,
        verdict.resampled,
        samples,
    )
    u_view = None if u is None else u[torch.tensor(view, dtype=torch.long)]
    drafted, added_record = round_decisions(
        settings, text, ids, p_view, q_view, chain, u_view, added
    )
    return drafted, added_record, tree_nodes(text, tree, p, verdict, u)


def tree_nodes(
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
                u=u_l[j] if t is not None and verdict.samples is None else None,
            )
        )
    return nodes
