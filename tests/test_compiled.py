"""The compiled path: a static KV cache and forwards compiled for fixed shapes.

The tests compile with the aot_eager backend: it traces the same graphs as inductor (dynamo
and AOTAutograd) but generates no code, which takes minutes on a shared CPU. One compiled
process-wide compiler and one pair serve the module; every test uses gamma 4, so the shapes
compiled once (target: 1 and 5 positions; draft: 1 and 2) serve them all.
"""

from __future__ import annotations

import pytest
import torch

from specviz.backend import (
    SlidingWindowRefused,
    StaticLM,
    cache_len,
    check_compilable,
    compiler_for,
)
from specviz.config import Settings
from specviz.engine import Run, generate
from specviz.lm import CachedLM
from tests.test_distribution import Case, assert_follows_target
from tests.tiny import bag_pair, close_pair, tiny_model, tiny_pair

BACKEND = "aot_eager"
GAMMA = 4
PROMPT = "1 2 3"


@pytest.fixture(scope="module")
def pairs(one_thread):
    """An eager pair and the same models on the compiled path, compiled once."""
    eager = close_pair(noise=0.3)  # greedy rounds both reject and accept in full
    compiled = eager.with_compile(BACKEND)
    s = Settings(greedy=True, gamma=GAMMA, max_new_tokens=6)
    for method in ("ar", "spec"):
        generate(compiled, PROMPT, s.with_(method=method))
    return eager, compiled


def _greedy(**kw) -> Settings:
    return Settings(greedy=True, gamma=GAMMA, max_new_tokens=40, **kw)


@pytest.mark.parametrize("prompt", ["1 2 3", "9"])
def test_greedy_speculative_equals_greedy_autoregressive_compiled(pairs, prompt):
    _, compiled = pairs
    ar = generate(compiled, prompt, _greedy(method="ar"))
    spec = generate(compiled, prompt, _greedy())
    assert len(ar.token_ids) == 40
    assert spec.token_ids == ar.token_ids
    statuses = {d.status for r in spec.rounds for d in r.drafted}
    statuses |= {r.added.status for r in spec.rounds if r.added}
    assert {"rejected", "bonus"} <= statuses  # both rollbacks were exercised


def test_greedy_equality_holds_for_a_draft_of_another_network(one_thread):
    eager = tiny_pair(vocab=16)  # target and draft differ everywhere: many rejections
    compiled = eager.with_compile(BACKEND)
    ar = generate(compiled, PROMPT, _greedy(method="ar"))
    spec = generate(compiled, PROMPT, _greedy())
    assert spec.token_ids == ar.token_ids
    assert spec.stats.acceptance_rate < 1.0


@pytest.mark.parametrize("verification", ["rejection", "exact-match"])
def test_the_compiled_trace_has_the_eager_trace_s_content(pairs, verification):
    eager, compiled = pairs
    s = Settings(gamma=GAMMA, temperature=1.0, top_p=1.0, max_new_tokens=30, seed=7)
    s = s.with_(verification=verification)
    a, b = generate(eager, PROMPT, s).to_dict(), generate(compiled, PROMPT, s).to_dict()
    assert a.keys() == b.keys()
    assert b["models"]["target"].endswith(f"compiled with {BACKEND}")
    a_rounds, b_rounds = a.pop("rounds"), b.pop("rounds")
    for key in ("token_ids", "settings", "prompt_ids", "stop_reason", "text"):
        assert a[key] == b[key], key
    assert len(a_rounds) == len(b_rounds)
    for ra, rb in zip(a_rounds, b_rounds, strict=True):
        assert ra.keys() == rb.keys()
        assert [d["status"] for d in ra["drafted"]] == [d["status"] for d in rb["drafted"]]
        for da, db in zip(ra["drafted"], rb["drafted"], strict=True):
            assert da.keys() == db.keys()
            assert da["p"] == pytest.approx(db["p"], abs=1e-5)
            assert da["q"] == pytest.approx(db["q"], abs=1e-5)
            assert da["target_sample"] == db["target_sample"]


