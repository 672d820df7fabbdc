"""The EAGLE drafter (specviz.drafters.head): its head's state in EAGLE's key names, the
target's features plumbed from every verify call into the head's cache, greedy speculative
output equal to greedy autoregressive output (chain, tree, dynamic tree), the sampled
output distributed as the target's (and a q wrong in the rule caught by the same check),
and the one-line refusals: a target on the compiled path, a cache that gives no features,
a pair with no head."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from specviz import drafters
from specviz.config import Settings
from specviz.drafters.base import TargetOut
from specviz.drafters.head import (
    NAME,
    FeatureHead,
    HeadDrafter,
    HeadLM,
    head_for,
    target_features,
)
from specviz.engine import Run, check_request, generate
from specviz.lm import CachedLM
from tests import head_check
from tests.tiny import close_pair, tiny_pair

pytestmark = pytest.mark.usefixtures("one_thread")

OWN_KEYS = {
    "fc.weight",
    *(f"layers.0.self_attn.{p}_proj.weight" for p in "qkvo"),
    *(f"layers.0.mlp.{p}_proj.weight" for p in ("gate", "up", "down")),
    "layers.0.post_attention_layernorm.weight",
}


@pytest.fixture(scope="module")
def pairs():
    """Two tiny pairs, each with a head trained for 3 steps, so that greedy drafts are both
    kept and not (a head trained longer keeps every draft of their short periodic greedy
    outputs)."""
    return [head_check.with_head(tiny_pair(), 3), head_check.with_head(close_pair(), 3)]


@pytest.fixture(scope="module")
def wrong_q():
    """The wrong-q drafter, known only while this module's tests run."""
    drafters.register(head_check.ENTRY)
    yield head_check.WRONG
    drafters.ENTRIES.pop(head_check.WRONG, None)


def one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert text and "\n" not in text
    return text


# --- the head ---------------------------------------------------------------------------------


def test_the_heads_own_state_is_eagles_and_round_trips():
    """fc.* and layers.0.* only (no input norm, none of the target's shared layers); a head
    that loads another's state computes what that one computes."""
    model = tiny_pair().target.model
    with torch.random.fork_rng():
        torch.manual_seed(1)
        a = FeatureHead.for_target(model)
        torch.manual_seed(2)
        b = FeatureHead.for_target(model)
    assert set(a.own_state()) == OWN_KEYS
    assert sum(p.numel() for p in a.parameters()) == sum(v.numel() for v in a.own_state().values())
    f, ids = torch.randn(2, 5, 16), torch.randint(8, (2, 5))
    with torch.no_grad():
        assert not torch.allclose(a(f, ids), b(f, ids))
        b.load_own_state(a.own_state())
        assert torch.equal(a(f, ids), b(f, ids))
    bias = FeatureHead(model.config, model.get_input_embeddings(), model.lm_head, bias=True)
    assert set(bias.own_state()) == OWN_KEYS | {"fc.bias"}


@pytest.mark.parametrize(
    "change,says",
    [
        (
            lambda s: s.pop("layers.0.mlp.up_proj.weight"),
            "missing key 'layers.0.mlp.up_proj.weight'",
        ),
        (
            lambda s: s.update({"lm_head.weight": torch.zeros(8, 16)}),
            "unexpected key 'lm_head.weight'",
        ),
        (
            lambda s: s.update({"fc.weight": torch.zeros(16, 16)}),
            "key 'fc.weight' has shape [16, 16]",
        ),
    ],
    ids=["missing", "unexpected", "misshapen"],
)
def test_a_state_that_does_not_fit_is_refused_in_one_line(change, says):
    head = FeatureHead.for_target(tiny_pair().target.model)
    state = dict(head.own_state())
    change(state)
    with pytest.raises(ValueError) as e:
        head.load_own_state(state)
    assert says in one_line(e)


