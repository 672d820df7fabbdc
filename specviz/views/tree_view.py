"""A tree round drawn as a tree, and one node's decision: pure HTML/SVG and a Plotly figure
from the trace's numbers only (no gradio, no model call).

The tree is laid out left to right: the context (the round's root) at depth 0, each depth of
drafted nodes in a column, siblings top to bottom in draw order, and the token the target
added hung under the node it follows (the last accepted node, or the root). Each node is a
box holding its token text (escaped, whitespace made visible), coloured by its status:

    accepted    on the accepted path (green, and the path is drawn bold)
    rejected    a sibling the verification tried and rejected (red, struck through)
    untried     never tried: its parent was not reached, or a sibling won first (grey, dashed)
    resampled   the token drawn from the final p' after every child was rejected (orange)
    bonus       the token drawn from p after a fully accepted path (blue)

A tried node shows its turn among its siblings (1st, 2nd, ...). Every node carries
``data-round`` and ``data-node`` (its index in ``Round.nodes``), the added token
``data-round`` and ``data-pos``, so the page's script can send a click to the inspector.
The HTML and SVG come from templates/tree.html.j2 (specviz.views.templating), which escapes
every value.

:func:`node_verdict_html` and :func:`node_figure` are the inspector's view of one node: p
and q of its token at its parent, the updated target p' at its trial, u against
min(1, p'/q), and the verdict. :func:`tree_counts` gives the round table's counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
from markupsafe import Markup

from specviz.metrics import expected_tokens_per_round
from specviz.trace import Node, Round, Trace, round_number
from specviz.verify.words import pq
from specviz.views.figures import lay_out, plain
from specviz.views.markup import _pair_fmt, num
from specviz.views.palette import COLORS, show_whitespace
from specviz.views.style import figure
from specviz.views.templating import macro

STATUS_WORDS = {
    "accepted": "accepted path",
    "rejected": "rejected sibling",
    "untried": "never tried",
    "resampled": "resampled from p′",
    "bonus": "bonus from p",
}
UNTRIED_COLOR = COLORS["discarded"]
ORDINALS = ("1st", "2nd", "3rd")

# Geometry of the drawing, in SVG user units (pixels at scale 1).
BOX_W, BOX_H, COL_GAP, ROW_H, PAD = 96, 26, 44, 40, 8
MAX_CHARS = 11
NO_TREE = "No tree round yet: set a tree shape (e.g. 2,2) and press Run or Step."


def ordinal(trial: int) -> str:
    """A sibling's turn, from 0, as the page says it: 1st, 2nd, 3rd, 4th, ..."""
    return ORDINALS[trial] if trial < len(ORDINALS) else f"{trial + 1}th"


def tree_rounds(trace: Trace | None) -> list[Round]:
    """The rounds of a trace that drafted a tree with at least one node (a round the token
    budget cut to depth 0 drafted none)."""
    if trace is None:
        return []
    return [r for r in trace.rounds if r.nodes]


def accepted_depth(rnd: Round) -> int:
    """How deep the round's accepted path goes (its accepted nodes)."""
    return sum(n.status == "accepted" for n in rnd.nodes or [])


def tree_name(rnd: Round) -> str:
    """The round's tree as the page names it: its shape ("tree 2,2"), or for a dynamic tree
    (a node budget, no fixed shape) "dynamic tree"."""
    if rnd.tree:
        return "tree " + ",".join(str(b) for b in rnd.tree)
    return "dynamic tree"


def tree_counts(rnd: Round) -> str:
    """The round table's counts for a tree round: accepted depth of the tree's depth, node
    count, and trials (the nodes the verification tried)."""
    nodes = rnd.nodes or []
    depth = max((n.depth for n in nodes), default=0)
    return f"depth {accepted_depth(rnd)}/{depth} · {len(nodes)} nodes · {rnd.trials} trials"


@dataclass
class _Box:
    """One box of the drawing: a node (index into Round.nodes), the added token (-2), or the
    root (-1)."""

    key: int
    depth: int
    status: str
    text: str
    children: list[_Box] = field(default_factory=list)
    y: float = 0.0


