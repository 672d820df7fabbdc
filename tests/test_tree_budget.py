"""Drafting as far as the draft is sure: the chain's confidence stop (--draft-confidence)
and the dynamic tree of a node budget (--tree-budget). Both exact: greedy equals the
autoregressive output, the distribution check passes, each round records why drafting
stopped; withdrawing a drafted token because of its own q is shown to be lossy, exactly."""

from __future__ import annotations

import json
import math
from collections import Counter
from itertools import product

import pytest
import torch

from specviz import config
from specviz.analysis import distribution_check as dc
from specviz.cli import check as check_cli
from specviz.cli.main import main as cli_main
from specviz.config import Settings
from specviz.engine import Run, check_request, generate
from specviz.trace import STOPS, Trace
from specviz.tree import BUDGET_BRANCHING, budget_allowance, root_children
from specviz.verify.verdict import residual
from specviz.views import markup
from tests.test_tree import _recording, check_pair, deep_close_pair
from tests.tiny import close_pair, tiny_pair

pytestmark = pytest.mark.usefixtures("one_thread")

CHECK_PROMPT = "1 2"
N_CHECK = 200  # the check's smallest N


# --- settings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"draft_confidence": 0.0}, "draft_confidence"),
        ({"draft_confidence": 1.0}, r"\(0, 1\)"),
        ({"draft_confidence": 0.5, "tree": (2,)}, "stops a chain"),
        ({"draft_confidence": 0.5, "tree_budget": 8}, "stops a chain"),
        ({"tree_budget": 8, "tree": (2,)}, "not both"),
        ({"tree_budget": 0}, "tree_budget"),
        ({"tree_budget": 65}, "tree_budget"),
        ({"tree_budget": 8, "adaptive_gamma": True}, "adaptive gamma"),
    ],
)
def test_settings_refuse_in_one_line(kw, match):
    with pytest.raises(ValueError, match=match) as e:
        Settings(**kw)
    assert "\n" not in str(e.value)


def test_lossy_verifications_and_the_compiled_path_are_refused_on_a_dynamic_tree(monkeypatch):
    monkeypatch.setattr(config.settings, "TREE_VERIFICATIONS", ("rejection",))  # as a lossy one
    with pytest.raises(ValueError, match="not supported on a tree"):
        Settings(tree_budget=8, verification="exact-match")
    pair = tiny_pair()
    pair.compile_backend = "inductor"
    with pytest.raises(ValueError, match="eager path only"):
        check_request(pair, "1 2", Settings(tree_budget=8, max_new_tokens=8))
    check_request(pair, "1 2", Settings(draft_confidence=0.5, max_new_tokens=8))


def test_the_settings_round_trip_and_the_sibling_rule_takes_a_dynamic_tree():
    s = Settings(tree_budget=8, gamma=3, rule="same-target-for-siblings")
    assert s.drafts_tree and s.tree is None and s.gamma == 3
    assert Settings.from_dict(s.to_dict()) == s
    c = Settings(draft_confidence=0.4)
    assert not c.drafts_tree and Settings.from_dict(c.to_dict()) == c


def test_cli_refusals_exit_2_without_a_traceback(capsys):
    assert cli_main(["generate", "--prompt", "hi", "--tree", "2", "--tree-budget", "8"]) == 2
    err = capsys.readouterr().err
    assert "not both" in err and "Traceback" not in err and err.count("\n") == 1
    assert cli_main(["generate", "--prompt", "hi", "--draft-confidence", "1.5"]) == 2
    err = capsys.readouterr().err
    assert "draft" in err and "Traceback" not in err


# --- the chain's confidence stop ----------------------------------------------------------


