"""The tree view's pure renderers (specviz.views.tree_view) on hand-made tree rounds: token
texts escaped, each status drawn, the accepted path bold, one box per node, the inspector's
lines for one node, the round table's counts, the narration's sibling order, and the tree
against chain comparison. No models, no gradio."""

from __future__ import annotations

import re

import pytest

from specviz.trace import Added, Drafted, Node, Round, Stats, Trace
from specviz.views import markup, narration, tree_view


def drafted(text: str, status: str) -> Drafted:
    return Drafted(1, text, 0.5, 0.5, 1.0, 0.1, status, 0.6, [])


def resampled_round() -> Round:
    """Tree 2,2: the first root child accepted (1st try); under it both children rejected,
    then a token resampled from the final p'; the second root child never tried."""
    nodes = [
        Node(5, "<b>x", -1, 1, 0.6, 0.7, "accepted", 0, 0.7, 1.0, 0.3),
        Node(6, "y&z", -1, 1, 0.4, 0.2, "untried"),
        Node(7, "a", 0, 2, 0.5, 0.1, "rejected", 0, 0.1, 0.2, 0.9),
        Node(8, "b", 0, 2, 0.5, 0.3, "rejected", 1, 0.25, 0.5, 0.8),
        Node(9, "c", 1, 2, 0.5, 0.3, "untried"),
        Node(9, "c", 1, 2, 0.5, 0.3, "untried"),
    ]
    return Round(
        index=2,
        start=4,
        gamma=2,
        drafted=[drafted("<b>x", "accepted"), drafted("a", "rejected")],
        added=Added(11, "'\"r", "resampled", 0.4, 0.6, []),
        draft_ms=2.0,
        verify_ms=3.0,
        t_s=0.1,
        tree=[2, 2],
        nodes=nodes,
    )


def bonus_round() -> Round:
    nodes = [
        Node(5, "p", -1, 1, 0.6, 0.7, "rejected", 0, 0.7, 0.4, 0.9),
        Node(6, "q", -1, 1, 0.4, 0.5, "accepted", 1, 0.5, 1.0, 0.2),
        Node(7, "s", 1, 2, 0.5, 0.9, "accepted", 0, 0.9, 1.0, 0.5),
    ]
    return Round(
        0, 0, 2, [drafted("q", "accepted"), drafted("s", "accepted")],
        Added(12, "t", "bonus", 0.8, 0.8, []), 1.0, 2.0, 0.05, [2, 1], nodes,
    )  # fmt: skip


def boxes(svg: str) -> dict[str, str]:
    """Each clickable box's data-node (or 'added') -> its <g ...> element."""
    out = {}
    for g in re.findall(r"<g [^>]*>.*?</g>", svg):
        m = re.search(r'data-node="(\d+)"', g)
        if m:
            out[m.group(1)] = g
        elif "data-pos=" in g:
            out["added"] = g
    return out


def test_token_texts_are_escaped() -> None:
    html = tree_view.tree_html(resampled_round())
    assert "<b>x" not in html and "&lt;b&gt;x" in html
    assert "y&z" not in html and "y&amp;z" in html
    assert "'\"r" not in html  # the added token's text, in the box and its tooltip


def test_every_node_is_one_clickable_box_with_its_status() -> None:
    rnd = resampled_round()
    found = boxes(tree_view.tree_svg(rnd))
    assert sorted(k for k in found if k != "added") == [str(j) for j in range(len(rnd.nodes))]
    for j, n in enumerate(rnd.nodes):
        assert f"sv-t-{n.status}" in found[str(j)] and f'data-round="{rnd.index}"' in found[str(j)]
    added = found["added"]
    assert "sv-t-resampled" in added and f'data-pos="{rnd.start + rnd.n_accepted}"' in added
    assert "sv-t-bonus" in boxes(tree_view.tree_svg(bonus_round()))["added"]
    # the trial order is written on each tried node
    assert "1st try" in found["0"] and "2nd try" in found["3"] and "try" not in found["1"]


def test_the_accepted_path_is_bold_and_nothing_else_is() -> None:
    rnd = bonus_round()
    found = boxes(tree_view.tree_svg(rnd))
    for j, n in enumerate(rnd.nodes):
        bold = 'font-weight="700"' in found[str(j)] and 'stroke-width="3"' in found[str(j)]
        assert bold == (n.status == "accepted"), n
    assert 'font-weight="700"' in found["added"]
    svg = tree_view.tree_svg(rnd)
    # the bold edges: context -> q -> s -> the bonus token
    assert svg.count("sv-tpath") == 3


