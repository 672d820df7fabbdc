"""Round narration: numbered plain sentences telling what one round did, from the trace's
numbers only (no model call).

In order: what the draft proposed and how long it took (draft_ms); where and why drafting
stopped, unless it drafted all it was asked (Round.stop); that one target call scored
k + 1 positions and how long it took (verify_ms); each decision with u, p, q and
min(1, p/q) (under exact match: the target's own sample against the draft; under a lossy
verification: its test on p); the drafts discarded after a rejection; where the added
token came from (the residual norm(max(0, p - q)) after a rejection, the target's sample
under exact match or a lossy verification, or p after a full accept); and how many tokens
the round emitted. A tree round is told depth by depth: the siblings' trials in draw
order, each against the updated target p'. ``narration_html`` puts the sentences in
templates/narration.html.j2, which escapes every one. No gradio.
"""

from __future__ import annotations

from specviz.config import Settings
from specviz.trace import Drafted, Node, Round, round_number
from specviz.verify import verification_for
from specviz.verify.words import pq, source_text
from specviz.views.markup import _pair_fmt, match_verdict, num, stop_sentence
from specviz.views.templating import macro
from specviz.views.tree_view import ordinal, tree_name


def _tokens(drafted: list[Drafted]) -> str:
    return ", ".join(repr(d.text) for d in drafted)


def proposal(rnd: Round) -> str:
    """What the draft proposed, and how long drafting took."""
    k = len(rnd.drafted)
    if rnd.stop == "prompt":  # the target's call over the prompt alone (specviz.rounds)
        return f"The draft made no call this round (gamma {rnd.gamma} from the next one on)."
    took = f"in {rnd.draft_ms:.1f} ms"
    if rnd.index == 0:
        took += " (its first call also read the prompt)"
    if k == 0:
        return f"The drafter proposed no tokens this round (gamma {rnd.gamma}), {took}."
    fewer = f" (gamma was {rnd.gamma}; it proposed fewer)" if k < rnd.gamma else ""
    s = "s" if k > 1 else ""
    return f"The draft proposed {k} token{s}{fewer}, {took}: {_tokens(rnd.drafted)}."


def scoring(rnd: Round) -> str:
    """The one target call: k + 1 positions scored."""
    k = len(rnd.drafted)
    what = f"the {k} draft{'s' if k > 1 else ''} and the position after them" if k else "one"
    n = k + 1
    prompt = " (it also read the prompt)" if rnd.index == 0 else ""
    return (
        f"One target call scored {n} position{'s' if n > 1 else ''} ({what}) "
        f"in {rnd.verify_ms:.1f} ms{prompt}."
    )


def decision(i: int, d: Drafted, settings: Settings | None = None) -> str:
    """The verification's decision on draft i (1-based), with its numbers; settings are the
    trace's (None: the rejection rule or exact match, told apart by the record)."""
    head = f"Draft {i} {d.text!r}: p = {pq(d.p)}, q = {pq(d.q)}"
    if settings is not None and not verification_for(settings).lossless:
        return f"{head}; {verification_for(settings).keep_text(d)}."
    if d.target_sample is not None:
        return f"{head}; {match_verdict(d)}."
    if d.u is None:
        same = "equals" if d.status == "accepted" else "differs from"
        return f"{head}; greedy, no u drawn: the draft's argmax {same} the target's, {d.status}."
    su, sa = _pair_fmt(d.u, d.accept_prob)
    sign = "<" if d.status == "accepted" else "≥"
    return f"{head}, min(1, p/q) = {sa}; u = {su} {sign} {sa}, so it was {d.status}."


def discarded(rnd: Round) -> str | None:
    """The drafts after a rejection, never tested."""
    dropped = [(i, d) for i, d in enumerate(rnd.drafted, 1) if d.status == "discarded"]
    if not dropped:
        return None
    first, last = dropped[0][0], dropped[-1][0]
    which = f"Draft {first} was" if first == last else f"Drafts {first} to {last} were"
    return (
        f"{which} discarded without a test ({_tokens([d for _, d in dropped])}): "
        "they came after the rejection."
    )


def addition(rnd: Round, lossy: str = "") -> str:
    """Where the added token came from (lossy: the label of the lossy verification that
    decided)."""
    a, k = rnd.added, len(rnd.drafted)
    if a is None:
        return "The last accepted draft was the end of the sequence, so no token was added."
    if a.status == "resampled" and lossy:
        return (
            f"{lossy} did not keep draft {rnd.n_accepted + 1}, so the round emits the "
            f"target's own sample {a.text!r}, drawn from p in the same target call "
            f"(p = {num(a.p)})."
        )
    if a.status == "resampled" and rnd.exact_match:
        return (
            f"Draft {rnd.n_accepted + 1} did not match, so the round kept the target's own "
            f"sample {a.text!r}, drawn from p in the same target call (p = {num(a.p)})."
        )
    if a.status == "resampled":
        return (
            f"Draft {rnd.n_accepted + 1} was rejected, so the same target call drew {a.text!r} "
            f"from {source_text(a.source or 'residual')}, where it had "
            f"probability {num(a.prob)} (p = {num(a.p)})."
        )
    if k == 0:
        return f"With no drafts, the target call drew {a.text!r} from p (p = {num(a.p)})."
    every = "The draft was" if k == 1 else f"All {k} drafts were"
    return (
        f"{every} accepted, so the same target call drew the bonus token "
        f"{a.text!r} from p at position {k + 1} (p = {num(a.p)})."
    )