@pytest.mark.parametrize("make", [close_pair, deep_close_pair])
@pytest.mark.parametrize("verification", ["rejection", "exact-match"])
def test_greedy_chain_with_a_confidence_stop_equals_greedy_autoregressive(make, verification):
    pair = make()
    stops: Counter[str] = Counter()
    for prompt in ("3 1 4", "2 7 1 8 2"):
        ar = generate(pair, prompt, Settings(method="ar", greedy=True, max_new_tokens=30))
        for t_conf in (0.3, 0.6, 0.9):
            s = Settings(
                greedy=True,
                gamma=4,
                max_new_tokens=30,
                draft_confidence=t_conf,
                verification=verification,
            )
            t = generate(pair, prompt, s)
            assert t.token_ids == ar.token_ids, (t_conf, prompt)
            stops.update(r.stop for r in t.rounds)
            for r in t.rounds:
                said = markup.stop_sentence(r, t.settings) or ""
                if r.stop == "confidence":
                    # q is one-hot here (the decision line shows q = 1.00): the sentence
                    # must name what the stop read, the temperature-1 softmax
                    assert all(d.q == 1.0 for d in r.drafted)
                    read = "softmax at temperature 1: its probability of its last token fell"
                    assert read in said and f"threshold {t_conf:g}," in said, said
    assert stops["confidence"] >= 3 and stops["gamma"] >= 1, stops
    assert set(stops) <= set(STOPS)


def test_the_stop_reads_positions_up_to_i_and_never_withdraws():
    """Sampled mode: every drafted token but the last has q(x) >= T (the stop came after
    it), a confidence stop's last token has q(x) < T, and a round drafts gamma tokens
    unless it stopped for confidence, EOS or the token budget."""
    pair = check_pair()
    t_conf, gamma = 0.8, 3
    stops: Counter[str] = Counter()
    for seed in range(30):
        s = Settings(
            temperature=1.0,
            draft_temperature=0.7,
            top_p=1.0,
            gamma=gamma,
            max_new_tokens=12,
            draft_confidence=t_conf,
            seed=seed,
        )
        t = generate(pair, "3 1 4", s)
        for r in t.rounds:
            stops[r.stop] += 1
            qs = [d.q for d in r.drafted]
            assert all(q >= t_conf for q in qs[:-1]), (r.stop, qs)
            if r.stop == "confidence":
                assert qs[-1] < t_conf and len(qs) < gamma
            elif r.stop == "gamma":
                assert len(qs) == gamma
            else:
                assert r.stop == "budget" and len(qs) == max(0, 12 - r.start - 1) < gamma
    assert stops["confidence"] >= 10 and stops["gamma"] >= 5, stops


def test_the_check_passes_with_a_confidence_stop(monkeypatch):
    traces = _recording(monkeypatch)
    s = Settings(temperature=1.0, draft_temperature=0.7, top_p=1.0, gamma=2, draft_confidence=0.5)
    r = dc.run_check(check_pair(), CHECK_PROMPT, s, n=N_CHECK, length=3)
    assert r.passed, r.summary()
    stops = Counter(rd.stop for t in traces for rd in t.rounds)
    # q at the prompt gives its likeliest token 0.76: about a quarter of the first rounds
    # stop after one draft, the others draft both positions
    assert stops["confidence"] >= N_CHECK // 8 and stops["gamma"] >= N_CHECK // 2, stops


# --- stopping is exact, withdrawing is not: computed exactly --------------------------------


def _rows(seed: int, v: int = 3) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    p1, q1 = (torch.softmax(torch.randn(v, generator=g) * 1.5, -1) for _ in range(2))
    p2, q2 = (torch.softmax(torch.randn(v, v, generator=g) * 1.5, -1) for _ in range(2))
    return p1, q1, p2, q2  # p2[x1], q2[x1]: the second position's rows after x1


def _verified(p: torch.Tensor, q: torch.Tensor, x: int) -> tuple[float, torch.Tensor]:
    """One draft x ~ q verified against p: (acceptance probability, law after a rejection)."""
    a = min(1.0, float(p[x] / q[x]))
    return a, residual(p, q) if a < 1.0 else torch.zeros_like(p)