def _build(rnd: Round) -> _Box:
    """The drawing's tree: the root, the nodes under their parents in draw order, and the
    added token under the last accepted node (or the root)."""
    nodes = rnd.nodes or []
    root = _Box(-1, 0, "root", "context")
    boxes = [_Box(j, n.depth, n.status, n.text) for j, n in enumerate(nodes)]
    for j, n in enumerate(nodes):
        (root if n.parent < 0 else boxes[n.parent]).children.append(boxes[j])
    if rnd.added is not None:
        last = max(
            (j for j, n in enumerate(nodes) if n.status == "accepted"),
            key=lambda j: nodes[j].depth,
            default=-1,
        )
        under = root if last < 0 else boxes[last]
        under.children.append(_Box(-2, under.depth + 1, rnd.added.status, rnd.added.text))
    return root


def _place(box: _Box, next_row: list[int]) -> None:
    """Leaves take consecutive rows; a parent sits at the middle of its children."""
    if not box.children:
        box.y = float(next_row[0])
        next_row[0] += 1
        return
    for child in box.children:
        _place(child, next_row)
    box.y = (box.children[0].y + box.children[-1].y) / 2


def _walk(box: _Box) -> list[_Box]:
    out = [box]
    for child in box.children:
        out += _walk(child)
    return out


def _short(text: str) -> str:
    shown = show_whitespace(text.replace("\r", ""))
    return shown if len(shown) <= MAX_CHARS else shown[: MAX_CHARS - 1] + "…"


def _color(status: str) -> str:
    if status == "untried":
        return UNTRIED_COLOR
    return COLORS.get(status, "#57606a")


def _xy(box: _Box) -> tuple[float, float]:
    return PAD + box.depth * (BOX_W + COL_GAP), PAD + box.y * ROW_H


def _on_path(box: _Box) -> bool:
    return box.status in ("accepted", "root", "bonus", "resampled")


def _html(name: str, *args: object) -> str:
    """The page's HTML from a macro of templates/tree.html.j2."""
    return str(macro("tree.html.j2", name)(*args))


def _edge(parent: _Box, child: _Box) -> dict[str, Any]:
    """The curve from a box to its child, for the template's edge."""
    x0, y0 = _xy(parent)
    x1, y1 = _xy(child)
    x0, y0, y1 = x0 + BOX_W, y0 + BOX_H / 2, y1 + BOX_H / 2
    mid = (x0 + x1) / 2
    bold = _on_path(child)
    return {
        "d": f"M{x0:.0f},{y0:.0f} C{mid:.0f},{y0:.0f} {mid:.0f},{y1:.0f} {x1:.0f},{y1:.0f}",
        "color": _color(child.status) if bold else "#afb8c1",
        "width": 3 if bold else 1.2,
        "dashed": child.status == "untried",
        "bold": bold,
    }


def _title(rnd: Round, box: _Box) -> str:
    """The node's tooltip: its numbers."""
    if box.key == -1:
        return "the context: the prompt and the tokens so far"
    if box.key == -2 and rnd.added is not None:
        return f"{rnd.added.text!r}: {STATUS_WORDS[box.status]}, p = {num(rnd.added.p)}"
    n = (rnd.nodes or [])[box.key]
    text = f"{n.text!r}: {STATUS_WORDS[n.status]}; p = {pq(n.p)}, q = {pq(n.q)}"
    if n.p_prime is not None:
        text += f", p′ = {num(n.p_prime)}"
    if n.u is not None:
        text += f", u = {n.u:.2f}"
    return text


