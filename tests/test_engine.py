"""The engine: greedy identity on the real pair, caches, edges, seeds, the trace."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import torch

from specviz.config import Settings
from specviz.engine import Run, generate
from specviz.trace import Trace
from tests.tiny import bag_pair, close_pair, tiny_pair

PROMPTS = [
    "Explain in two sentences why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Summarize: The city council voted on Tuesday to expand the bike lane network, "
    "adding 40 km of protected lanes over the next three years.",
    "Rewrite this sentence with 'cat' replaced by 'dog': The cat sat on the mat "
    "while the cat's owner read a book about cats.",
    "List three prime numbers greater than 100.",
]
GREEDY_TOKENS = 24


@pytest.fixture(scope="module")
def greedy_ar(offline_pair):
    s = Settings(method="ar", greedy=True, max_new_tokens=GREEDY_TOKENS)
    return {p: generate(offline_pair, p, s).token_ids for p in PROMPTS}


VERIFICATIONS = ["rejection", "exact-match"]
# The rule at gamma 1 (one draft a round), 3 and 8 (rounds drafting k >= 3, and long drafts
# cut by the budget); exact match, which in greedy mode takes the same decisions as the
# rule, at 3 only. Each case costs seconds on the real pair per prompt: each runs two of
# the prompts (greedy_prompts).
GREEDY_CASES = [("rejection", g) for g in (1, 3, 8)] + [("exact-match", 3)]


COPY = 3  # the prompt whose continuation repeats it: where the n-gram drafter finds drafts


def greedy_prompts(verification: str, gamma: int, drafter: str) -> list[str]:
    """Two of the five prompts for a case, in turn over the cases, so that every prompt is
    checked on at least two cases and every case on two prompts; the n-gram drafter's
    always include the copy prompt."""
    case = GREEDY_CASES.index((verification, gamma))
    if drafter == "ngram":
        others = [p for i, p in enumerate(PROMPTS) if i != COPY]
        return [PROMPTS[COPY], others[case % len(others)]]
    return [PROMPTS[case % len(PROMPTS)], PROMPTS[(case + 2) % len(PROMPTS)]]


@pytest.mark.parametrize("drafter", ["model", "ngram"])
@pytest.mark.parametrize("verification,gamma", GREEDY_CASES)
def test_greedy_speculative_equals_greedy_autoregressive_in_fp32(
    offline_pair, greedy_ar, drafter, gamma, verification
):
    s = Settings(
        greedy=True,
        gamma=gamma,
        drafter=drafter,
        max_new_tokens=GREEDY_TOKENS,
        verification=verification,
    )
    for prompt in greedy_prompts(verification, gamma, drafter):
        spec = generate(offline_pair, prompt, s.with_(trace_level="minimal"))
        where = f"{verification} {drafter} gamma={gamma}: {prompt!r}"
        assert spec.token_ids == greedy_ar[prompt], where


def test_greedy_speculative_equals_greedy_autoregressive_on_the_offline_pairs_packages(
    offline_pair,
):
    """On the offline pair's own compiled packages (built by the set-up step for the
    default run: target 1 and gamma + 1 positions, draft 1 and 2), greedy speculative output
    equals greedy autoregressive output on every test prompt, every call after the prefill
    running a package: the target's one-position step and its verification sum each output
    in the same order (specviz.backend.packages._package_linear)."""
    from specviz.backend import cache_len, packages

    compiled = offline_pair.with_compile("auto")
    assert compiled.compile_backend == "aoti", "the set-up step built no packages"
    s = Settings(greedy=True, max_new_tokens=GREEDY_TOKENS)
    for prompt in PROMPTS:
        ar = generate(compiled, prompt, s.with_(method="ar"))
        spec = generate(compiled, prompt, s)
        assert spec.token_ids == ar.token_ids, prompt
        assert "ran eager" not in " ".join(spec.models.values()), spec.models
        assert spec.stats.target_calls < len(ar.token_ids)  # it did speculate
    length = cache_len(len(offline_pair.encode_prompt(PROMPTS[0])) + GREEDY_TOKENS + s.gamma + 2)
    for m, widths in ((compiled.target, (1, s.gamma + 1)), (compiled.draft, (1, 2))):
        fw = packages.packaged(m, widths, length)
        assert fw is not None and fw.calls > 0 and fw.eager_calls == 0, m.name


@pytest.mark.parametrize("setting", ["gamma 8", "adaptive gamma"])
def test_greedy_speculative_equals_greedy_autoregressive_on_the_packaged_path_when_wide(
    offline_pair, setting
):
    """At gamma 8 (a 9-position verification) and under adaptive gamma (up to 33), on the
    offline pair's packaged path as auto takes it: greedy speculative output equals the
    packaged autoregressive baseline's. A wide package sums each row as the 1-position step
    does (tests/test_packages.py holds that bit for bit); the set-up builds none, so here
    the target finds no package for its widths and says it ran eager, as docs/compiled.md
    states."""
    compiled = offline_pair.with_compile("auto")
    if compiled.compile_backend != "aoti":
        pytest.skip("no compiled packages here: the eager path is tested above")
    base = Settings(greedy=True, max_new_tokens=GREEDY_TOKENS)
    s = base.with_(gamma=8) if setting == "gamma 8" else base.with_(adaptive_gamma=True)
    for prompt in PROMPTS[:2]:
        ar = generate(compiled, prompt, s.with_(method="ar"))
        spec = generate(compiled, prompt, s.with_(trace_level="minimal"))
        assert spec.token_ids == ar.token_ids, (setting, prompt)
        assert "ran eager" not in ar.models["target"]
        assert spec.stats.target_calls < len(ar.token_ids)  # it did speculate


def _check_caches(run: Run, seq: list[int]) -> None:
    target = run.target_lm
    # the target holds every accepted token but the last, which the next round feeds
    assert target.cached == len(seq) - 1 == len(target.tokens)
    assert target.tokens == seq[:-1]
    draft = run.drafter.lm
    assert draft.cached == len(draft.tokens) <= len(seq)
    assert draft.tokens == seq[: len(draft.tokens)]


@pytest.mark.parametrize("verification", VERIFICATIONS)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_caches_hold_the_accepted_prefix_and_match_a_recompute(temperature, verification):
    pair = close_pair()  # drafts are often accepted, and often rejected, greedy included
    kinds: Counter[str] = Counter()
    s = Settings(gamma=3, temperature=temperature, max_new_tokens=30, verification=verification)
    for prompt in ("3 1 4 1 5", "2 7 1 8"):
        run = Run(pair, prompt, s)
        for update in run:
            r = update.round
            if r.drafted:
                kinds["full accept" if r.n_accepted == len(r.drafted) else "rejection"] += 1
            seq = run.prompt_ids + run.trace.token_ids
            _check_caches(run, seq)
            for lm, model in (
                (run.target_lm, pair.target.model),
                (run.drafter.lm, pair.draft.model),
            ):
                with torch.no_grad():
                    fresh = model(input_ids=torch.tensor([seq])).logits[0, -1]
                assert torch.allclose(lm.logits(seq)[-1], fresh, atol=1e-5)
    # both caches are checked after rounds that drafted and ended each way
    assert kinds["full accept"] >= 2 and kinds["rejection"] >= 2, kinds


def test_offline_pair_caches_match_a_recompute(offline_pair):
    run = Run(offline_pair, PROMPTS[0], Settings(gamma=4, temperature=0.8, max_new_tokens=12))
    for _ in run:
        seq = run.prompt_ids + run.trace.token_ids
        _check_caches(run, seq)
    with torch.no_grad():
        fresh = offline_pair.target.model(input_ids=torch.tensor([seq])).logits[0, -1]
    assert torch.allclose(run.target_lm.logits(seq)[-1], fresh, atol=1e-3)


@pytest.mark.parametrize("max_new", [1, 2, 3, 5, 7])
def test_never_more_than_max_new_tokens(max_new):
    pair = tiny_pair(vocab=8, sharpness=0.5)
    for seed in range(5):
        t = generate(pair, "1 2", Settings(gamma=4, max_new_tokens=max_new, seed=seed))
        assert len(t.token_ids) == max_new and t.stop_reason == "max_new_tokens"
        assert sum(r.emitted for r in t.rounds) == max_new


def test_the_bag_models_logits_follow_its_cache():
    """BagLM's logits are read off its cache (each content computed once): the same last
    token after another prefix, or after a cache cropped back and fed again, gives what the
    formula gives for that prefix; and a caller's edit of a returned row changes nothing."""
    from transformers import DynamicCache

    from tests.tiny import BagLM

    model = BagLM(6, seed=0)

    def call(ids: list[int], cache: DynamicCache) -> torch.Tensor:
        return model(torch.tensor([ids]), cache, logits_to_keep=len(ids)).logits[0]

    def formula(ids: list[int]) -> torch.Tensor:
        return model.batch_logits(torch.tensor([ids]))[0, -1]

    after_one = DynamicCache()
    call([1], after_one)
    a = call([2], after_one)[-1]
    cropped = DynamicCache()
    call([3, 4], cropped)
    cropped.crop(-1)  # back to [3]
    b = call([2], cropped)[-1]  # the same call as a's, after another prefix
    torch.testing.assert_close(a, formula([1, 2]))
    torch.testing.assert_close(b, formula([3, 2]))
    assert not torch.equal(a, b)
    a.zero_()
    again = DynamicCache()
    call([1], again)
    torch.testing.assert_close(call([2], again)[-1], formula([1, 2]))


