"""A draft that is the target's own weights at a lower precision (the offline draft) takes
the target's keys and values of the prompt instead of reading the prompt itself
(specviz.drafters.model.TargetCopyDrafter): the first round is the target's call over the
prompt alone, which drafts nothing and gives the first token, and the draft's cache then
starts from the target's. Any draft keeps the output exact; these tests check that the
cache it starts from is the one it says, that no prefill of the draft runs, and that the
output stays exact."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from transformers import DynamicCache

from specviz.backend import StaticLM, compiler_for
from specviz.config import Settings
from specviz.engine import Run, generate
from specviz.lm import CachedLM
from specviz.pair import ModelPair
from specviz.sampling import warp
from tests.test_distribution import Case, assert_follows_target
from tests.tiny import tiny_model, tiny_pair

PROMPT = [1, 2, 3, 4, 5]


def _derived(pair: ModelPair, draft: torch.nn.Module) -> ModelPair:
    """pair with this draft, recorded as the target's own copy (as the offline draft is)."""
    loaded = dataclasses.replace(pair.target, name="tiny-copy", model=draft, source="derived")
    return dataclasses.replace(pair, draft=loaded)


def _copy(target: torch.nn.Module, noise: float, attention: bool = False) -> torch.nn.Module:
    """The target with its output layer (and, with attention, its key and value projections)
    moved by noise times their spread: a draft whose own keys and values differ where asked."""
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        ws = [draft.lm_head.weight]
        if attention:
            ws += [
                w
                for ly in draft.model.layers
                for w in (ly.self_attn.k_proj.weight, ly.self_attn.v_proj.weight)
            ]
        for w in ws:
            w.add_(torch.randn(w.shape, generator=g) * noise * w.std())
    return draft.eval()


def _static(model: torch.nn.Module) -> StaticLM:
    return StaticLM(model, "m", 16, compiler_for("aot_eager"), (1, 2), 64)