def _tree_trial(n: Node, matching: bool, step: str = "p′ becomes norm(max(0, p′ − q))") -> str:
    """One sibling's trial, with its numbers."""
    head = f"{ordinal(n.trial or 0)} {n.text!r}: q = {pq(n.q)}"
    if matching:
        same = "equals" if n.status == "accepted" else "differs from"
        return f"{head}, p = {pq(n.p)}; {same} the target's sample, {n.status}"
    pp = num(n.p_prime if n.p_prime is not None else n.p)
    if n.u is None:
        return f"{head}, p′ = {pp}; greedy, no u drawn, {n.status}"
    su, sa = _pair_fmt(n.u, n.accept_prob if n.accept_prob is not None else 0.0)
    sign = "<" if n.status == "accepted" else "≥"
    step = "" if n.status == "accepted" else f", and {step}"
    return f"{head}, p′ = {pp}; u = {su} {sign} min(1, p′/q) = {sa}, {n.status}{step}"


def narrate_tree(rnd: Round, settings: Settings | None = None) -> list[str]:
    """A tree round as plain sentences: the tree drafted depth by depth, where and why it
    stopped growing, the one target call over every node, the siblings' trials in order at
    each depth the walk reached, the added token and the tokens emitted."""
    nodes = rnd.nodes or []
    depths = sorted({n.depth for n in nodes})
    shape = tree_name(rnd)
    per_depth = "; ".join(
        f"depth {d}: " + ", ".join(repr(n.text) for n in nodes if n.depth == d) for d in depths
    )
    lines = [
        f"The draft proposed a {shape} of {len(nodes)} nodes in {len(depths)} "
        f"call{'s' if len(depths) != 1 else ''} (one per depth), in {rnd.draft_ms:.1f} ms: "
        f"{per_depth}.",
    ]
    if rnd.stop not in (None, "gamma"):  # the plain case goes unsaid
        lines.append(stop_sentence(rnd, settings) or "")
    lines += [
        f"One target call scored all {len(nodes)} nodes and the position before them "
        f"({len(nodes) + 1} positions, each node seeing the prefix and its ancestors) "
        f"in {rnd.verify_ms:.1f} ms.",
    ]
    matching = rnd.exact_match
    verification = verification_for(
        settings or Settings(verification="exact-match" if matching else "rejection")
    )
    parent = -1
    for d in depths:
        group = [j for j, n in enumerate(nodes) if n.depth == d and n.parent == parent]
        tried = sorted(
            (j for j in group if nodes[j].trial is not None), key=lambda j: nodes[j].trial or 0
        )
        if not tried:
            break
        under = "the context" if parent < 0 else f"{nodes[parent].text!r}"
        untried = len(group) - len(tried)
        rest = (
            f"; {untried} later sibling{'s' if untried > 1 else ''} never tried" if untried else ""
        )
        lines.append(
            f"Depth {d}, under {under}, the siblings in draw order: "
            + "; ".join(_tree_trial(nodes[j], matching, verification.sibling_step) for j in tried)
            + rest
            + "."
        )
        kept = next((j for j in tried if nodes[j].status == "accepted"), None)
        if kept is None:
            break
        parent = kept
    a = rnd.added
    if a is None:
        lines.append("The accepted path ended with the end of the sequence: no token was added.")
    elif a.status == "resampled":
        source = source_text(a.source or ("sample" if matching else "siblings"))
        lines.append(
            f"Every child there was rejected, so the same target call added {a.text!r}, "
            f"drawn from {source} (probability {num(a.prob)}; p = {num(a.p)})."
        )
    else:
        lines.append(
            f"The path reached a leaf, so the same target call added the bonus token "
            f"{a.text!r} from p at the leaf's own row (p = {num(a.p)})."
        )
    n = rnd.emitted
    lines.append(f"The round emitted {n} token{'s' if n != 1 else ''} for one target call.")
    return lines


def narrate_round(rnd: Round, settings: Settings | None = None) -> list[str]:
    """The round as plain sentences, in order (unnumbered; the HTML numbers them); settings
    are the trace's, which name the verification."""
    if rnd.nodes:
        return narrate_tree(rnd, settings)
    verification = verification_for(settings) if settings is not None else None
    lossy = (
        verification.label
        if verification is not None and not verification.lossless and not verification.entry.wrong
        else ""
    )
    lines = [proposal(rnd)]
    if rnd.stop not in (None, "gamma"):  # the plain case goes unsaid
        lines.append(stop_sentence(rnd, settings) or "")
    lines.append(scoring(rnd))
    lines += [decision(i, d, settings) for i, d in enumerate(rnd.verified, 1)]
    extra = discarded(rnd)
    if extra:
        lines.append(extra)
    lines.append(addition(rnd, lossy))
    n = rnd.emitted
    lines.append(f"The round emitted {n} token{'s' if n != 1 else ''} for one target call.")
    return lines


def narration_html(rnd: Round, settings: Settings | None = None) -> str:
    """The numbered sentences as an escaped ordered list."""
    head = f"Round {round_number(rnd.index)}"
    return str(macro("narration.html.j2", "narration")(head, narrate_round(rnd, settings)))