@pytest.mark.parametrize("verification", VERIFICATIONS)
def test_nothing_after_eos(verification):
    # BagLM (tests/tiny.py): a cached LM about 20x cheaper per call than a transformers
    # Llama, whose seeds 7 and 8 with EOS 3 end runs both ways often (an accepted EOS draft,
    # and an EOS added by the target), under either verification
    eos = 3
    pair = bag_pair(vocab=6, target_seed=7, draft_seed=8, eos=eos)
    eos_drafted = eos_added = 0
    for seed in range(150):
        s = Settings(
            gamma=4,
            max_new_tokens=40,
            seed=seed,
            temperature=1.0,
            top_p=1.0,
            verification=verification,
        )
        t = generate(pair, "1 2", s)
        if eos in t.token_ids:
            assert t.token_ids.index(eos) == len(t.token_ids) - 1 and t.stop_reason == "eos"
        last = t.rounds[-1]
        if last.added is None:  # an accepted draft was EOS: no bonus after it
            eos_drafted += 1
            assert last.drafted[last.n_accepted - 1].id == eos
        elif last.added.id == eos:
            eos_added += 1
        for r in t.rounds:  # the drafter stops at EOS
            assert eos not in [d.id for d in r.drafted[:-1]]
    assert eos_drafted >= 10 and eos_added >= 10, (eos_drafted, eos_added)