def test_features_are_what_the_output_layer_reads_and_a_cache_keeps_every_row():
    """lm_head(f_t) is the target's logit row at t; an eager cache asked for them keeps the
    hidden state of every row it read, from the position it started at."""
    pair = tiny_pair()
    model, ids = pair.target.model, [1, 2, 3, 4, 5, 6]
    f = target_features(model, torch.tensor([ids]))[0]  # [6, H]
    head = FeatureHead.for_target(model)
    with torch.no_grad():
        assert torch.allclose(
            head.logits(f), model(input_ids=torch.tensor([ids])).logits[0], atol=1e-5
        )
    lm = CachedLM(model, pair.vocab_size)
    lm.want_hidden = True
    lm.logits(ids[:4])
    assert lm.hidden_at == 0 and torch.allclose(lm.hidden_all, f[:4], atol=1e-5)
    lm.logits(ids, keep=2)
    assert lm.hidden_at == 4 and torch.allclose(lm.hidden_all, f[4:], atol=1e-5)
    assert torch.equal(lm.hidden, lm.hidden_all[-2:])


# --- drafting ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape",
    [{}, {"tree": (2, 2, 1)}, {"tree_budget": 6}],
    ids=["chain", "tree", "dynamic-tree"],
)
def test_greedy_spec_equals_greedy_ar_and_the_head_reads_the_targets_features(pairs, shape):
    """Token for token on two pairs and two prompts; the first round drafts nothing (the
    prompt's features come with its call), every later one drafts, drafts are both kept and
    not, and the head's cache holds, slot for slot, what the head computes on the target's
    own features of the whole sequence (no feature missing or out of place)."""
    kept = missed = 0
    for pair in pairs:
        for prompt in ("1 2 3", "4 4 5 6"):
            s = Settings(greedy=True, gamma=3, max_new_tokens=24, **shape)
            ar = generate(pair, prompt, s.with_(method="ar"))
            run = Run(pair, prompt, s.with_(drafter=NAME))
            for _ in run:
                pass
            tr = run.trace
            assert tr.token_ids == ar.token_ids, (shape, prompt)
            assert tr.rounds[0].stop == "prompt" and not tr.rounds[0].drafted
            assert all(r.drafted or r.stop == "budget" for r in tr.rounds[1:])
            kept += tr.stats.accepted
            missed += sum(d.status == "rejected" for r in tr.rounds for d in r.drafted)
            seq = run.prompt_ids + tr.token_ids
            lm: HeadLM = run.drafter.lm
            assert lm.tokens == seq and lm.known == len(seq)
            f = target_features(pair.target.model, torch.tensor([seq]))
            with torch.no_grad():
                want = pair.head(f[:, :-1], torch.tensor([seq[1:]]))[0]
            assert torch.allclose(lm.out[1:], want, atol=1e-4)
    assert kept > 0 and missed > 0


def test_a_sampled_run_is_reproducible(pairs):
    s = Settings(temperature=1.0, gamma=3, max_new_tokens=16, drafter=NAME, tree_budget=6)
    a, b = generate(pairs[1], "1 2 3", s), generate(pairs[1], "1 2 3", s)
    assert a.token_ids == b.token_ids and len(a.token_ids) == 16


def test_sampled_output_follows_the_target():
    """The distribution check at temperature 1 (tests/head_check.py: its views, size and
    power): every view keeps p > EXACT_P, over rounds that drafted, with drafts both kept
    and not."""
    found, tally = head_check.check(head_check.check_pair(), head_check.CHECK.with_(drafter=NAME))
    assert tally.drafting_rounds >= tally.samples and tally.accepted > 100 and tally.rejected > 50
    assert min(found.values()) > head_check.EXACT_P, found


def test_a_q_wrong_in_the_rule_fails_the_same_check(wrong_q):
    """Draws at twice the draft's temperature, q reported at its own: some view falls to
    p <= EXACT_P (with probability above 0.99 at this size, by head_check's power)."""
    s = head_check.CHECK.with_(drafter=wrong_q)
    found, _ = head_check.check(head_check.check_pair(), s)
    assert min(found.values()) <= head_check.EXACT_P, found


# --- refusals ---------------------------------------------------------------------------------


def test_the_registry_lists_the_eagle_drafter():
    e = drafters.entry(NAME)
    assert e.tree and e.reads_hidden and not e.needs_draft_model
    assert NAME in drafters.DRAFTERS


