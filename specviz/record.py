"""A round's decisions: the tensors of one speculative round turned into the trace's plain
values (specviz.trace), with one transfer per tensor. A chain's round (specviz.rounds) calls
:func:`round_decisions` after its target call, a tree's :func:`tree_decisions` (its recorded
path as a chain's, and every node); nothing here draws a random number or calls a model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from specviz.config import Settings
from specviz.sampling import match_prob, overlap
from specviz.trace import Added, Drafted, Node
from specviz.tree import ROOT, TreeDraft
from specviz.verify.base import Verification, normalised, total_variation
from specviz.verify.tree_walk import TreeVerdict
from specviz.verify.verdict import Verdict


def round_decisions(
    settings: Settings,
    text: Callable[[int], str],
    draft_ids: list[int],
    p: torch.Tensor,  # [k+1, V]
    q: torch.Tensor,  # [k, V]
    verdict: Verdict,
    added: int | None,
    verification: Verification,
    # a tree's recorded path: per position, p'(x) where siblings were tried before it (else
    # None), and the children of the node it was tried at (the out formula's b)
    p_primes: list[float | None] | None = None,
    fan: list[int] | None = None,
) -> tuple[list[Drafted], Added | None]:
    """The round's decisions: a Drafted per drafted token, and the token the target added
    (None when the round ended on an accepted EOS). The engine builds the Round around them
    with its index, position and timings.

    A "full" trace also records, per drafted position, the overlap sum_x min(p, q), exact
    match's sum_x p q and the top tokens, and per verified position the verification's computed
    output distribution out (the verification's out, or out_siblings at a tree's node of b
    children) as TV(out, p), the mass it keeps of q, the probability that it rejects there
    (reject_prob, or at a node of b children reject_prob_siblings: all b rejected, p'
    updated between them),
    and out beside p and q in the top tokens (computed in float64 from the rows at hand:
    O(V) per position, no model call); a "minimal" one only the decisions."""
    k, n, full = len(draft_ids), verdict.n_accepted, settings.trace_level == "full"
    p_x, q_x = verdict.p_x.tolist(), verdict.q_x.tolist()
    accept = verdict.accept_prob.tolist()
    u_list = verdict.u.tolist() if verdict.u is not None else [None] * k
    y = verdict.samples[:k].tolist() if verdict.samples is not None else [None] * k
    overlaps, matches = [None] * k, [None] * k
    out_tvs: list[float | None] = [None] * k
    kept: list[float | None] = [None] * k
    rejects: list[float | None] = [None] * k
    tops: list[list[dict[str, Any]]] = [[] for _ in range(k)]
    if full and k:
        # every figure below is a sum or a test over the tokens that p or q gives mass in some
        # drafted row, so it is computed on those columns alone (S of them: tens at the
        # defaults' top-p, of 49,152): every verification's out is q a + c f with f p or the
        # residual, so it has no mass elsewhere either, and the rows' sums and every
        # verification's test (typical's entropy, top-k-match's k-th largest p) come out as over
        # the whole vocabulary, in a fraction of the work
        score = torch.maximum(p[:k], q)  # [k, V]
        cols = _support(score)  # [S] ascending
        pk, qk = p[:k], q
        if cols is not None:
            pk, qk, score = pk[:, cols], qk[:, cols], score[:, cols]
        overlaps, matches = torch.stack([overlap(pk, qk), match_prob(pk, qk)]).tolist()
        m = min(n + 1, k)  # the verified positions
        pc, qc = pk[:m], qk[:m]
        out = verification.out(pc, qc)  # [m, S] float64
        reject = verification.reject_prob(pc, qc)  # [m] float64
        for i, b in enumerate((fan or [])[:m]):
            if b > 1:  # a node of b children: the siblings' formulas, over p'
                out[i] = verification.out_siblings(pc[i], qc[i], b)
                reject[i] = verification.reject_prob_siblings(pc[i], qc[i], b)
        out_tvs[:m] = total_variation(out, normalised(pc)).tolist()
        kept[:m] = verification.kept_mass(pc, qc).tolist()
        rejects[:m] = reject.tolist()
        if not verification.lossless:  # out may put mass where neither p nor q leads
            score[:m] = torch.maximum(score[:m], out.to(score.dtype))
        tops = tops_of(score, pk, qk, draft_ids, settings.top_n, "q", text, ("out", out), cols)
    drafted = []
    for i, x in enumerate(draft_ids):
        status = "accepted" if i < n else "rejected" if i == n else "discarded"
        sample = y[i] if i <= n else None
        drafted.append(
            Drafted(
                id=x,
                text=text(x),
                p=p_x[i],
                q=q_x[i],
                accept_prob=accept[i],
                u=u_list[i] if i <= n else None,
                status=status,
                overlap=overlaps[i],
                top=tops[i],
                match_prob=matches[i],
                target_sample=sample,
                target_text=None if sample is None else text(sample),
                out_tv=out_tvs[i],
                kept_mass=kept[i],
                reject_prob=rejects[i],
                p_prime=None if p_primes is None or i > n else p_primes[i],
            )
        )
    if added is None:
        return drafted, None
    source = (verdict.source or verification.fallback_source) if verdict.resampled else "bonus"
    return drafted, _added(settings, text, p[n], verdict, added, source)


def _added(
    settings: Settings,
    text: Callable[[int], str],
    p_row: torch.Tensor,
    verdict: Verdict,
    x: int,
    source: str,
) -> Added:
    dist = verdict.dist
    top = []
    if settings.trace_level == "full":
        score = torch.maximum(p_row, dist)[None]
        rows = score, p_row[None], dist[None]
        cols = _support(score)
        if cols is not None:
            rows = tuple(row[:, cols] for row in rows)
        top = tops_of(
            *rows,
            [x],
            settings.top_n,
            "residual",
            text,
            cols=cols,
        )[0]
    return Added(
        id=x,
        text=text(x),
        status="resampled" if verdict.resampled else "bonus",
        p=float(p_row[x]),
        prob=float(dist[x]),
        top=top,
        source=source,
    )


def _support(score: torch.Tensor) -> torch.Tensor | None:
    """The token ids (ascending) of the columns of score [m, V] with mass in some row, or
    None when every column has (no top-k or top-p cut): the rows are then read as they are."""
    cols = score.amax(0).nonzero().squeeze(1)
    return cols if cols.numel() < score.shape[-1] else None


# Up to this many columns a top list is sorted (equal scores by lower id); beyond, topk.
SORTED_COLUMNS = 4096


def tops_of(
    score: torch.Tensor,  # [m, S] what orders the list
    first: torch.Tensor,  # [m, S] p
    second: torch.Tensor,  # [m, S] q or the residual
    chosen: list[int],  # [m] the token of each row, always listed
    top_n: int,
    second_key: str,
    text: Callable[[int], str],
    # (key, [m', S] values) for the first m' rows
    third: tuple[str, torch.Tensor] | None = None,
    # [S] the token ids of the columns, ascending (a token outside them has probability 0 in
    # every row); None: the columns are the vocabulary
    cols: torch.Tensor | None = None,
) -> list[list[dict[str, Any]]]:
    """Per row, the top_n tokens by score with their two probabilities (three, in the rows
    that third covers), and the chosen token after them when it is not among them."""
    n = min(top_n, score.shape[-1])
    if score.shape[-1] > SORTED_COLUMNS:  # the vocabulary: topk, not a sort of every row
        at = torch.topk(score, n, dim=-1).indices  # [m, n] columns
    else:  # a few columns: sorted, equal scores (16-bit drafts give many) by lower id
        at = torch.sort(score, dim=-1, descending=True, stable=True).indices[:, :n]
    chosen_ids = torch.tensor(chosen, dtype=torch.long, device=at.device)
    listed = None  # [m] whether each chosen token is among the columns
    if cols is None:
        ids, chosen_at = at, chosen_ids
    else:
        ids = cols[at]
        chosen_at = torch.searchsorted(cols, chosen_ids).clamp(max=cols.numel() - 1)
        listed = cols[chosen_at] == chosen_ids
    at = torch.cat([at, chosen_at[:, None]], dim=1)
    ids = torch.cat([ids, chosen_ids[:, None]], dim=1)
    tables = [first, second] + ([third[1]] if third is not None else [])
    values = []
    for table in tables:
        got = table.gather(1, at[: table.shape[0]])
        if listed is not None:  # a chosen token outside the columns has no mass
            zero = torch.zeros((), dtype=got.dtype)
            got[:, -1] = torch.where(listed[: got.shape[0]], got[:, -1], zero)
        values.append(got.tolist())
    a, b, ids_l = values[0], values[1], ids.tolist()
    third_vals = values[2] if third is not None else []
    rows = []
    for r, row in enumerate(ids_l):
        chosen_listed = row[-1] in row[:-1]
        entries = []
        for j, t in enumerate(row):
            # tokens with no mass under either distribution are noise in a top list
            if not (a[r][j] > 0 or b[r][j] > 0 or t == row[-1]) or (
                chosen_listed and j == len(row) - 1
            ):
                continue
            entry = {"id": t, "text": text(t), "p": a[r][j], second_key: b[r][j]}
            if r < len(third_vals):
                entry[third[0]] = third_vals[r][j]  # type: ignore[index]
            entries.append(entry)
        rows.append(entries)
    return rows


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