def _two_token_law(rows: tuple[torch.Tensor, ...], t_conf: float, variant: str) -> torch.Tensor:
    """The exact law [V, V] of the first two output tokens of a chain round of up to 2
    drafts (the next round's first token, which is exact, when the round made one).
    variant "stop": no second draft after x1 when q1(x1) < T; "withdraw": both drafted,
    the last withdrawn when its own q is below T; "none": always 2 drafts."""
    p1, q1, p2, q2 = rows
    v = len(p1)
    law = torch.zeros(v, v)
    for x1 in range(v):
        a1, r1 = _verified(p1, q1, x1)
        law += q1[x1] * (1 - a1) * r1[:, None] * p2  # rejected: y1 ~ r1, then y2 ~ p2[y1]
        second = torch.zeros(v)  # the law of y2 after x1 is accepted
        if variant == "stop" and float(q1[x1]) < t_conf:
            second = p2[x1]  # one draft: the bonus
        else:
            for x2 in range(v):
                if variant == "withdraw" and float(q2[x1, x2]) < t_conf:
                    second += q2[x1, x2] * p2[x1]  # withdrawn: the round had one draft
                    continue
                a2, r2 = _verified(p2[x1], q2[x1], x2)
                one_hot = torch.zeros(v)
                one_hot[x2] = 1.0
                second += q2[x1, x2] * (a2 * one_hot + (1 - a2) * r2)
        law[x1] += q1[x1] * a1 * second
    return law


def _first_token_withdrawn(p: torch.Tensor, q: torch.Tensor, t_conf: float) -> torch.Tensor:
    """One draft, withdrawn when its own q is below T (the round then drafts nothing)."""
    out = torch.zeros(len(p))
    for x in range(len(p)):
        if float(q[x]) < t_conf:
            out += q[x] * p
            continue
        a, r = _verified(p, q, x)
        out[x] += q[x] * a
        out += q[x] * (1 - a) * r
    return out


def test_stopping_keeps_the_law_and_withdrawing_changes_it():
    worst = {"withdraw-first": 0.0, "withdraw-second": 0.0}
    for seed, t_conf in product(range(5), (0.2, 0.35, 0.5)):
        rows = _rows(seed)
        p1, q1, p2, _ = rows
        exact = p1[:, None] * p2
        for variant in ("none", "stop"):
            assert torch.allclose(_two_token_law(rows, t_conf, variant), exact, atol=1e-6)
        withdrawn = _two_token_law(rows, t_conf, "withdraw")
        worst["withdraw-second"] = max(
            worst["withdraw-second"], 0.5 * float((withdrawn - exact).abs().sum())
        )
        first = _first_token_withdrawn(p1, q1, t_conf)
        worst["withdraw-first"] = max(
            worst["withdraw-first"], 0.5 * float((first - p1).abs().sum())
        )
        assert math.isclose(float(first.sum()), 1.0, abs_tol=1e-6)
    assert worst["withdraw-first"] > 0.02 and worst["withdraw-second"] > 0.02, worst


# --- the dynamic tree ------------------------------------------------------------------------


@pytest.mark.parametrize("make", [close_pair, deep_close_pair])
@pytest.mark.parametrize("verification", ["rejection", "exact-match"])
def test_greedy_dynamic_tree_equals_greedy_autoregressive(make, verification):
    pair = make()
    later = 0
    for prompt in ("3 1 4", "2 7 1 8 2"):
        ar = generate(pair, prompt, Settings(method="ar", greedy=True, max_new_tokens=30))
        for budget, gamma in ((1, 2), (3, 2), (8, 4), (13, 3), (64, 6)):
            s = Settings(
                greedy=True,
                max_new_tokens=30,
                tree_budget=budget,
                gamma=gamma,
                verification=verification,
            )
            t = generate(pair, prompt, s)
            assert t.token_ids == ar.token_ids, (budget, gamma, prompt)
            assert all(len(r.nodes) <= budget for r in t.rounds)
            later += sum(
                nd.status == "accepted" and nd.trial > 0 for r in t.rounds for nd in r.nodes
            )
    assert later >= 1