def _node(rnd: Round, box: _Box, pos: int) -> dict[str, Any]:
    """One box of the drawing, for the template's node."""
    x, y = _xy(box)
    color = "#57606a" if box.key == -1 else _color(box.status)
    bold = _on_path(box) and box.key != -1
    corner, corner_color = None, "#57606a"
    if box.key >= 0:
        n = (rnd.nodes or [])[box.key]
        if n.trial is not None:
            corner = f"{ordinal(n.trial)} try"
    elif box.key == -2:
        mark = "↻" if box.status == "resampled" else "+"
        corner, corner_color = f"{mark} {box.status}", color
    return {
        "kind": "node" if box.key >= 0 else "added" if box.key == -2 else "root",
        "status": box.status,
        "round": rnd.index,
        "key": box.key,
        "pos": pos,
        "title": _title(rnd, box),
        "x": x,
        "y": y,
        "w": BOX_W,
        "h": BOX_H,
        "fill": "#ffffff" if box.status in ("untried", "root") else color + "1f",
        "color": color,
        "width": 3 if bold else 1.2,
        "dashed": box.status == "untried",
        "weight": "700" if bold else "400",
        "struck": box.status == "rejected",
        "label": _short(box.text),
        "corner": corner,
        "corner_color": corner_color,
    }


def legend_html() -> str:
    """The tree's colour key."""
    keys = [
        (w, _color(s), s == "untried", s in ("accepted", "bonus", "resampled"))
        for s, w in STATUS_WORDS.items()
    ]
    return _html("legend", keys)


def tree_svg(rnd: Round) -> str:
    """The round's tree as an SVG element."""
    root = _build(rnd)
    _place(root, [0])
    boxes = _walk(root)
    rows = max(1, int(max(b.y for b in boxes)) + 1)
    depth = max(b.depth for b in boxes)
    width = 2 * PAD + (depth + 1) * BOX_W + depth * COL_GAP
    height = 2 * PAD + (rows - 1) * ROW_H + BOX_H + 6
    edges = [_edge(b, child) for b in boxes for child in b.children]
    pos = rnd.start + rnd.n_accepted
    nodes = [_node(rnd, b, pos) for b in boxes]
    label = f"round {round_number(rnd.index)} tree"
    return _html("svg", width, height, label, edges, nodes)


def caption(rnd: Round) -> str:
    """One line over the drawing: the shape and what the round kept."""
    emitted = rnd.emitted
    return (
        f"Round {round_number(rnd.index)}, {tree_name(rnd)}: {tree_counts(rnd)}; one target call "
        f"scored all {len(rnd.nodes or [])} nodes and the round kept {emitted} "
        f"token{'s' if emitted != 1 else ''}. Click a node to inspect its trial."
    )


def tree_html(rnd: Round | None) -> str:
    """The round's tree with its caption and legend; a hint when there is no tree round."""
    if rnd is None or not rnd.nodes:
        return _html("empty", NO_TREE)
    return _html("tree", caption(rnd), Markup(legend_html()), Markup(tree_svg(rnd)))


def trace_tree_html(trace: Trace | None, round_index: int | None = None) -> str:
    """The tree of the chosen round (the trace's 0-based index) when it drafted a tree,
    else of the last round that drafted the full depth (the token budget cuts the last
    rounds' trees), else of the last tree round; the hint when the trace has none."""
    rounds = tree_rounds(trace)
    if round_index is not None and trace is not None and 0 <= round_index < len(trace.rounds):
        chosen = trace.rounds[round_index]
        if chosen.nodes:
            return tree_html(chosen)
    return tree_html(last_full(rounds))


def last_full(rounds: list[Round]) -> Round | None:
    """The last of these tree rounds that drafted as deep as any of them, else None."""
    deepest = max((n.depth for r in rounds for n in r.nodes or []), default=0)
    full = [r for r in rounds if any(n.depth == deepest for n in r.nodes or [])]
    return full[-1] if full else None


# --- one node in the inspector ---------------------------------------------------------


def node_at(trace: Trace | None, round_index: int, node: int) -> tuple[Round, Node]:
    """The round and node a click names; ValueError when the trace has no such node."""
    if trace is None or not 0 <= round_index < len(trace.rounds):
        raise ValueError(f"round {round_index + 1} does not exist in this run")
    rnd = trace.rounds[round_index]
    if rnd.nodes is None or not 0 <= node < len(rnd.nodes):
        raise ValueError(f"round {round_number(round_index)} has no tree node {node}")
    return rnd, rnd.nodes[node]


def siblings(rnd: Round, node: Node) -> list[Node]:
    """The node's siblings (itself included), in draw order."""
    return [n for n in rnd.nodes or [] if n.parent == node.parent and n.depth == node.depth]