def test_the_page_shows_the_last_full_depth_round_unless_one_is_chosen() -> None:
    full, other = bonus_round(), resampled_round()
    other.index = 1
    cut = Round(2, 7, 1, [drafted("c", "accepted")], None, 1, 1, 0, [2, 2], full.nodes[:1])
    trace = Trace("spec", "", [], {}, {}, rounds=[full, other, cut])
    assert tree_view.last_full(trace.rounds) is other
    assert "Round 2, tree 2,2" in tree_view.trace_tree_html(trace)
    assert "Round 1, tree 2,1" in tree_view.trace_tree_html(trace, 0)
    assert "Round 3, tree 2,2" in tree_view.trace_tree_html(trace, 2)


def test_no_tree_round_gives_the_hint() -> None:
    assert tree_view.NO_TREE in tree_view.tree_html(None)
    chain = Round(0, 0, 2, [drafted("a", "accepted")], None, 1.0, 1.0, 0.0)
    trace = Trace("spec", "", [], {}, {}, rounds=[chain])
    assert tree_view.tree_rounds(trace) == []
    assert tree_view.NO_TREE in tree_view.trace_tree_html(trace)


def test_round_table_counts_nodes_trials_and_accepted_depth() -> None:
    rnd = resampled_round()
    assert rnd.trials == 3
    row = markup.round_row(rnd)
    assert "depth 1/2" in row and "3 trials / 6 nodes" in row
    assert tree_view.tree_counts(rnd) == "depth 1/2 · 6 nodes · 3 trials"
    chain = Round(0, 0, 2, [drafted("a", "accepted"), drafted("b", "rejected")], None, 1, 1, 0)
    assert "1/2" in markup.round_row(chain) and "trials" not in markup.round_row(chain)


def test_a_node_inspected_shows_p_q_p_prime_u_and_the_verdict() -> None:
    rnd = resampled_round()
    text = tree_view.node_verdict_html(rnd, rnd.nodes[3])
    assert "p = 0.30" in text and "q = 0.50" in text and "p′ = 0.25" in text
    assert "u = 0.800" in text and "rejected (tried 2nd among its siblings)" in text
    assert "1 earlier rejection" in text and "1st: &#x27;a&#x27; rejected; 2nd" in text
    assert "never tried" in tree_view.node_verdict_html(rnd, rnd.nodes[1])
    fig = tree_view.node_figure(rnd, rnd.nodes[3])
    assert list(fig.data[0].y) == pytest.approx([0.3, 0.5, 0.25, 0.5])
    assert fig.data[1].y[0] == pytest.approx(0.8)  # u beside min(1, p'/q)
    with pytest.raises(ValueError, match="no tree node 9"):
        tree_view.node_at(Trace("spec", "", [], {}, {}, rounds=[bonus_round()]), 0, 9)


def test_narration_tells_the_siblings_trials_in_order() -> None:
    lines = narration.narrate_round(resampled_round())
    depth2 = next(line for line in lines if line.startswith("Depth 2"))
    assert depth2.index("1st 'a'") < depth2.index("2nd 'b'")
    assert "p′ = 0.25" in depth2 and "p′ becomes norm(max(0, p′ − q))" in depth2
    assert any("1 later sibling never tried" in line for line in lines)
    assert any("p′ left after every sibling was rejected" in line for line in lines)
    bonus = narration.narrate_round(bonus_round())
    assert any("1st 'p'" in line and "2nd 'q'" in line for line in bonus)
    assert any("bonus token" in line for line in bonus)


def test_depth_acceptance_and_the_comparison_with_a_chain() -> None:
    rounds = [bonus_round(), resampled_round()]
    assert tree_view.depth_acceptance(rounds) == [1.0, 0.5]
    assert tree_view.expected_depth([1.0, 0.5]) == pytest.approx(1.5)
    assert tree_view.expected_depth([0.5, None]) == pytest.approx(0.5)
    trace = Trace("spec", "", [], {}, {}, rounds=rounds, stats=Stats())
    rows, note = tree_view.compare_rows(trace, None)
    table = dict(rows)
    assert "7 positions" in table["verify width"] and "gamma 6" in table["verify width"]
    # tokens per call: (3 + 2) / 2; the chain's from Leviathan at alpha 0.6, gamma 6
    chain = (1 - 0.6**7) / (1 - 0.6)
    assert f"tree 2.50 measured; chain {chain:.2f} predicted" in table["tokens per target call"]
    assert "Measured" in note and "Predicted" in note
    assert tree_view.compare_rows(Trace("spec", "", [], {}, {}), None) == ([], "")
