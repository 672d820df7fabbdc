"""The drafters' registry (specviz.drafters): the engine builds a drafter by its entry and
names none; a drafter registered in one module (tests/feature_drafter.py) runs through a
chain and a tree, reads the target's last hidden state from the verify call, and keeps
greedy speculative output equal to greedy autoregressive output."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specviz import drafters
from specviz.config import Settings
from specviz.engine import Run, check_request, generate
from tests.tiny import close_pair, tiny_pair

ROOT = Path(__file__).resolve().parents[1] / "specviz"


@pytest.fixture(scope="module")
def feature_drafter():
    """The test-only drafter, registered by importing its module, and known only while this
    module's tests run (the other tests see the built-in drafters alone)."""
    from tests import feature_drafter as module

    drafters.register(module.ENTRY)  # again, should an earlier import have been undone
    yield module
    drafters.ENTRIES.pop(module.NAME, None)


def _names_and_strings(path: Path) -> tuple[set[str], set[str]]:
    """The names (and attribute names) a module uses, and its string constants."""
    tree = ast.parse(path.read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    return names, strings


def test_the_engine_and_the_rounds_name_no_drafter():
    """No drafter's class or name in the engine or the rounds, and no isinstance in the
    rounds: a drafter is built by its entry and used through its protocol."""
    for module in ("engine.py", "rounds.py"):
        names, strings = _names_and_strings(ROOT / module)
        assert not names & {"ModelDrafter", "NgramDrafter", "isinstance"} - {
            "isinstance" if module == "engine.py" else ""
        }, module
        assert not strings & set(drafters.ENTRIES), (module, strings & set(drafters.ENTRIES))


def test_the_registry_lists_the_built_in_drafters_and_refuses_an_unknown_one():
    assert {"model", "ngram"} <= set(drafters.DRAFTERS)
    assert drafters.entry("model").tree and not drafters.entry("ngram").tree
    with pytest.raises(ValueError, match="unknown drafter"):
        drafters.entry("no-such-drafter")


@pytest.mark.parametrize("kw", [{"drafter": "no-such-drafter"}, {"drafter": "x", "tree": (2,)}])
def test_settings_take_any_drafter_name_and_the_request_check_refuses_an_unknown_one(kw):
    """Settings (the ground floor) knows no drafter; the request check refuses in one line,
    before any model call."""
    s = Settings(**kw)
    with pytest.raises(ValueError, match="unknown drafter") as e:
        check_request(tiny_pair(), "1 2", s)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kw", [{"tree": (2, 1)}, {"tree_budget": 8}], ids=["tree", "budget"])
def test_a_tree_from_a_chain_drafter_is_refused_per_request_in_one_line(kw):
    s = Settings(drafter="ngram", **kw)
    for check in (drafters.check_settings, lambda s: check_request(tiny_pair(), "1 2", s)):
        with pytest.raises(ValueError, match="drafts trees: the model drafter") as e:
            check(s)
        assert "\n" not in str(e.value)


def test_a_bad_drafter_name_is_refused_in_one_line_by_the_cli(capsys):
    from specviz.cli.main import main

    assert main(["generate", "--prompt", "hi", "--drafter", "no-such-drafter"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no-such-drafter" in err and "\n" not in err and "Traceback" not in err
    assert main(["generate", "--prompt", "hi", "--tree", "2", "--drafter", "ngram"]) == 2
    assert "drafts trees" in capsys.readouterr().err


@pytest.mark.parametrize("tree", [None, (3,)], ids=["chain", "tree"])
def test_a_drafter_registered_in_one_module_keeps_greedy_spec_equal_to_ar(feature_drafter, tree):
    """The feature drafter reads the target's last hidden state, through a chain and a tree,
    on two pairs: its greedy output is the target's greedy output, token for token."""
    assert feature_drafter.NAME in drafters.DRAFTERS
    for pair in (tiny_pair(), close_pair()):
        for prompt in ("1 2 3", "4 4 5 6"):
            s = Settings(greedy=True, gamma=3, max_new_tokens=24, tree=tree)
            ar = generate(pair, prompt, s.with_(method="ar"))
            run = Run(pair, prompt, s.with_(drafter=feature_drafter.NAME))
            for _ in run:
                pass
            assert run.trace.token_ids == ar.token_ids, (tree, prompt)
            assert run.drafter.seen == len(run.trace.rounds)  # every call gave its features
            assert sum(len(r.drafted) for r in run.trace.rounds[1:]) > 0
            if tree is not None:
                assert any(len(r.nodes) == 3 for r in run.trace.rounds)


def test_a_sampled_run_with_the_registered_drafter_is_reproducible(feature_drafter):
    pair = close_pair()
    s = Settings(temperature=1.0, gamma=2, max_new_tokens=16, drafter=feature_drafter.NAME)
    a, b = generate(pair, "1 2 3", s), generate(pair, "1 2 3", s)
    assert a.token_ids == b.token_ids and len(a.token_ids) == 16