@pytest.mark.parametrize("verification", VERIFICATIONS)
def test_same_seed_same_trace_and_concurrent_runs_share_no_rng(verification):
    pair = tiny_pair(vocab=16, sharpness=1.0)
    s = Settings(gamma=3, max_new_tokens=20, verification=verification)

    def decisions(t: Trace) -> list:
        return [(d.id, d.u, d.target_sample, d.status) for r in t.rounds for d in r.drafted]

    alone = {seed: generate(pair, "5 6", s.with_(seed=seed)) for seed in (1, 2)}
    assert decisions(alone[1]) != decisions(alone[2])
    results: dict[int, Trace] = {}

    def work(seed: int) -> None:
        results[seed] = generate(pair, "5 6", s.with_(seed=seed))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (1, 2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for seed in (1, 2):
        assert results[seed].token_ids == alone[seed].token_ids
        assert decisions(results[seed]) == decisions(alone[seed])


def _rows(model: torch.nn.Module, ids: list[int], first: int) -> torch.Tensor:
    """softmax rows (temperature 1) after ids[:first], ids[:first+1], ...: one forward
    without a cache, in float64. [len(ids) - first + 1, V]"""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, first - 1 :].double()
    return torch.softmax(logits, -1)


def test_statuses_and_decisions_are_consistent():
    pair = close_pair(noise=0.3)
    t = generate(
        pair, "1 2 3", Settings(gamma=4, max_new_tokens=60, seed=3, temperature=1.0, top_p=1.0)
    )
    kinds: Counter[str] = Counter()
    out: list[int] = []
    for r in t.rounds:
        assert r.start == len(out)
        ctx, ids, n, k = t.prompt_ids + out, [d.id for d in r.drafted], r.n_accepted, len(r.drafted)
        p = _rows(pair.target.model, ctx + ids, len(ctx))  # [k+1, V], independent of the engine
        q = _rows(pair.draft.model, ctx + ids[:-1], len(ctx)) if k else None  # [k, V]
        tail = ["rejected"] + ["discarded"] * (k - n - 1) if n < k else []
        assert [d.status for d in r.drafted] == ["accepted"] * n + tail
        for i, d in enumerate(r.drafted):
            pi, qi = float(p[i, d.id]), float(q[i, d.id])
            assert d.p == pytest.approx(pi, rel=1e-4) and d.q == pytest.approx(qi, rel=1e-4)
            assert d.accept_prob == pytest.approx(min(1.0, pi / qi), rel=1e-4)
            if d.status != "discarded":
                assert (d.u < pi / qi) == (d.status == "accepted")
        a = r.added
        assert a is not None  # this pair has no EOS: every round adds a token
        if n < k:  # the residual norm(max(0, p - q)) at the rejected position
            res = (p[n] - q[n]).clamp_min(0.0)
            res /= res.sum()
            assert a.status == "resampled" and float(res[a.id]) > 0
            assert a.prob == pytest.approx(float(res[a.id]), rel=1e-3, abs=1e-6)
            kinds["resampled"] += 1
        else:  # a full accept: the bonus token comes from p at position k + 1
            assert a.status == "bonus" and a.prob == pytest.approx(float(p[k, a.id]), rel=1e-4)
            kinds["bonus after drafts" if k else "bonus, nothing drafted"] += 1
        assert a.p == pytest.approx(float(p[n, a.id]), rel=1e-4)
        out += ids[:n] + [a.id]
    assert out == t.token_ids
    assert kinds["resampled"] >= 3 and kinds["bonus after drafts"] >= 3, kinds


