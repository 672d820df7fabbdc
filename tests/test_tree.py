"""Trees of drafts: exact in greedy and sampled mode, the caches after the path gather, the
chain as a tree of ones, EOS inside a tree, the refusals, the trace's nodes.

The wrong sibling rule's sample size comes from power (tests/tree_power.py): at target
temperature 1.0 and draft temperature 0.7 on the check's pair, the smallest N at which the
check fails it with probability 0.99 is 264 at --tree 2,2 (its first token moves by a total
variation of 0.18) and 180 at --tree 3,1 (0.24); N_WRONG leaves a margin over the larger.
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch

from specviz import config
from specviz.analysis import distribution_check as dc
from specviz.cli.main import main as cli_main
from specviz.config import Settings
from specviz.engine import Run, generate
from specviz.lm import CachedLM
from specviz.pair import LoadedModel
from specviz.trace import SCHEMA, SCHEMA_CHAIN, Trace
from specviz.tree import ROOT, TreeDraft
from specviz.verify import entry, verification_of_entry
from tests.tiny import close_pair, tiny_model, tiny_pair

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPES = [(2, 2), (3, 1, 2), (2, 2, 1), (4,), (1, 3), (2, 1, 1, 1)]
CHECK_SHAPES = [(2, 2), (3, 1)]
CHECK_PROMPT = "1 2"
WRONG_RULE = "same-target-for-siblings"
N_NEEDED = 264  # tests/tree_power.py: the larger of the two shapes' needed N
N_WRONG = 320
N_CHECK = 200  # the check's smallest N


def deep_close_pair(layers: int = 2, vocab: int = 16, noise: float = 0.16):
    """close_pair with two layers: keys and values of tree nodes feed a second layer."""
    pair = close_pair(vocab=vocab)
    target = tiny_model(vocab, 0, 1.0, layers=layers)
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        w = draft.lm_head.weight
        w.add_(torch.randn(w.shape, generator=g) * noise * w.std())
    cpu = torch.device("cpu")
    pair.target = LoadedModel("deep-target", target, cpu, "float32", vocab, 0, "test")
    pair.draft = LoadedModel("deep-draft", draft, cpu, "float32", vocab, 0, "test")
    return pair


# --- greedy: token for token the autoregressive output ----------------------------------


@pytest.mark.parametrize("make", [close_pair, deep_close_pair])
@pytest.mark.parametrize("verification", ["rejection", "exact-match"])
def test_greedy_tree_equals_greedy_autoregressive(make, verification):
    pair = make()
    later = 0
    for prompt in ("3 1 4", "2 7 1 8 2"):
        ar = generate(pair, prompt, Settings(method="ar", greedy=True, max_new_tokens=30))
        for shape in SHAPES:
            s = Settings(greedy=True, max_new_tokens=30, tree=shape, verification=verification)
            t = generate(pair, prompt, s)
            assert t.token_ids == ar.token_ids, (shape, prompt)
            later += sum(
                nd.status == "accepted" and nd.trial > 0 for r in t.rounds for nd in r.nodes
            )
    assert later >= 1  # some round kept a child other than the first one tried


def test_greedy_tree_on_the_offline_pair(offline_pair):
    from tests.test_engine import PROMPTS

    n = 24
    for prompt in PROMPTS[:1]:
        ar = generate(offline_pair, prompt, Settings(method="ar", greedy=True, max_new_tokens=n))
        s = Settings(greedy=True, max_new_tokens=n, tree=(2, 2, 1), trace_level="minimal")
        t = generate(offline_pair, prompt, s)
        assert t.token_ids == ar.token_ids, prompt
        assert any(r.n_accepted == 3 for r in t.rounds)


def test_greedy_children_are_the_top_b_and_a_later_child_can_win():
    pair = close_pair()
    s = Settings(greedy=True, max_new_tokens=40, tree=(3, 1))
    t = generate(pair, "3 1 4", s)
    later = 0
    for r in t.rounds[:-1]:  # the last round drafts nothing: the budget is spent
        roots = [nd for nd in r.nodes if nd.parent == ROOT]
        assert len({nd.id for nd in roots}) == len(roots) == 3  # distinct
        assert all(nd.q == 1.0 for nd in r.nodes)  # one-hot after the greedy warp
        later += any(nd.status == "accepted" and nd.trial > 0 for nd in roots)
    assert later >= 1


# --- the chain is the tree of ones -------------------------------------------------------


def _same_rounds(a: Trace, b: Trace) -> None:
    assert a.token_ids == b.token_ids
    assert len(a.rounds) == len(b.rounds)
    for ra, rb in zip(a.rounds, b.rounds, strict=True):
        assert (ra.drafted, ra.added, ra.gamma, ra.start) == (
            rb.drafted,
            rb.added,
            rb.gamma,
            rb.start,
        )


@pytest.mark.parametrize("verification", ["rejection", "exact-match"])
@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
def test_a_tree_of_ones_gives_the_chains_trace(temperature, verification):
    pair = close_pair()
    for seed in range(6):
        s = Settings(
            temperature=temperature, max_new_tokens=20, seed=seed, verification=verification
        )
        chain = generate(pair, "3 1 4", s.with_(gamma=3))
        tree = generate(pair, "3 1 4", s.with_(tree=(1, 1, 1)))
        _same_rounds(chain, tree)
        assert tree.settings.gamma == 3 and tree.rounds[0].tree == [1, 1, 1]


def test_a_tree_of_ones_gives_the_chains_trace_on_the_offline_pair(offline_pair):
    s = Settings(temperature=1.0, draft_temperature=1.5, max_new_tokens=12, seed=3)
    prompt = "Explain in two sentences why the sky is blue."
    chain = generate(offline_pair, prompt, s.with_(gamma=4, trace_level="minimal"))
    tree = generate(offline_pair, prompt, s.with_(tree=(1, 1, 1, 1), trace_level="minimal"))
    _same_rounds(chain, tree)


# --- caches: the accepted path, as a recompute from scratch ------------------------------


@pytest.mark.parametrize("verification", ["rejection", "exact-match"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_caches_hold_the_accepted_path_and_match_a_recompute(temperature, verification):
    pair = deep_close_pair(noise=0.6)  # full accepts and rejections, greedy included
    kinds: Counter[str] = Counter()
    for shape in ((2, 2), (3, 1, 2)):
        s = Settings(
            tree=shape, temperature=temperature, max_new_tokens=24, verification=verification
        )
        for prompt in ("3 1 4 1 5", "2 7 1 8"):
            run = Run(pair, prompt, s)
            for update in run:
                r = update.round
                if len(r.drafted) == len(shape):  # not cut by the budget
                    full = r.n_accepted == len(shape)
                    kinds["full depth" if full else "stopped earlier"] += 1
                kinds["later sibling"] += any(
                    nd.status == "accepted" and nd.trial > 0 for nd in r.nodes
                )
                seq = run.prompt_ids + run.trace.token_ids
                target, draft = run.target_lm, run.drafter.lm
                assert not target.branched and not draft.branched
                assert target.tokens == seq[: len(target.tokens)] and target.cached == len(
                    target.tokens
                )
                assert draft.tokens == seq[: len(draft.tokens)] and draft.cached == len(
                    draft.tokens
                )
                for lm, model in ((target, pair.target.model), (draft, pair.draft.model)):
                    with torch.no_grad():
                        fresh = model(input_ids=torch.tensor([seq])).logits[0, -1]
                    assert torch.allclose(lm.logits(seq)[-1], fresh, atol=1e-5)
    assert kinds["full depth"] >= 2 and kinds["stopped earlier"] >= 2, kinds
    assert kinds["later sibling"] >= 1, kinds


def test_a_masked_call_on_a_chain_equals_the_causal_call_and_keep_gathers():
    pair = deep_close_pair()
    model = pair.target.model
    seq = [3, 1, 4, 1, 5, 9]
    a, b = CachedLM(model, 16), CachedLM(model, 16)
    a.logits(seq[:3])
    causal = a.logits(seq, keep=3)
    b.logits(seq[:3])
    visible = torch.ones(3, 6, dtype=torch.bool).tril(diagonal=3)
    masked = b.masked_logits(seq[3:], [3, 4, 5], visible)
    assert torch.allclose(causal, masked, atol=1e-5)
    # two siblings at one position: keep the second, and the cache is the recompute's
    c = CachedLM(model, 16)
    c.logits(seq[:3])
    two = c.masked_logits([7, 8], [3, 3], torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 1]]).bool())
    with torch.no_grad():
        fresh = model(input_ids=torch.tensor([[*seq[:3], 8]])).logits[0, -1]
    assert torch.allclose(two[1], fresh, atol=1e-5)
    c.keep([0, 1, 2, 4])
    assert c.tokens == [*seq[:3], 8] and not c.branched
    longer = [*seq[:3], 8, 2]
    assert torch.allclose(c.logits(longer)[-1], _fresh(model, longer), atol=1e-5)
    c.masked_logits([1], [5], torch.ones(1, 6, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="holds a tree"):
        c.logits([1, 2])


def _fresh(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0, -1]


# --- EOS inside a tree ---------------------------------------------------------------------


def test_eos_inside_a_tree_ends_the_generation():
    eos = 4  # on this pair EOS is drafted, accepted mid-tree, and added by the target
    pair = close_pair()
    pair.eos_ids, pair.tokenizer.eos_token_id = frozenset({eos}), eos
    seen: Counter[str] = Counter()
    for seed in range(30):
        s = Settings(tree=(2, 2, 1), temperature=1.0, top_p=1.0, max_new_tokens=12, seed=seed)
        t = generate(pair, "1 3", s)
        seen["added"] += t.rounds[-1].added is not None and t.rounds[-1].added.id == eos
        assert eos not in t.token_ids[:-1]
        if eos in t.token_ids:
            assert t.stop_reason == "eos" and t.token_ids[-1] == eos
        for r in t.rounds:
            for j, nd in enumerate(r.nodes):
                if nd.id == eos:
                    seen["drafted"] += 1
                    assert all(c.parent != j for c in r.nodes)  # an EOS node has no children
                    if nd.status == "accepted":
                        seen["accepted"] += 1
                        assert r.added is None
                        seen["mid-tree" if nd.depth < 3 else "leaf"] += 1
    assert seen["accepted"] >= 3 and seen["mid-tree"] >= 1 and seen["added"] >= 1, seen


# --- the distribution check, at full depth -----------------------------------------------


def check_pair():
    """Soft rows (overlap about 0.6 at the first position at these temperatures): drafts
    reach depth 2 in about 60% of the rounds, and a first rejection is common."""
    return close_pair(vocab=8, noise=0.2, sharpness=1.0)


def check_settings(shape: tuple[int, ...]) -> Settings:
    return Settings(tree=shape, temperature=1.0, draft_temperature=0.7, top_p=1.0)


@pytest.fixture(scope="module")
def pair_for_check():
    return check_pair()


def _recording(monkeypatch) -> list[Trace]:
    """Keep every speculative trace the check draws (the real engine, recorded)."""
    traces: list[Trace] = []
    real = dc.Sampler.run

    def recorded(self, method, seed):
        t = real(self, method, seed)
        if t.method == "spec":
            traces.append(t)
        return t

    monkeypatch.setattr(dc.Sampler, "run", recorded)
    return traces


@pytest.mark.parametrize("shape", CHECK_SHAPES)
def test_the_check_passes_on_trees_at_full_depth(shape, pair_for_check, monkeypatch):
    traces = _recording(monkeypatch)
    r = dc.run_check(pair_for_check, CHECK_PROMPT, check_settings(shape), n=N_CHECK, length=3)
    assert r.passed, r.summary()
    rounds = [rd for t in traces for rd in t.rounds]
    depth = len(shape)
    full = sum(rd.n_accepted == depth for rd in rounds)
    scored = sum(nd.depth == depth for rd in rounds for nd in rd.nodes)
    later = sum(nd.status == "accepted" and nd.trial > 0 for rd in rounds for nd in rd.nodes)
    assert full >= N_CHECK // 4 and scored >= N_CHECK and later >= 2, (full, scored, later)


def test_the_wrong_sibling_rule_fails_the_check(pair_for_check):
    assert N_WRONG >= N_NEEDED
    s = check_settings((2, 2))
    r = dc.run_check(pair_for_check, CHECK_PROMPT, s, n=N_WRONG, length=3, rule=WRONG_RULE)
    assert not r.passed, r.summary()
    assert r.predicted_tv > 0.15


def test_the_wrong_sibling_rule_formula_and_the_exact_rule():
    """Enumerated over every pair of children and every verdict: the exact multi-draft rule
    gives p; the wrong rule gives its out_siblings (the same recursion, written once)."""
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.2, 0.6])
    wrong = verification_of_entry(entry("rejection", WRONG_RULE), {}).out_siblings(p, q, 2)
    # the closed form, independently: every sibling kept with probability min(1, p/q)
    m = torch.minimum(p, q)
    a = float(m.sum())
    res = (p - q).clamp_min(0) / (p - q).clamp_min(0).sum()
    closed = m * (1 - (1 - a) ** 2) / a + (1 - a) ** 2 * res
    assert torch.allclose(wrong.float(), closed, atol=1e-6)
    for rule, want in (("rejection", p), (WRONG_RULE, wrong.float())):
        out = torch.zeros(3)
        for a in range(3):
            for b in range(3):
                out += q[a] * q[b] * _first_token_law(p, q, [a, b], rule)
        assert torch.allclose(out, want, atol=1e-6), (rule, out, want)
    # sorted by q is not exact: the example comes out at 0.55
    p2, q2 = torch.tensor([0.5, 0.5]), torch.tensor([0.9, 0.1])
    ordered = torch.zeros(2)
    for a in range(2):
        for b in range(2):
            kids = sorted([a, b], key=lambda x: -float(q2[x]))
            ordered += q2[a] * q2[b] * _first_token_law(p2, q2, kids, "rejection")
    assert float(ordered[0]) == pytest.approx(0.55)


def _first_token_law(p, q, kids, rule) -> torch.Tensor:
    """The first token's law given the root's children, exactly over the uniforms: trial i's
    p' depends only on the rejections before it, so forcing every rejection (u = 1) reads
    each trial's acceptance probability a_i, and the law is sum_i prod_{j<i} (1 - a_j) a_i
    at x_i, plus prod_j (1 - a_j) times the final distribution."""
    tree = TreeDraft(ids=list(kids), parents=[ROOT] * len(kids), depths=[1] * len(kids))
    tree.q_rows, tree.q_row_of = [q], {ROOT: 0}
    rows = torch.stack([p] * (len(kids) + 1))
    rule_object = verification_of_entry(entry("rejection", rule), {})
    v = rule_object.decide_tree(rows, tree, torch.ones(len(kids)), frozenset())
    out, rest = torch.zeros(len(p)), 1.0
    for t in v.trials:
        out[kids[t.node]] += rest * t.accept_prob
        rest *= 1.0 - t.accept_prob
    if v.resampled:
        out += rest * v.dist
    return out


# --- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"tree": (9, 8)}, "81 nodes; at most 64"),
        ({"tree": (1,) * 33}, "tree depth"),
        ({"tree": ()}, "non-empty"),
        ({"tree": (2, 0)}, "tree entries must be in >= 1"),
        ({"tree": (2,), "adaptive_gamma": True}, "adaptive gamma"),
        ({"rule": WRONG_RULE}, "only on a tree"),
        ({"tree": (2,), "rule": WRONG_RULE, "verification": "exact-match"}, "broken"),
    ],
)
def test_settings_refuse_in_one_line(kw, match):
    with pytest.raises(ValueError, match=match) as e:
        Settings(**kw)
    assert "\n" not in str(e.value)


def test_lossy_verifications_are_refused_on_trees(monkeypatch):
    # A verification outside TREE_VERIFICATIONS (a lossy one) is refused on a tree: here
    # exact match plays that part, as the schema's choices are fixed when Settings is made.
    monkeypatch.setattr(config.settings, "TREE_VERIFICATIONS", ("rejection",))
    Settings(verification="exact-match")  # a chain may take it
    with pytest.raises(ValueError, match="not supported on a tree"):
        Settings(tree=(2,), verification="exact-match")


def test_a_tree_sets_gamma_and_round_trips():
    s = Settings(tree=[2, 2, 1])
    assert s.tree == (2, 2, 1) and s.gamma == 3
    assert Settings.from_dict(s.to_dict()) == s


def test_the_compiled_path_and_sliding_windows_are_refused():
    from specviz.engine import check_request

    pair = tiny_pair()
    pair.compile_backend = "inductor"
    with pytest.raises(ValueError, match="eager path only"):
        check_request(pair, "1 2", Settings(tree=(2,), max_new_tokens=8))
    pair = tiny_pair()
    pair.target.model.config.sliding_window = 16
    with pytest.raises(ValueError, match="sliding-window"):
        check_request(pair, "1 2", Settings(tree=(2,), max_new_tokens=8))
    check_request(pair, "1 2", Settings(max_new_tokens=8))  # the chain still runs there


def test_cli_refusals_exit_2_without_a_traceback(capsys):
    assert cli_main(["generate", "--prompt", "hi", "--tree", "2,x"]) == 2
    assert "comma-separated integers" in capsys.readouterr().err
    assert cli_main(["check", "--break-rule", WRONG_RULE]) == 2
    err = capsys.readouterr().err
    assert "only on a tree" in err and "Traceback" not in err
    assert cli_main(["generate", "--prompt", "hi", "--tree", "2", "--drafter", "ngram"]) == 2
    assert "model drafter" in capsys.readouterr().err


# --- the trace: nodes, schema versions -----------------------------------------------------


def test_a_tree_trace_round_trips_and_a_chain_trace_stays_version_1():
    pair = close_pair()
    t = generate(pair, "3 1 4", Settings(tree=(2, 2), temperature=1.0, max_new_tokens=10))
    d = t.to_dict()
    assert d["schema"] == SCHEMA
    back = Trace.from_json(t.to_json())
    assert [r.nodes for r in back.rounds] == [r.nodes for r in t.rounds]
    r = back.rounds[0]
    assert r.tree == [2, 2] and len(r.nodes) == 6
    assert [nd.depth for nd in r.nodes] == [1, 1, 2, 2, 2, 2]
    assert [nd.parent for nd in r.nodes] == [-1, -1, 0, 0, 1, 1]
    assert r.trials == sum(nd.trial is not None for nd in r.nodes) >= 1
    chain = generate(pair, "3 1 4", Settings(gamma=2, max_new_tokens=10))
    cd = chain.to_dict()
    assert cd["schema"] == SCHEMA_CHAIN and "nodes" not in cd["rounds"][0]
    assert Trace.from_dict(cd).rounds[0].nodes is None
    bad = dict(d, rounds=[dict(d["rounds"][0], nodes=[dict(d["rounds"][0]["nodes"][0], parent=3)])])
    with pytest.raises(ValueError, match="parent"):
        Trace.from_dict(bad)