def node_verdict(rnd: Round, node: Node) -> str:
    """One sentence: why the verification accepted or rejected this node, or why it was not
    tried."""
    if node.trial is None:
        return (
            "never tried: its parent was not on the accepted path, or an earlier sibling was "
            "accepted first, so the verification never looked at it"
        )
    turn = f"tried {ordinal(node.trial)} among its siblings"
    if node.trial == 0:
        updated = "p′ = p at the first trial"
    else:
        s = "s" if node.trial > 1 else ""
        updated = (
            f"p′ is p after {node.trial} earlier rejection{s}, each setting "
            "p′ = norm(max(0, p′ − q))"
        )
    if node.u is None:
        if rnd.exact_match:
            return f"{node.status} ({turn}): exact match keeps a child equal to the target's sample"
        same = "is" if node.status == "accepted" else "is not"
        return f"{node.status} ({turn}; greedy, no u drawn): it {same} the target's argmax"
    a = node.accept_prob if node.accept_prob is not None else 0.0
    su, sa = _pair_fmt(node.u, a)
    sign = "<" if node.status == "accepted" else "≥"
    return f"{node.status} ({turn}): u = {su} {sign} min(1, p′/q) = {sa}; {updated}"


def node_verdict_html(rnd: Round, node: Node) -> str:
    """The inspector's lines for one node: where it is, its numbers, the verdict and its
    siblings' trials in order; escaped."""
    pos = rnd.start + node.depth - 1
    head = (
        f"round {round_number(rnd.index)}, tree node at depth {node.depth} "
        f"(output position {pos}): {node.text!r}"
    )
    nums = f"p = {pq(node.p)} (the target at its parent), q = {pq(node.q)}"
    if node.p_prime is not None:
        nums += f", p′ = {num(node.p_prime)} (the updated target at its trial)"
    if node.accept_prob is not None:
        nums += f", min(1, p′/q) = {num(node.accept_prob)}"
    if node.u is not None:
        nums += f", u = {node.u:.3f}"
    order = [
        f"{ordinal(s.trial)}: {s.text!r} {s.status}"
        for s in siblings(rnd, node)
        if s.trial is not None
    ]
    lines = [nums, node_verdict(rnd, node)]
    if order:
        lines.append("its siblings' trials in order: " + "; ".join(order))
    return str(macro("markup.html.j2", "verdict")(head, lines, "sv-verdict sv-node-verdict"))


def node_figure(rnd: Round, node: Node) -> go.Figure:
    """p, q and p′ of the node's token as bars, with min(1, p′/q) and u beside them."""
    names = ["p (at parent)", "q (draft)", "p′ (at its trial)", "min(1, p′/q)"]
    values = [node.p, node.q, node.p_prime, node.accept_prob]
    colors = [COLORS["p"], COLORS["q"], COLORS["residual"], COLORS["accepted"]]
    fig = figure()
    fig.add_bar(
        x=names,
        y=[value if value is not None else 0.0 for value in values],
        marker_color=colors,
        text=[num(value) if value is not None else "not tried" for value in values],
        textposition="outside",
        showlegend=False,
    )
    if node.u is not None:
        fig.add_scatter(
            x=[names[-1]],
            y=[node.u],
            mode="markers+text",
            marker={
                "color": COLORS["u"],
                "size": 14,
                "symbol": "line-ew-open",
                "line": {"width": 4},
            },
            text=[f"u = {node.u:.2f}"],
            textposition="middle right",
            name="u",
            showlegend=False,
        )
    title = f"round {round_number(rnd.index)}, node {plain(repr(node.text))}: {node.status}"
    return lay_out(fig, title, "", "probability", 300, yaxis_range=[0, 1.15])


# --- tree against chain at the same verify width ---------------------------------------