def test_exact_match_statuses_and_decisions_are_consistent():
    """Each decision against an independent recompute of p and q: a draft is accepted iff
    the target's recorded sample equals it, the token added at a mismatch is that sample
    (drawn from p, not from the residual), and the bonus comes from p."""
    pair = close_pair(noise=0.3)
    s = Settings(gamma=4, max_new_tokens=60, seed=3, temperature=1.0, top_p=1.0)
    t = generate(pair, "1 2 3", s.with_(verification="exact-match"))
    assert t.settings.verification == "exact-match"
    kinds: Counter[str] = Counter()
    out: list[int] = []
    for r in t.rounds:
        ctx, ids, n, k = t.prompt_ids + out, [d.id for d in r.drafted], r.n_accepted, len(r.drafted)
        p = _rows(pair.target.model, ctx + ids, len(ctx))  # [k+1, V]
        q = _rows(pair.draft.model, ctx + ids[:-1], len(ctx)) if k else None  # [k, V]
        tail = ["rejected"] + ["discarded"] * (k - n - 1) if n < k else []
        assert [d.status for d in r.drafted] == ["accepted"] * n + tail
        for i, d in enumerate(r.drafted):
            assert d.u is None and d.accept_prob == pytest.approx(float(p[i, d.id]), rel=1e-4)
            match = float((p[i] * q[i]).sum())
            assert d.match_prob == pytest.approx(match, rel=1e-4) and d.match_prob <= d.overlap
            if d.status == "discarded":
                assert d.target_sample is None and d.target_text is None
            else:
                assert (d.target_sample == d.id) == (d.status == "accepted")
                assert d.target_text == pair.token_text(d.target_sample)
        a = r.added
        assert a.prob == pytest.approx(float(p[n, a.id]), rel=1e-4) and a.p == a.prob
        if n < k:
            assert a.status == "resampled" and a.id == r.drafted[n].target_sample
            kinds["mismatch"] += 1
        else:
            assert a.status == "bonus"
            kinds["bonus after drafts" if k else "bonus, nothing drafted"] += 1
        out += ids[:n] + [a.id]
    assert out == t.token_ids
    assert kinds["mismatch"] >= 3 and kinds["bonus after drafts"] >= 3, kinds