def _expected_counts(nodes, budget: int, depth: int, eos: frozenset[int]) -> dict[int, int]:
    """The documented rule, replayed from a round's nodes: children per expanded parent."""
    score = {-1: 1.0}
    for j, nd in enumerate(nodes):
        score[j] = score[nd.parent] * nd.q
    frontier, left, want = [-1], budget, {}
    for d in range(1, depth + 1):
        allowance = min(left, budget_allowance(left, depth - d + 1))
        for par in sorted(frontier, key=lambda j: (-score[j], j)):
            if allowance <= 0:
                break
            want[par] = min(BUDGET_BRANCHING, allowance)
            allowance -= want[par]
        level = [j for j, nd in enumerate(nodes) if nd.depth == d]
        left -= len(level)
        frontier = [j for j in level if nodes[j].id not in eos]
        if not frontier or left <= 0:
            break
    return want


def test_the_dynamic_tree_expands_the_most_confident_paths_by_the_documented_rule():
    pair = check_pair()
    kinds: Counter[str] = Counter()
    for seed, (budget, gamma) in product(range(6), ((8, 4), (12, 3), (5, 2))):
        s = Settings(
            temperature=1.0,
            draft_temperature=0.7,
            top_p=1.0,
            tree_budget=budget,
            gamma=gamma,
            max_new_tokens=16,
            seed=seed,
        )
        t = generate(pair, "3 1 4", s)
        for r in t.rounds:
            depth = min(gamma, 16 - r.start - 1)
            got = Counter(nd.parent for nd in r.nodes)
            if depth == 0:
                assert r.nodes == [] and r.stop == "budget"
                continue
            assert dict(got) == _expected_counts(r.nodes, budget, depth, pair.eos_ids)
            assert len(r.nodes) <= budget and max(nd.depth for nd in r.nodes) <= depth
            assert got[-1] == root_children(budget, depth)
            kinds[r.stop] += 1
            kinds["not the first parent"] += any(nd.depth == 2 and nd.parent != 0 for nd in r.nodes)
    assert kinds["gamma"] >= 10 and kinds["not the first parent"] >= 1, kinds


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_dynamic_tree_caches_hold_the_accepted_path_and_match_a_recompute(temperature):
    pair = deep_close_pair(noise=0.6)
    full = 0
    for prompt in ("3 1 4 1 5", "2 7 1 8"):
        s = Settings(tree_budget=8, gamma=3, temperature=temperature, max_new_tokens=20)
        run = Run(pair, prompt, s)
        for update in run:
            full += update.round.n_accepted >= 2  # a path of two nodes gathered
            seq = run.prompt_ids + run.trace.token_ids
            for lm, model in (
                (run.target_lm, pair.target.model),
                (run.drafter.lm, pair.draft.model),
            ):
                assert not lm.branched and lm.tokens == seq[: len(lm.tokens)]
                with torch.no_grad():
                    fresh = model(input_ids=torch.tensor([seq])).logits[0, -1]
                assert torch.allclose(lm.logits(seq)[-1], fresh, atol=1e-5)
    assert full >= 1


def test_eos_inside_a_dynamic_tree_ends_the_generation():
    eos = 4  # on this pair EOS is drafted, accepted mid-tree, and added by the target
    pair = close_pair()
    pair.eos_ids, pair.tokenizer.eos_token_id = frozenset({eos}), eos
    seen: Counter[str] = Counter()
    for seed in range(30):
        s = Settings(
            tree_budget=8, gamma=3, temperature=1.0, top_p=1.0, max_new_tokens=12, seed=seed
        )
        t = generate(pair, "1 3", s)
        assert eos not in t.token_ids[:-1]
        if eos in t.token_ids:
            assert t.stop_reason == "eos" and t.token_ids[-1] == eos
        for r in t.rounds:
            seen[r.stop] += 1
            for j, nd in enumerate(r.nodes):
                if nd.id == eos:
                    seen["drafted"] += 1
                    assert all(c.parent != j for c in r.nodes)  # an EOS node has no children
                    if nd.status == "accepted":
                        seen["accepted"] += 1
                        assert r.added is None
    assert seen["drafted"] >= 3 and seen["accepted"] >= 1, seen