@pytest.mark.parametrize("backend", ["inductor"])
def test_a_named_compiled_target_is_refused_and_auto_runs_the_target_eager(pairs, backend):
    """torch.compile's path gives no hidden state: on a backend named by the request a chain
    is refused by the request check, in one line, before a forward; on one "auto" chose,
    the run opens its target eager, its trace says why, and greedy output equals the
    (compiled) baseline's. A tree (eager anyway) and a target left eager beside the
    compiled path are not refused. The aoti packages give it (tests/test_packages.py): a
    named aoti backend is not refused."""
    from specviz.backend.static_lm import StaticLM

    assert CachedLM.gives_hidden
    on_inductor = StaticLM(pairs[0].target.model, "t", 8, object(), (1,), 8)
    assert not on_inductor.gives_hidden  # a compiler whose forwards give no features
    on_inductor.close()
    aoti = dataclasses.replace(pairs[0], compile_backend="aoti")
    aoti.head = pairs[0].head
    check_request(aoti, "1 2", Settings(max_new_tokens=8, drafter=NAME))

    def like(**changes):
        pair = dataclasses.replace(pairs[0], compile_backend=backend, **changes)
        pair.head = pairs[0].head
        return pair

    calls = []
    hook = pairs[0].target.model.register_forward_pre_hook(lambda *_: calls.append(1))
    chain, tree = Settings(max_new_tokens=8, drafter=NAME), Settings(max_new_tokens=8, tree=(2,))
    try:
        for make in (check_request, Run):
            with pytest.raises(ValueError) as e:
                make(like(), "1 2", chain)
            assert "compiled path (" in one_line(e) and "does not give" in str(e.value)
            assert "--compile off" in str(e.value)
        check_request(like(compile_auto=True), "1 2", chain)
        check_request(like(compile_auto=True), "1 2", tree.with_(drafter=NAME))
        check_request(like(eager_models={pairs[0].target.name: "why"}), "1 2", chain)
    finally:
        hook.remove()
    assert not calls
    auto = like(compile_auto=True)
    run = Run(auto, "1 2", chain.with_(greedy=True))
    for _ in run:
        pass
    assert isinstance(run.target_lm, CachedLM)
    why = "ran eager: the eagle drafter reads its hidden states, which compiled calls lack"
    assert why in run.trace.models["target"]
    plain = generate(pairs[0], "1 2", chain.with_(greedy=True, method="ar"))
    assert run.trace.token_ids == plain.token_ids


def test_the_check_s_runs_read_features_and_a_cache_without_them_is_refused(pairs):
    """The distribution check's shared caches hand out stored rows, without features: its
    speculative runs with this drafter open a target cache of their own, so the check runs
    and its samples did draft. A target out with no features ends a round in one line."""
    from specviz.analysis.distribution_check import Sampler

    sampler = Sampler(pairs[0], "1 2", Settings(temperature=1.0, drafter=NAME), 6)
    try:
        traces = [sampler.run("spec", seed) for seed in range(3)] + [sampler.run("ar", 0)]
    finally:
        sampler.close()
    assert all(len(t.token_ids) >= 6 for t in traces)
    assert sum(len(r.drafted) for t in traces[:3] for r in t.rounds) > 0
    drafter = HeadDrafter.build(Settings(max_new_tokens=8, drafter=NAME), pairs[0], None)
    with pytest.raises(ValueError) as e:
        drafter.after_round([1, 2], TargetOut(torch.zeros(1, 8), None, object()))
    assert "gave none" in one_line(e)