def test_steady_state_runs_compile_nothing(pairs):
    _, compiled = pairs
    comp = compiler_for(BACKEND)
    before = comp.compiles
    for seed, prompt in enumerate(["4 4", "1 2 3 4 5 6", "7"]):
        s = Settings(gamma=GAMMA, temperature=1.0, max_new_tokens=25, seed=seed)
        generate(compiled, prompt, s)
        generate(compiled, prompt, s.with_(method="ar"))
    assert comp.compiles == before


def test_rollback_moves_the_position_and_copies_nothing(pairs):
    _, compiled = pairs
    run = Run(compiled, PROMPT, _greedy())
    seen = []
    for _ in run:
        lm = run.target_lm
        assert isinstance(lm, StaticLM)
        seen.append([layer.keys.data_ptr() for layer in lm.cache.layers])
        positions = {int(layer.cumulative_length) for layer in lm.cache.layers}
        assert positions == {len(lm.tokens)}
        assert lm.tokens == (run.prompt_ids + run.trace.token_ids)[: len(lm.tokens)]
        assert run.drafter.lm.length == cache_len(3 + 40 + 2 + 1)
    assert len(seen) > 5 and all(s == seen[0] for s in seen)  # the same buffers throughout
    assert run.target_lm.cache is None  # handed back at the end


def test_the_next_run_reuses_the_handed_back_caches(pairs):
    _, compiled = pairs
    ptrs = []
    for seed in (1, 2):
        run = Run(compiled, PROMPT, _greedy(seed=seed))
        for _ in run:  # leaving the loop closes the run, which hands its caches back
            ptrs.append(run.target_lm.cache.layers[0].keys.data_ptr())
            break
    assert ptrs[0] == ptrs[1]


def test_padded_calls_give_the_eager_logits(pairs):
    eager, _ = pairs
    model = eager.target.model
    static = StaticLM(model, "t", 16, compiler_for(BACKEND), (1, GAMMA + 1), 64)
    dynamic = CachedLM(model, 16)
    seq = [1, 2, 3]
    calls = [(seq, 1), (seq + [4, 5], 3), (seq + [4, 9], 2), (seq + [4, 9, 1, 2, 3], 5)]
    for s, keep in calls:
        torch.testing.assert_close(static.logits(s, keep), dynamic.logits(s, keep))
        static.rollback(s[:-1])
        dynamic.rollback(s[:-1])


def test_each_model_runs_its_own_graph(one_thread):
    """Two models whose calls look alike to the kept guards (the same ids, the same cache
    shapes) but whose weights differ in shape and value: each compiled call gives its own
    model's logits, so their forwards share no compiled graph."""
    one, other = tiny_model(16, 0), tiny_model(16, 1, intermediate_size=48)
    comp, seq = compiler_for(BACKEND), [1, 2, 3, 4]
    for m in (one, other):
        static = StaticLM(m, "m", 16, comp, (1, 2), 64)
        static.logits(seq[:2])  # the prefill (eager), then compiled calls
        for n in (3, 4):
            torch.testing.assert_close(static.logits(seq[:n]), CachedLM(m, 16).logits(seq[:n]))
        static.close()


def test_the_compiled_twin_shares_the_weights_and_keeps_the_model_s_attention(pairs):
    eager, compiled = pairs
    model = eager.target.model
    generate(compiled, PROMPT, _greedy())
    twin = compiler_for(BACKEND)._models[model].twin
    assert twin is not model and twin.config._attn_implementation == "eager"
    assert model.config._attn_implementation == "sdpa"  # the eager path is left as it was
    ours = {p.data_ptr() for p in model.parameters()}
    assert {p.data_ptr() for p in twin.parameters()} == ours