def test_exact_match_accepts_less_often_than_the_rule():
    """At temperature 1 on a close pair the rule accepts about 0.79 of the drafts and exact
    match about 0.53, each near its expectation (alpha, sum p q); over about 700 decisions
    each, the gap is some ten standard errors."""
    pair = close_pair()
    rates = {}
    for verification in VERIFICATIONS:
        accepted = tested = 0
        expected = {"alpha": [], "sum p q": []}
        for seed in range(20):
            s = Settings(gamma=4, max_new_tokens=40, seed=seed, temperature=1.0, top_p=1.0)
            t = generate(pair, "1 2 3", s.with_(verification=verification))
            accepted, tested = accepted + t.stats.accepted, tested + t.stats.verified
            expected["alpha"] += [d.overlap for r in t.rounds for d in r.verified]
            expected["sum p q"] += [d.match_prob for r in t.rounds for d in r.verified]
        rate = accepted / tested
        mean = {key: sum(v) / len(v) for key, v in expected.items()}
        assert mean["sum p q"] < mean["alpha"] - 0.2  # the expectations differ clearly
        own = mean["alpha" if verification == "rejection" else "sum p q"]
        assert abs(rate - own) < 4 * (own * (1 - own) / tested) ** 0.5, (verification, rate, own)
        rates[verification] = (rate, tested)
    (rule, n_rule), (match, n_match) = rates["rejection"], rates["exact-match"]
    se = (rule * (1 - rule) / n_rule + match * (1 - match) / n_match) ** 0.5
    assert match < rule - 6 * se, rates


def _heavy_padding(model: torch.nn.Module, real: int) -> None:
    """Give the output columns beyond the real tokens nearly all of the softmax mass."""
    head = model.lm_head
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        biased.weight.copy_(head.weight)
        biased.bias.zero_()
        biased.bias[real:] = 200.0
    model.lm_head = biased


@pytest.mark.parametrize("target_width,draft_width", [(12, 10), (9, 13)])
def test_padded_output_columns_are_dropped(target_width, draft_width):
    # One tokenizer of 8 tokens; both models' output layers are padded, by different widths,
    # and the padding holds > 99 % of their raw softmax mass: kept, it would be sampled.
    pair = tiny_pair(vocab=8, target_vocab=target_width, draft_vocab=draft_width, sharpness=3.0)
    prompt = [1, 2]
    rows = {}
    for role, lm in (("p", pair.target), ("q", pair.draft)):
        _heavy_padding(lm.model, 8)
        with torch.no_grad():
            raw = lm.model(input_ids=torch.tensor([prompt])).logits[0, -1]
        assert raw.shape[-1] == lm.vocab_size > 8 and torch.softmax(raw, -1)[8:].sum() > 0.99
        rows[role] = torch.softmax(raw[:8].double(), -1)  # the real tokens, renormalised
    for seed in range(10):
        t = generate(
            pair, "1 2", Settings(gamma=3, max_new_tokens=20, seed=seed, temperature=1.0, top_p=1.0)
        )
        assert len(t.token_ids) == 20 and max(t.token_ids) < 8
        assert all(e["id"] < 8 for r in t.rounds for d in r.drafted for e in d.top)
        first = t.rounds[0].drafted[0]  # drawn from q after the prompt, scored by p there
        assert first.q == pytest.approx(float(rows["q"][first.id]), rel=1e-4)
        assert first.p == pytest.approx(float(rows["p"][first.id]), rel=1e-4)


@pytest.mark.parametrize("verification", VERIFICATIONS)
def test_trace_json_round_trip(verification):
    pair = tiny_pair(vocab=8, sharpness=1.0)
    for method in ("spec", "ar"):
        s = Settings(method=method, gamma=3, max_new_tokens=12, verification=verification)
        t = generate(pair, "1 2", s)
        back = Trace.from_json(t.to_json())
        assert back.to_dict() == t.to_dict()
        assert (method == "ar") == (back.rounds == [])