def test_a_head_comes_from_the_pair_or_this_machines_cache(tmp_path, monkeypatch):
    """No head: refused before any model call, in one line that says how to train one. A
    head saved for the target's weights (specviz.head_cache) is found, loaded once, and
    computes what it did."""
    from safetensors.torch import save_file

    from specviz.head_cache import head_file

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    pair = tiny_pair()
    with pytest.raises(ValueError) as e:
        check_request(pair, "1 2", Settings(max_new_tokens=8, drafter=NAME))
    assert "python -m specviz train-head" in one_line(e)
    head = head_check.trained_head(pair, 5)
    path = head_file(pair.target.model)
    path.parent.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in head.own_state().items()}, str(path))
    loaded = head_for(pair)
    assert loaded is head_for(pair) and loaded is not head
    f, ids = torch.randn(1, 4, 16), torch.randint(8, (1, 4))
    with torch.no_grad():
        assert torch.equal(loaded(f, ids), head(f, ids))
    check_request(pair, "1 2", Settings(max_new_tokens=8, drafter=NAME))
    save_file({"fc.weight": torch.zeros(16, 16)}, str(path))
    with pytest.raises(ValueError) as e:
        head_for(pair)
    assert "does not fit tiny-target" in one_line(e)


def test_the_heads_cache_counts_its_output_layer_in_its_busy_time(pairs, monkeypatch):
    """busy_s is what a timer reads as a draft step's cost (specviz.costs.Timer, the draft
    choice's measure_head): it holds the head's calls and the target's output layer on
    their rows, the larger part of a step. An output layer made 50 ms slower shows there."""
    import time

    pair = pairs[0]
    head = pair.head
    lm = HeadLM(head, pair.target.vocab_size)
    seq = pair.encode_prompt("1 2 3")
    lm.logits(seq)
    real = head.logits

    def slow(features):
        time.sleep(0.05)
        return real(features)

    monkeypatch.setattr(head, "logits", slow)
    before = lm.busy_s
    lm.logits(seq + [seq[-1]])  # one token more: one head call, one output row
    assert lm.busy_s - before >= 0.05


def _measured(pair, head_faster: bool):
    """The pair with a draft choice record in its draft (as the offline pair's draft
    carries one) whose head predicts more, or less, than its draft."""
    from specviz.backend import draft_choice

    cand = draft_choice.Candidate("w8-fp32", 5.0, 6.0, 0.25, 0.3, 0.95, 1.8, 4, 1.8)
    head = dataclasses.replace(
        cand, variant=draft_choice.HEAD, predicted=2.2 if head_faster else 0.7
    )
    choice = draft_choice.DraftChoice("w8-fp32", False, [cand], 20.0, {5: 1.3}, {}, 1.0)
    choice = dataclasses.replace(choice, head=head, head_id="x")
    return dataclasses.replace(pair, draft=dataclasses.replace(pair.draft, choice=choice))


def test_auto_drafts_with_what_the_pairs_measurement_picks(pairs):
    """The default drafter, auto, drafts with the head where the pair's draft choice picks
    it and with the draft model where it does not (or where there is no choice, or no head
    to pick), and with n-gram lookup on a pair without a draft model; each trace names the
    drafter that drafted beside the settings as asked, and the head's run is the one
    --drafter eagle gives."""
    base = pairs[1]
    s = Settings(greedy=True, gamma=3, max_new_tokens=16)
    assert s.drafter == drafters.AUTO and drafters.AUTO in drafters.CHOICES["drafter"]
    for pair, want in (
        (_measured(base, True), NAME),
        (_measured(base, False), "model"),
        (base, "model"),
        (dataclasses.replace(base, draft=None), "ngram"),
    ):
        trace = generate(pair, "1 2 3", s)
        assert trace.settings.drafter == drafters.AUTO and trace.models["drafter"] == want
        assert trace.token_ids == generate(pair, "1 2 3", s.with_(drafter=want)).token_ids
    says = [drafters.auto_says(p) for p in (_measured(base, True), base)]
    assert says == ["eagle (the set-up's measured pick)", "model (no measured pick for this pair)"]
    assert drafters.auto_says(dataclasses.replace(base, draft=None)) == "ngram (no draft model)"
    head_run = generate(_measured(base, True), "1 2 3", s)
    assert (
        head_run.models["draft"] == generate(base, "1 2 3", s.with_(drafter=NAME)).models["draft"]
    )
    with pytest.raises(ValueError, match="auto picks is ngram, which proposes one chain"):
        check_request(dataclasses.replace(base, draft=None), "1 2 3", s.with_(tree=(2, 1)))