def test_a_distribution_case_follows_the_target_on_the_compiled_path(one_thread):
    llama = tiny_pair(vocab=6, target_seed=3, draft_seed=4, sharpness=0.7)
    case = Case(Settings(gamma=3, max_new_tokens=4, trace_level="minimal"))
    assert_follows_target(llama.with_compile(BACKEND), case, 600, reference=llama)


def test_models_without_static_cache_support_are_refused():
    with pytest.raises(ValueError, match="compiled path"):
        bag_pair(vocab=6, target_seed=3, draft_seed=4).with_compile(BACKEND)
    with pytest.raises(ValueError, match="backend must be one of"):
        check_compilable(tiny_pair().target.model, "cudagraphs-please")


def test_auto_compiles_on_cuda_only_and_falls_back_where_a_model_cannot(monkeypatch):
    from specviz.backend import auto_backend

    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    assert auto_backend(torch.device("cuda")) == "inductor"
    monkeypatch.setattr("specviz.backend.packages.available", lambda: True)
    assert auto_backend(torch.device("cpu")) == "aoti"  # where the set-up step built them
    monkeypatch.setattr("specviz.backend.packages.available", lambda: False)
    assert auto_backend(torch.device("cpu")) is None
    pair = tiny_pair()
    assert pair.with_compile("auto").compile_backend is None  # a CPU pair: eager
    assert pair.with_compile("off").compile_backend is None
    assert pair.with_compile(BACKEND).with_compile("off").compile_backend is None
    # where auto picks the compiled path, a model it cannot run stays eager, without error
    monkeypatch.setattr("specviz.backend.auto_backend", lambda device: BACKEND)
    assert pair.with_compile("auto").compile_backend == BACKEND
    bag = bag_pair(vocab=6, target_seed=3, draft_seed=4)
    assert bag.with_compile("auto").compile_backend is None


def test_zero_gpu_runs_eager_and_refuses_a_named_backend(monkeypatch):
    from specviz.backend import auto_backend

    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    assert auto_backend(torch.device("cuda")) is None
    with pytest.raises(ValueError, match="not available on ZeroGPU"):
        tiny_pair().with_compile(BACKEND)


def test_cache_lengths_are_few():
    assert [cache_len(n) for n in (1, 256, 257, 700)] == [256, 256, 512, 1024]


def test_the_cli_runs_the_compiled_path(pairs, monkeypatch, capsys):
    import json

    import specviz.models
    from specviz.cli import main as cli

    eager, _ = pairs
    monkeypatch.setattr(specviz.models, "load_pair", lambda *a, **k: eager)
    argv = ["generate", "--prompt", PROMPT, "--greedy", "--max-new-tokens", "6", "--json"]
    assert cli.main([*argv, "--gamma", str(GAMMA), "--compile", BACKEND]) == 0
    trace = json.loads(capsys.readouterr().out)
    assert trace["models"]["target"].endswith(f"compiled with {BACKEND}")
    assert len(trace["token_ids"]) == 6
    for flags, how in (([], "auto"), (["--compile", "off"], "off")):  # eager on this CPU
        assert cli.main([*argv, *flags]) == 0
        trace = json.loads(capsys.readouterr().out)
        assert "compiled" not in trace["models"]["target"], how
    assert cli.main([*argv, "--compile", "tvm"]) == 2


# --- models with sliding-window attention: refused, and run eager ---------------------------

WINDOW = 4