def test_cli_check_with_a_tree_budget_passes_at_full_depth(monkeypatch, capsys):
    traces = _recording(monkeypatch)
    monkeypatch.setattr(check_cli, "load_pair_from_args", lambda args: check_pair())
    argv = ["check", "--tree-budget", "8", "--length", "3", "--prompt", CHECK_PROMPT, "--raw"]
    argv += ["--n", str(N_CHECK), "--temperature", "1.0", "--draft-temperature", "0.7"]
    argv += ["--top-p", "1.0", "--json"]
    assert cli_main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] is True and out["settings"]["tree_budget"] == 8
    rounds = [rd for t in traces for rd in t.rounds]
    # the check keeps 3 tokens, and its runs draft to the tree's full depth (gamma 4)
    full = sum(rd.n_accepted >= 2 for rd in rounds)
    deep = sum(nd.depth == 2 for rd in rounds for nd in rd.nodes)
    assert full >= N_CHECK // 4 and deep >= N_CHECK, (full, deep)


# --- the trace ----------------------------------------------------------------------------------


def test_the_stop_round_trips_and_old_traces_load():
    pair = close_pair()
    t = generate(pair, "3 1 4", Settings(tree_budget=6, temperature=1.0, max_new_tokens=10))
    back = Trace.from_json(t.to_json())
    assert [r.stop for r in back.rounds] == [r.stop for r in t.rounds]
    assert back.rounds[-1].stop in STOPS and all(r.tree is None for r in back.rounds)
    chain = generate(pair, "3 1 4", Settings(gamma=2, max_new_tokens=10, draft_confidence=0.5))
    d = chain.to_dict()
    for r in d["rounds"]:
        del r["stop"]  # a trace written before rounds recorded it
    assert all(r.stop is None for r in Trace.from_dict(d).rounds)
    d["rounds"][0]["stop"] = "tired"
    with pytest.raises(ValueError, match="stop must be one of"):
        Trace.from_dict(d)


def test_the_app_shows_where_each_round_stopped_and_why():
    """The round table tags every round that stopped short of gamma with its reason, and
    the narration says it in a sentence naming the threshold; the plain case goes unsaid."""
    from specviz.views import markup
    from specviz.views.narration import narrate_round

    pair = check_pair()
    s = Settings(temperature=1.0, draft_temperature=0.7, top_p=1.0, gamma=3)
    t = generate(pair, "3 1 4", s.with_(max_new_tokens=24, draft_confidence=0.8))
    seen = set()
    for r in t.rounds:
        row, said = markup.round_row(r), narrate_round(r, t.settings)
        seen.add(r.stop)
        if r.stop == "gamma":
            assert "stopped:" not in row and not any("Drafting stopped" in x for x in said)
            continue
        assert f"stopped: {markup.STOP_TAGS[r.stop]}" in row
        sentence = next(x for x in said if x.startswith("Drafting stopped at "))
        assert f"{len(r.drafted)} of {r.gamma}" in sentence
        if r.stop == "confidence":
            assert "threshold 0.8" in sentence
            # the stop reads the last drafted token's own q: it fell below the threshold
            assert r.drafted[-1].q < 0.8
    assert "confidence" in seen
    tree = generate(pair, "3 1 4", s.with_(gamma=4, tree_budget=3, max_new_tokens=12))
    r = next(r for r in tree.rounds if r.stop == "nodes")
    said = narrate_round(r, tree.settings)
    assert any(x.startswith(f"Drafting stopped at {len(r.nodes)} nodes: ") for x in said)
    assert "stopped: node budget" in markup.round_row(r)