def depth_acceptance(rounds: list[Round]) -> list[float | None]:
    """Per depth d, the fraction of the rounds that reached depth d (accepted d - 1 nodes,
    and drafted that deep) which kept a child there; None where no round reached it."""
    deepest = max((n.depth for r in rounds for n in r.nodes or []), default=0)
    out: list[float | None] = []
    for d in range(1, deepest + 1):
        reached = [
            r
            for r in rounds
            if accepted_depth(r) >= d - 1 and any(n.depth == d for n in r.nodes or [])
        ]
        kept = sum(accepted_depth(r) >= d for r in reached)
        out.append(kept / len(reached) if reached else None)
    return out


def expected_depth(acceptance: list[float | None]) -> float:
    """Expected accepted depth from the per-depth acceptance: sum over d of the product of
    the acceptances up to d (a depth no round reached ends the sum)."""
    total, survive = 0.0, 1.0
    for a in acceptance:
        if a is None:
            break
        survive *= a
        total += survive
    return total


def compare_rows(spec: Trace | None, ar: Trace | None) -> tuple[list[tuple[str, str]], str]:
    """The tree's measured figures beside a chain's predicted ones at the same verify width
    (gamma = node count, so width = node count + 1), and a note saying which is which.
    Empty rows when the trace has no tree rounds."""
    rounds = tree_rounds(spec)
    if spec is None or not rounds:
        return [], ""
    nodes = max(len(r.nodes or []) for r in rounds)
    depth = max(n.depth for r in rounds for n in r.nodes or [])
    shape = tree_name(rounds[0])
    width = nodes + 1
    tokens = sum(r.emitted for r in rounds) / len(rounds)
    per_depth = depth_acceptance(rounds)
    depth_e = expected_depth(per_depth)
    verify = sum(r.verify_ms for r in rounds) / len(rounds)
    draft = sum(r.draft_ms for r in rounds) / len(rounds)
    alphas = [d.overlap for r in rounds for d in r.verified if d.overlap is not None]
    shown = ", ".join("–" if a is None else f"{a:.2f}" for a in per_depth)
    rows = [
        (
            "verify width",
            f"{width} positions: {shape} ({nodes} nodes) against a chain of gamma {nodes}",
        ),
        (
            "accepted depth per round",
            f"{sum(accepted_depth(r) for r in rounds) / len(rounds):.2f} measured; "
            f"{depth_e:.2f} expected from the per-depth acceptance ({shown}, measured)",
        ),
    ]
    chain_tokens = None
    if alphas:
        alpha = sum(alphas) / len(alphas)
        chain_tokens = expected_tokens_per_round(alpha, nodes)
        rows.append(
            (
                "tokens per target call",
                f"tree {tokens:.2f} measured; chain {chain_tokens:.2f} predicted "
                f"(Leviathan at gamma {nodes}, alpha = {alpha:.2f} measured on the path)",
            )
        )
    else:
        rows.append(("tokens per target call", f"tree {tokens:.2f} measured; alpha not recorded"))
    chain_draft = nodes * draft / max(depth, 1)
    rows += [
        (
            "verify ms per target call",
            f"tree {verify:.1f} measured at width {width}; a chain at the same width makes the "
            f"same call: {verify:.1f} predicted",
        ),
        (
            "draft ms per round",
            f"tree {draft:.1f} measured in {depth} draft calls; chain {chain_draft:.1f} "
            f"predicted in {nodes} calls (the tree's ms per call, an upper bound)",
        ),
    ]
    if ar is not None and ar.token_ids and ar.stats.ms_per_token > 0:
        step = ar.stats.ms_per_token
        tree_speed = tokens * step / (draft + verify) if draft + verify > 0 else 0.0
        text = f"tree {tree_speed:.2f}x from its measured rounds"
        if chain_tokens is not None:
            chain_speed = chain_tokens * step / (chain_draft + verify)
            text += f"; chain {chain_speed:.2f}x predicted"
        rows.append(("speedup (against the autoregressive ms/token)", text))
    note = (
        "Measured: this run's tree rounds (tokens kept, depth per round, draft and verify ms). "
        "Predicted: the chain's figures, from Leviathan's formula with this run's alpha and "
        "the tree's own cost per call. A chain scores the same width, but keeps its drafts "
        "in one line: after its first rejection the rest are wasted. To measure the chain, "
        f"clear the tree and run gamma {nodes}."
    )
    return rows, note