def sliding_qwen2(seed: int, vocab: int = 16):
    """A tiny Qwen2 whose every layer attends through a window of WINDOW positions: Qwen2
    makes layer i sliding when use_sliding_window is set and i >= max_window_layers."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        use_sliding_window=True,
        sliding_window=WINDOW,
        max_window_layers=0,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).eval()
        with torch.no_grad():
            model.lm_head.weight.mul_(4.0 / model.lm_head.weight.std())
    assert config.layer_types == ["sliding_attention"] * 2
    return model


@pytest.fixture(scope="module")
def sliding_pair(one_thread):
    from specviz.pair import LoadedModel
    from tests.tiny import TinyTokenizer

    pair = tiny_pair(vocab=16)
    for role, seed in (("target", 0), ("draft", 1)):
        model = sliding_qwen2(seed)
        loaded = LoadedModel(
            f"tiny-qwen2-{role}", model, torch.device("cpu"), "float32", 16, 0, "t"
        )
        setattr(pair, role, loaded)
    pair.tokenizer = TinyTokenizer(16, None)
    return pair


def _one_line(err: str) -> list[str]:
    return [line for line in err.splitlines() if "sliding-window attention" in line]


@pytest.mark.parametrize("backend", ["auto", "eager", BACKEND])
def test_a_sliding_window_model_runs_eager_with_one_line(
    sliding_pair, backend, monkeypatch, capsys
):
    monkeypatch.setattr("specviz.backend.auto_backend", lambda device: BACKEND)  # auto compiles
    pair = sliding_pair.with_compile(backend)
    assert pair.compile_backend is None
    lines = _one_line(capsys.readouterr().err)
    assert len(lines) == 1 and f"window {WINDOW}" in lines[0] and "runs eager" in lines[0]
    ar = generate(pair, PROMPT, _greedy(method="ar"))
    spec = generate(pair, PROMPT, _greedy())
    assert len(ar.token_ids) == 40 > 2 * WINDOW  # far past the window
    assert spec.token_ids == ar.token_ids
    assert "compiled" not in spec.models["target"]


def test_the_cli_runs_a_sliding_window_model_eager(sliding_pair, monkeypatch, capsys):
    import json

    import specviz.models
    from specviz.cli import main as cli

    monkeypatch.setattr(specviz.models, "load_pair", lambda *a, **k: sliding_pair)
    argv = ["generate", "--prompt", PROMPT, "--greedy", "--max-new-tokens", "12", "--json"]
    assert cli.main([*argv, "--gamma", str(GAMMA), "--compile", "eager"]) == 0
    out = capsys.readouterr()
    assert len(_one_line(out.err)) == 1
    trace = json.loads(out.out)
    assert len(trace["token_ids"]) == 12 and "compiled" not in trace["models"]["target"]


def test_the_static_cache_refuses_sliding_layers_itself(sliding_pair):
    # the rollback cannot be exact there: such a layer keeps WINDOW positions and rolls them
    model = sliding_pair.target.model
    with pytest.raises(ValueError, match="cannot roll back StaticSlidingWindowLayer"):
        StaticLM(model, "t", 16, compiler_for(BACKEND), (1, GAMMA + 1), 64)


@pytest.mark.parametrize(
    "family,fields,window",
    [
        ("llama", {}, None),
        ("qwen2", {}, None),  # use_sliding_window off: no window
        ("qwen2", {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 0}, 8),
        # every layer below max_window_layers attends in full: nothing slides
        ("qwen2", {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 2}, None),
        ("mistral", {"sliding_window": 16}, 16),  # Mistral v0.1: sliding_window, no layer_types
        ("mistral", {"sliding_window": None}, None),
        ("gemma2", {"sliding_window": 8}, 8),  # alternating sliding and full layers
        ("gemma3_text", {"sliding_window": 8}, 8),
    ],
)
def test_sliding_windows_are_found_in_every_family(family, fields, window):
    from types import SimpleNamespace

    from transformers import AutoConfig

    from specviz.backend import sliding_window

    config = AutoConfig.for_model(
        family,
        vocab_size=16,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        **fields,
    )
    model = SimpleNamespace(config=config, _can_compile_fullgraph=True)
    assert sliding_window(model) == window
    if window is None:
        check_compilable(model, BACKEND)
    else:
        with pytest.raises(SlidingWindowRefused, match=f"window {window}"):
            check_compilable(model, BACKEND)
