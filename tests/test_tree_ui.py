"""The tree panel's handlers on the tiny pair with a tree setting, as tests/test_ui_tabs.py
drives the tabs: a Run draws the last tree round, a click on a node opens the inspector on
its trial (p, q, p', u, the verdict), a click on the added token opens its decision, a click
on a token of another round draws that round's tree, Step narrates the siblings' trials,
and the Theory tab compares the tree with a chain at the same verify width."""

from __future__ import annotations

import gradio as gr
import pytest

from specviz import ui
from specviz.config import Limits
from specviz.ui import tree_panel
from specviz.views import tree_view
from specviz.views.markup import esc

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture()
def ctx(tiny):
    return ui.AppContext(lambda pair, dtype: tiny, Limits())


def form(**changes) -> ui.Form:
    base = {
        "prompt": "1 2 3",
        "pair": "tiny",
        "max_new_tokens": 14,
        "tree": "2,2",
        "temperature": 1.0,
        "seed": 3,
    }
    return ui.Form(**{**base, **changes})


def click(data: dict) -> gr.EventData:
    return gr.EventData(None, data)


def test_a_run_draws_the_last_tree_round_and_a_node_opens_its_trial(ctx) -> None:
    session = ui.new_session()
    final = list(ui.run_updates(session, form(), ctx))[-1]
    spec = session.spec
    last = tree_view.last_full(tree_view.tree_rounds(spec))
    assert last is not None and len(last.nodes) == 6
    assert f"Round {last.index + 1}, tree 2,2" in final["tree_view"]
    assert final["tree_view"].count("data-node=") == len(last.nodes)
    # a tried node that was not the first trial, if any, else any tried node
    tried = [(r, j, n) for r in spec.rounds for j, n in enumerate(r.nodes or []) if n.trial]
    tried = tried or [(r, j, n) for r in spec.rounds for j, n in enumerate(r.nodes or [])
                      if n.trial is not None]  # fmt: skip
    rnd, j, node = tried[0]
    out = tree_panel.on_click(session, click({"round": rnd.index, "node": j}))
    assert out["insp_round"] == rnd.index + 1 and out["insp_pos"] == rnd.start + node.depth - 1
    verdict = out["verdict"]
    assert "p′ = " in verdict and f"u = {node.u:.3f}" in verdict and node.status in verdict
    assert esc(repr(node.text)) in verdict and repr(node.text) not in verdict
    assert list(out["insp_plot"].data[0].y)[2] == pytest.approx(node.p_prime)
    # the added token in the tree opens the inspector's own decision
    added = tree_panel.on_click(
        session, click({"round": rnd.index, "pos": rnd.start + rnd.n_accepted})
    )
    assert added["insp_round"] == rnd.index + 1 and "sv-verdict" in added["verdict"]
    # nonsense from the page opens nothing
    assert tree_panel.on_click(session, click({"round": 999, "node": 0})) == {}
    assert tree_panel.on_click(session, click({"round": rnd.index, "node": 99})) == {}


def test_a_token_of_another_round_draws_that_rounds_tree(ctx) -> None:
    session = ui.new_session()
    list(ui.run_updates(session, form(), ctx))
    first = session.spec.rounds[0]
    out = tree_panel.on_round_click(session, click({"round": 0, "pos": 0}))
    assert "Round 1, tree 2,2" in out["tree_view"] and out["tree_view"].count("data-node=") == len(
        first.nodes
    )
    assert tree_panel.on_round_click(session, click({"round": 500, "pos": 0})) == {}


def test_a_chain_run_leaves_the_tree_panel_empty(ctx) -> None:
    session = ui.new_session()
    final = list(ui.run_updates(session, form(tree="", gamma=3), ctx))[-1]
    assert final["tree_view"] == "" and final["tree_compare"] == ""
    assert tree_panel.on_round_click(session, click({"round": 0, "pos": 0})) == {}


def test_step_narrates_the_trials_and_theory_compares_with_a_chain(ctx) -> None:
    session = ui.new_session()
    out = ui.step_update(session, form(), ctx)
    assert "The draft proposed a tree 2,2 of 6 nodes" in out["narration"]
    assert "Depth 1, under the context, the siblings in draw order: 1st" in out["narration"]
    assert "Round 1, tree 2,2" in out["tree_view"]
    final = list(ui.run_updates(session, form(compare=True), ctx))[-1]
    table = final["tree_compare"]
    assert "7 positions" in table and "chain of gamma 6" in table
    assert "measured" in table and "predicted" in table and "speedup" in table
    assert "trials / 6 nodes" in final["rounds"]


def test_a_dynamic_tree_is_drawn_and_inspected_too(ctx) -> None:
    session = ui.new_session()
    dynamic = form(tree="", own_tree_budget=True, tree_budget=5)
    final = list(ui.run_updates(session, dynamic, ctx))[-1]
    rnd = tree_view.last_full(tree_view.tree_rounds(session.spec))
    assert rnd is not None and rnd.tree is None
    assert f"Round {rnd.index + 1}, dynamic tree" in final["tree_view"]
    assert final["tree_view"].count("data-node=") == len(rnd.nodes)
    j = next(j for j, n in enumerate(rnd.nodes) if n.trial is not None)
    out = tree_panel.on_click(session, click({"round": rnd.index, "node": j}))
    assert "among its siblings" in out["verdict"]
    assert "dynamic tree" in final["tree_compare"]