def test_a_trace_written_before_exact_match_still_loads():
    pair = tiny_pair(vocab=8, sharpness=1.0)
    d = generate(pair, "1 2", Settings(gamma=3, max_new_tokens=12)).to_dict()
    del d["settings"]["verification"], d["stats"]["match_alpha"]
    for r in d["rounds"]:
        for x in r["drafted"]:
            del x["match_prob"], x["target_sample"], x["target_text"]
    old = Trace.from_dict(d)
    assert old.settings.verification == "rejection" and old.stats.match_alpha is None
    assert all(x.match_prob is None and x.target_sample is None for x in old.rounds[0].drafted)


def test_a_minimal_trace_marks_alpha_as_not_measured():
    from specviz import metrics

    pair = tiny_pair(vocab=8, sharpness=1.0)
    s = Settings(gamma=3, max_new_tokens=12)
    full = generate(pair, "1 2", s)
    minimal = generate(pair, "1 2", s.with_(trace_level="minimal"))
    assert minimal.token_ids == full.token_ids and minimal.stats.verified > 0
    assert 0.0 < full.stats.alpha <= 1.0 and metrics.alpha(full) == full.stats.alpha
    # no overlap was computed: alpha is unknown, not 0
    assert minimal.stats.alpha is None and metrics.alpha(minimal) is None
    assert all(d.overlap is None for r in minimal.rounds for d in r.drafted)
    back = Trace.from_json(minimal.to_json())
    assert back.to_dict() == minimal.to_dict() and back.stats.alpha is None


def test_ar_trace_has_no_rounds_and_one_call_per_token():
    pair = tiny_pair(vocab=8, sharpness=1.0)
    t = generate(pair, "1 2", Settings(method="ar", max_new_tokens=9))
    assert t.rounds == [] and t.stats.target_calls == 9 and len(t.timeline) == 9


def test_stopping_early_leaves_a_consistent_partial_trace():
    pair = tiny_pair(vocab=8, sharpness=1.0)
    run = Run(pair, "1 2", Settings(gamma=2, max_new_tokens=50))
    it = iter(run)
    next(it)
    next(it)
    it.close()
    t = run.trace
    assert t.stop_reason == "stopped" and t.stats.rounds == 2
    assert t.stats.new_tokens == len(t.token_ids) == sum(r.emitted for r in t.rounds)


def test_ngram_drafter_copies_from_the_prompt():
    from specviz.drafters import NgramDrafter

    d = NgramDrafter(vocab_size=10, ngram_size=2, eos_ids=frozenset({9}))
    assert d.lookup([1, 2, 3, 4, 5, 1, 2], 2) == [3, 4]
    assert d.lookup([1, 2, 9, 4, 1, 2], 3) == [9]  # stops at EOS
    assert d.lookup([1, 2, 3], 4) == []
    draft = d.propose([5, 6, 7, 5, 6], 3, torch.Generator())
    assert draft.ids == [7, 5, 6] and draft.q.sum(-1).tolist() == [1.0, 1.0, 1.0]


def test_ngram_drafter_drafts_what_most_occurrences_were_followed_by():
    from specviz.drafters import NgramDrafter

    d = NgramDrafter(vocab_size=10, ngram_size=1, eos_ids=frozenset({9}))
    # 1 was followed by 2 once and by 3 twice; of those two, both went on with 1, then one
    # with 3 and one with nothing more
    assert d.lookup([1, 2, 1, 3, 1, 3, 1], 3) == [3, 1, 3]
    # a tie goes to the earliest occurrence, as transformers' prompt lookup copies
    assert d.lookup([1, 2, 1, 3, 1], 3) == [2, 1, 3]
    # the vote is redone at each position among the continuations that still agree: after
    # 4, 6 outvotes 5 (two to one), though 5 follows in three continuations of five
    assert d.lookup([1, 4, 5, 1, 4, 6, 1, 4, 6, 1, 7, 5, 1, 8, 5, 1], 2) == [4, 6]
    # and stops after an EOS token
    assert d.lookup([1, 9, 1, 9, 1, 2, 1], 3) == [9]
    # the longest n that occurs decides which occurrences vote
    d3 = NgramDrafter(vocab_size=10, ngram_size=2, eos_ids=frozenset())
    assert d3.lookup([2, 1, 5, 3, 1, 6, 3, 1, 6, 2, 1], 1) == [5]