@pytest.mark.parametrize("kind", ["eager", "static"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_cache_given_the_prompts_keys_and_values_continues_as_one_that_read_it(
    one_thread, kind, dtype
):
    source = tiny_model(16, 0, layers=2)
    model = copy.deepcopy(source).to(dtype)
    make = (lambda m: CachedLM(m, 16)) if kind == "eager" else _static
    src = make(source)
    src.logits(PROMPT)
    read, took = make(model), make(model)
    read.logits(PROMPT)
    took.take_prefix(PROMPT, src.prefix_kv())
    assert took.tokens == PROMPT and took.calls == 0  # no forward read the prompt
    layer = took.cache.layers[0]
    assert layer.keys.dtype == dtype
    keys = layer.keys[:, :, : len(PROMPT)]
    torch.testing.assert_close(keys, src.prefix_kv()[0][0].to(dtype))
    tol = {} if dtype == torch.float32 else {"atol": 0.05, "rtol": 0.05}
    for nxt in ([6], [6, 7], [9]):
        seq = PROMPT + nxt
        torch.testing.assert_close(took.logits(seq, len(nxt)), read.logits(seq, len(nxt)), **tol)
        took.rollback(PROMPT)
        read.rollback(PROMPT)
    with pytest.raises(ValueError, match="empty cache"):
        took.take_prefix(PROMPT, src.prefix_kv())


def test_a_cache_of_another_layout_is_refused(one_thread):
    src = CachedLM(tiny_model(16, 0, layers=2), 16)
    src.logits(PROMPT)
    with pytest.raises(ValueError, match="2 layers into 1"):
        CachedLM(tiny_model(16, 0, layers=1), 16).take_prefix(PROMPT, src.prefix_kv())
    with pytest.raises(ValueError, match="all 6 positions"):  # a window kept fewer
        CachedLM(tiny_model(16, 0, layers=2), 16).take_prefix(PROMPT + [6], src.prefix_kv())


def _widths(model: torch.nn.Module) -> list[int]:
    """Record the number of positions of each forward of model (its calls' widths)."""
    seen: list[int] = []
    model.register_forward_pre_hook(
        lambda _m, args, kwargs: seen.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    return seen


@pytest.mark.parametrize("backend", [None, "aot_eager"])
def test_the_first_round_is_the_targets_and_the_draft_starts_from_its_keys(one_thread, backend):
    """Round 0 drafts nothing (stop "prompt") and its token is the target's; the draft never
    reads the prompt (no call of more than two positions), and the q of round 1's first
    draft is the draft model's on the target's keys and values of the prompt, computed here
    independently from an eager target prefill and an eager draft call."""
    base = tiny_pair(vocab=16, sharpness=0.3)  # flat rows: a q that tells caches apart
    draft = _copy(base.target.model, 1.0, attention=True)  # its own keys differ
    pair = _derived(base, draft)
    pair = pair.with_compile(backend) if backend else pair
    widths = _widths(draft)
    s = Settings(gamma=3, max_new_tokens=8, temperature=1.0, top_p=1.0, seed=3)
    trace = generate(pair, "1 2 3 4 5", s)
    first, second = trace.rounds[0], trace.rounds[1]
    assert first.stop == "prompt" and first.drafted == []
    assert first.added is not None and first.added.status == "bonus"
    assert len(second.drafted) == 3 and second.stop == "gamma"
    assert widths and max(widths) <= 2, widths  # no prefill of the draft
    # independently: the target's keys of the prompt, the draft's call on them
    with torch.inference_mode():
        cache = DynamicCache()
        base.target.model(input_ids=torch.tensor([PROMPT]), past_key_values=cache, use_cache=True)
        t1 = trace.token_ids[0]
        logits = draft(input_ids=torch.tensor([[t1]]), past_key_values=cache).logits[0, -1]
    q = warp(logits, s.draft_warp())
    assert second.drafted[0].q == pytest.approx(float(q[second.drafted[0].id]), abs=1e-5)
    # reading its own prompt would have given another q: the check can fail
    with torch.inference_mode():
        own = draft(input_ids=torch.tensor([PROMPT + [t1]])).logits[0, -1]
    assert float(warp(own, s.draft_warp())[second.drafted[0].id]) != pytest.approx(
        second.drafted[0].q, abs=1e-3
    )


def test_a_draft_that_is_not_the_targets_copy_reads_the_prompt(one_thread):
    pair = tiny_pair(vocab=16, sharpness=1.0)
    widths = _widths(pair.draft.model)
    trace = generate(pair, "1 2 3 4 5", Settings(greedy=True, gamma=3, max_new_tokens=6))
    assert trace.rounds[0].stop != "prompt" and len(trace.rounds[0].drafted) == 3
    assert widths[0] == len(PROMPT)


@pytest.mark.parametrize("backend", [None, "aot_eager"])
def test_greedy_output_is_the_targets_when_the_draft_takes_its_prompt(one_thread, backend):
    base = tiny_pair(vocab=16, sharpness=1.0)
    pair = _derived(base, _copy(base.target.model, 0.5, attention=True))
    pair = pair.with_compile(backend) if backend else pair
    s = Settings(greedy=True, gamma=3, max_new_tokens=16)
    statuses: set[str] = set()
    for prompt in ("1 2 3", "4 4 9 1 2", "7"):
        ar = generate(pair, prompt, s.with_(method="ar"))
        spec = generate(pair, prompt, s.with_(method="spec"))
        assert spec.token_ids == ar.token_ids, prompt
        assert spec.rounds[0].stop == "prompt"
        statuses |= {d.status for r in spec.rounds for d in r.drafted}
    assert "rejected" in statuses and "accepted" in statuses  # rollbacks ran too


def test_samples_follow_the_target_when_the_draft_takes_its_prompt(one_thread):
    """At the same size and bar as the other distribution tests (tests/test_distribution.py,
    whose wrong rules fail it): the target's first token, then rounds of three drafts."""
    base = tiny_pair(vocab=6, target_seed=3, draft_seed=4, sharpness=0.7)
    pair = _derived(base, _copy(base.target.model, 1.0, attention=True))
    settings = Settings(gamma=3, max_new_tokens=5, trace_level="minimal")
    run = Run(pair, "1", settings)
    for _ in run:
        pass
    assert run.trace.rounds[0].stop == "prompt" and len(run.trace.rounds[1].drafted) == 3
    assert_follows_target(pair, Case(settings), 600)


def test_the_page_says_the_prompt_rounds_token_came_from_a_round_without_drafts(one_thread):
    """Its decision panel and the inspector read the round that decided: no drafts, so not
    "every draft was accepted"; a full round's bonus still says so."""
    from specviz.trace import decision_at
    from specviz.views.decision_panel import decision_panel_html
    from specviz.views.markup import verdict_html

    base = tiny_pair(vocab=16, sharpness=1.0)
    pair = _derived(base, _copy(base.target.model, 0.05))
    trace = generate(pair, "1 2 3 4 5", Settings(gamma=3, max_new_tokens=24, seed=0))
    first = decision_at(trace, 0, 0)
    for html in (decision_panel_html(first), verdict_html(first)):
        assert "this round drafted nothing" in html and "every draft was accepted" not in html
    full = [r for r in trace.rounds if r.drafted and r.n_accepted == len(r.drafted)]
    assert full and full[0].added is not None and full[0].added.status == "bonus"
    pos = full[0].start + len(full[0].drafted)
    assert "every draft was accepted" in decision_panel_html(decision_at(trace, full[0].index, pos))
