"""A tree in a real browser (Debian's chromium through Playwright, on conftest's ui_url:
tiny networks over the offline pair's tokenizer) at 1280x720: a tree shape typed in the
tree control, Run with few tokens, the last tree round drawn, a click on a tried node that
opens the Decision tab on its trial with p', and the Theory tab's comparison with a chain
of the same verify width.

Set SPECVIZ_SCREENSHOT_DIR to also write tree-1280x720.png there.
"""

from __future__ import annotations

import pytest

from tests.test_browser import generate, open_tab, opened
from tests.test_layout_browser import shot

pytestmark = pytest.mark.browser

TREE = "#sv-tree-view"


def test_a_tree_round_is_drawn_and_a_node_opens_its_trial(browser, ui_url) -> None:
    with opened(browser, ui_url, 1280, 720) as page:
        field = page.locator("#sv-tree textarea, #sv-tree input").first
        field.fill("2,2")
        field.press("Tab")
        generate(page, "The capital of France is", 10, draft_temperature="1.5")
        page.wait_for_selector(f"{TREE} [data-node]", timeout=30_000)
        caption = page.locator(f"{TREE} .sv-tcaption").inner_text()
        assert "tree 2,2" in caption
        nodes = page.locator(f"{TREE} [data-node]").count()
        assert nodes == 6  # the last round that drafted the full tree (the budget cuts the last)
        assert page.locator(f"{TREE} .sv-tpath").count() >= 1  # the path kept, bold
        assert "trials /" in page.locator("#sv-rounds").inner_text()
        tried = page.locator(f"{TREE} .sv-t-accepted[data-node], {TREE} .sv-t-rejected[data-node]")
        assert tried.count() >= 1
        tried.first.click()
        verdict = page.locator("#sv-verdict .sv-node-verdict")
        verdict.wait_for(timeout=30_000)
        text = verdict.inner_text()
        assert "p′ = " in text and "q = " in text and "among its siblings" in text
        # the node's trial shows beside the tokens too, with p′ and min(1, p′/q)
        node_panel = page.locator("#sv-decision").filter(has_text="tree depth")
        node_panel.filter(has_text="p′(x)").wait_for(timeout=30_000)
        # a token of a tree round: its decision on the recorded path, beside the tokens
        token = page.locator("#sv-tokens [data-status=accepted], #sv-tokens [data-status=rejected]")
        token = token.last
        where = f"round {int(token.get_attribute('data-round')) + 1} · position "
        token.click()
        page.locator("#sv-decision").filter(
            has_text=where + token.get_attribute("data-pos")
        ).filter(has_text="q(x)").wait_for(timeout=30_000)
        page.locator(TREE).scroll_into_view_if_needed()
        shot(page, "tree-1280x720.png")
        # the Theory tab compares the tree with a chain of the same verify width
        open_tab(page, "Theory")
        compare = page.locator("#sv-tree-compare")
        compare.scroll_into_view_if_needed()
        text = compare.inner_text()
        assert "7 positions" in text and "chain of gamma 6" in text and "predicted" in text
