"""Training a feature head on the target's own answers (specviz.head_train), where it is kept
(specviz.head_cache), `python -m specviz train-head`, and a head in the EAGLE authors'
published layout (specviz.head_published): on tiny random Llama targets, no network."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from specviz import head_cache
from specviz import head_train as ht
from specviz.cli.main import main
from specviz.drafters.head import FeatureHead
from specviz.head_prompts import HELD_OUT, TRAIN
from tests.tiny import tiny_pair

VOCAB = 8


def norm(text: str) -> str:
    return " ".join(text.lower().split())


def test_training_and_held_out_prompts_are_disjoint() -> None:
    train, held = [norm(p) for p in TRAIN], [norm(p) for p in HELD_OUT]
    assert len(train) >= 200 and len(held) >= 40
    assert len(set(train)) == len(train) and len(set(held)) == len(held)
    assert not set(train) & set(held)


@pytest.fixture(scope="module")
def target(one_thread):
    return tiny_pair(vocab=VOCAB).target.model


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, VOCAB, (2 + i % 4,), generator=g).tolist() for i in range(12)]


def corpus(target, prompts, tokens=200, seed=3, c=None):
    return ht.fill_corpus(
        c or ht.Corpus(), target, prompts, tokens=tokens, seed=seed, max_new=12, rows=4, vocab=VOCAB
    )


@pytest.fixture(scope="module")
def data(target, prompts):
    return corpus(target, prompts)


@pytest.fixture(scope="module")
def held(target, prompts):
    return corpus(target, prompts[:4], tokens=None, seed=9)


def test_the_answers_are_reproducible_and_continue_where_they_stopped(target, prompts, data):
    again = corpus(target, prompts)
    assert data.answer_tokens >= 200 and len(data.ids) == 4 * data.batches_done
    assert all(torch.equal(a, b) for a, b in zip(data.ids, again.ids, strict=True))
    other = corpus(target, prompts, seed=4)
    assert any(not torch.equal(a, b) for a, b in zip(data.ids, other.ids, strict=False))
    # cut after one batch, then continued: the same ids as one go
    cut = corpus(target, prompts, tokens=1)
    assert cut.batches_done == 1
    cut.complete = False
    corpus(target, prompts, c=cut)
    assert all(torch.equal(a, b) for a, b in zip(data.ids, cut.ids, strict=True))
    # the features: the target's last hidden state after its final norm, at every position
    head = FeatureHead.for_target(target)
    ids = data.ids[0]
    assert data.features[0].shape == (len(ids), target.config.hidden_size)
    torch.testing.assert_close(head.logits(data.features[0]), target(ids[None]).logits[0])


SETTINGS = ht.TrainSettings(batch=4, lr=1e-2, warmup=2, checkpoint_every=5, eval_every=10**9)


def fresh_head(target, seed=0):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return FeatureHead.for_target(target)


def test_training_lowers_the_loss_and_resumes_to_the_same_state(target, data, held, tmp_path):
    whole = fresh_head(target)
    batch = ht.collate(data, range(len(data.ids)))
    with torch.no_grad():
        before = float(ht.eagle_loss(whole, batch, VOCAB, 0.1)[0])
    state = ht.train(
        whole, data, held, SETTINGS, VOCAB, checkpoint=tmp_path / "a.pt", key="k", max_steps=20
    )
    with torch.no_grad():
        assert float(ht.eagle_loss(whole, batch, VOCAB, 0.1)[0]) < 0.5 * before
    assert state.curve[-1]["alpha"] > state.curve[0]["alpha"]
    # interrupted at a checkpoint, then continued by a head of other weights
    cut = fresh_head(target)
    ht.train(cut, data, held, SETTINGS, VOCAB, checkpoint=tmp_path / "b.pt", key="k", max_steps=10)
    resumed = fresh_head(target, seed=7)
    again = ht.train(
        resumed, data, held, SETTINGS, VOCAB, checkpoint=tmp_path / "b.pt", key="k", max_steps=20
    )
    assert (again.step, again.tokens) == (state.step, state.tokens)
    mine, theirs = whole.own_state(), resumed.own_state()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    with pytest.raises(ValueError, match="other settings"):
        ht.train(resumed, data, held, SETTINGS, VOCAB, checkpoint=tmp_path / "b.pt", key="x")


def test_the_cache_key_follows_the_targets_weights(target, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    key = head_cache.head_key(target)
    assert head_cache.head_key(target) == key
    assert head_cache.head_file(target) == tmp_path / "heads" / key / head_cache.HEAD_NAME
    changed = copy.deepcopy(target)
    with torch.no_grad():
        changed.model.norm.weight[0] += 1e-3
    assert head_cache.head_key(changed) != key
    assert head_cache.head_key(copy.deepcopy(target)) == key
    assert head_cache.head_key(copy.deepcopy(target).to(torch.bfloat16)) != key
    assert head_cache.head_key(target, bias=True) != key


def text_prompts(pair):
    """A tiny tokenizer's prompt for any text: one id per word."""
    pair.encode_prompt = lambda text, raw=False: [len(w) % VOCAB for w in text.split()]
    return pair


def test_the_command_trains_caches_and_continues_and_head_for_finds_it(
    one_thread, tmp_path, monkeypatch, capsys
):
    from specviz import head_prompts, models
    from specviz.drafters.head import head_for

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    pair = text_prompts(tiny_pair(vocab=VOCAB))
    monkeypatch.setattr(models, "load_pair", lambda *a, **k: pair)
    monkeypatch.setattr(head_prompts, "TRAIN", TRAIN[:12])
    monkeypatch.setattr(head_prompts, "HELD_OUT", HELD_OUT[:4])
    assert main(["train-head", "--tokens", "100", "--steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "held-out alpha" in out.splitlines()[-1] and "top-1" in out
    record = json.loads(head_cache.record_file(pair.target.model).read_text())
    assert record["steps"] == 3 and record["data"]["answer_tokens"] >= 100
    assert record["curve"][0]["tokens"] == 0 and record["machine"]["cpu"]
    assert main(["train-head", "--tokens", "100", "--steps", "5"]) == 0  # continues
    record = json.loads(head_cache.record_file(pair.target.model).read_text())
    assert record["steps"] == 5 and record["curve"][-1]["step"] == 5
    head = head_for(pair)
    saved = head_cache.head_file(pair.target.model)
    assert head.own_state().keys() == FeatureHead.for_target(pair.target.model).own_state().keys()
    capsys.readouterr()
    # other settings than the checkpoint's: refused before any answer is generated
    assert main(["train-head", "--tokens", "100", "--seed", "2", "--steps", "6"]) == 2
    assert "--fresh" in capsys.readouterr().err
    assert len(list(saved.parent.glob("data-*.pt"))) == 1
    assert main(["train-head", "--tokens", "100", "--seed", "2", "--steps", "1", "--fresh"]) == 0


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--budget-minutes", "0"], "budget-minutes must be in (0, 1440]"),
        (["--budget-minutes", "nan"], "budget-minutes must be in (0, 1440]"),
        (["--budget-minutes", "ten"], "invalid float value"),
        (["--tokens", "5"], "tokens must be in 100..10000000"),
        (["--seed", "-1"], "seed must be in 0..2147483647"),
        (["--steps", "0"], "steps must be in 1..10000000"),
        (["--pair", "gpt-5"], "unknown pair 'gpt-5'"),
        (["--device", "tpu"], "invalid choice"),
    ],
)
def test_bad_flags_are_one_line_and_exit_code_2(capsys, argv, message):
    assert main(["train-head", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and err.count("\n") == 1 and "Traceback" not in err


# --- the EAGLE authors' published layout ---------------------------------------------------

# yuhuili/EAGLE-LLaMA3.1-Instruct-8B's config.json, at a tiny target's sizes
RELEASE_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "bias": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 16,
    "initializer_range": 0.02,
    "intermediate_size": 32,
    "max_position_embeddings": 2048,
    "model_type": "llama",
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "num_key_value_heads": 2,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": VOCAB,
}
RELEASE_KEYS = [
    "layers.0.self_attn.q_proj.weight",
    "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight",
    "layers.0.self_attn.o_proj.weight",
    "layers.0.mlp.gate_proj.weight",
    "layers.0.mlp.up_proj.weight",
    "layers.0.mlp.down_proj.weight",
    "layers.0.post_attention_layernorm.weight",
    "fc.weight",
]


def release(tmp_path, bias=False, embed=False, safetensors=False):
    """A checkpoint in the release's layout with random float16 weights."""
    h, i = 16, 32
    shapes = {
        "layers.0.self_attn.q_proj.weight": (h, h),
        "layers.0.self_attn.k_proj.weight": (h, h),
        "layers.0.self_attn.v_proj.weight": (h, h),
        "layers.0.self_attn.o_proj.weight": (h, h),
        "layers.0.mlp.gate_proj.weight": (i, h),
        "layers.0.mlp.up_proj.weight": (i, h),
        "layers.0.mlp.down_proj.weight": (h, i),
        "layers.0.post_attention_layernorm.weight": (h,),
        "fc.weight": (h, 2 * h),
    }
    g = torch.Generator().manual_seed(5)
    state = {k: (torch.randn(s, generator=g) * 0.3).half() for k, s in shapes.items()}
    config = dict(RELEASE_CONFIG)
    if bias:
        state["fc.bias"] = torch.randn(h, generator=g).half()
        del config["bias"]  # the authors' loader's default: a bias
    if embed:
        state["embed_tokens.weight"] = torch.randn(VOCAB, h, generator=g).half()
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    if safetensors:
        from safetensors.torch import save_file

        save_file(state, str(tmp_path / "model.safetensors"))
    else:
        torch.save(state, tmp_path / "pytorch_model.bin")
    return state


def test_a_published_head_loads_and_drafts(one_thread, tmp_path):
    from specviz.config import Settings
    from specviz.engine import generate
    from specviz.head_published import load_published

    pair = tiny_pair(vocab=VOCAB)
    state = release(tmp_path / "plain")
    head = load_published(tmp_path / "plain", pair.target.model)
    assert sorted(head.own_state()) == sorted(RELEASE_KEYS)
    for k, v in head.own_state().items():
        assert torch.equal(v, state[k].float())
    assert head.config.rope_parameters["rope_theta"] == 500000.0
    f = torch.randn(2, 5, 16)
    assert head(f, torch.randint(0, VOCAB, (2, 5))).shape == (2, 5, 16)
    # the older releases' layout: fc's bias (the default), the target's embedding, safetensors
    biased = release(tmp_path / "biased", bias=True, embed=True, safetensors=True)
    other = load_published(tmp_path / "biased", pair.target.model)
    assert torch.equal(other.own_state()["fc.bias"], biased["fc.bias"].float())
    # drafting with it: greedy speculative output equals greedy decoding
    pair.head = head
    s = Settings(drafter="eagle", gamma=3, max_new_tokens=12, temperature=0.0, seed=0)
    spec = generate(pair, "1 2 3", s)
    ar = generate(pair, "1 2 3", s.with_(method="ar"))
    assert spec.token_ids == ar.token_ids and spec.stats.drafted > 0


@pytest.mark.parametrize(
    "change,message",
    [
        ({"num_hidden_layers": 2}, "one decoder layer"),
        ({"hidden_size": 32}, "hidden size 32 is not the target's 16"),
        ({"intermediate_size": 64}, "has shape"),
    ],
)
def test_a_release_that_does_not_fit_is_refused_in_one_line(tmp_path, change, message):
    from specviz.head_published import load_published

    release(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ValueError, match=message) as info:
        load_published(tmp_path, tiny_pair(vocab=VOCAB).target.model)
    assert "\n" not in str(info.value)


def test_a_hub_id_not_in_the_cache_is_refused_offline():
    # HF_HUB_OFFLINE=1 (tests/conftest.py): nothing is downloaded
    from specviz.head_published import load_published

    with pytest.raises(ValueError, match="could not read config.json") as info:
        load_published("yuhuili/EAGLE-LLaMA3.1-Instruct-8B", tiny_pair(vocab=VOCAB).target.model)
    assert "\n" not in str(info.value)


def test_the_eagle_head_flag_gives_the_pair_a_published_head(tmp_path, monkeypatch):
    """--eagle-head SRC: the command's pair carries the release's head, kept through the
    pair's compiled and end-of-text variants, and a run with the eagle drafter uses it."""
    from specviz import models
    from specviz.cli.args import load_pair_from_args
    from specviz.cli.main import build_parser
    from specviz.config import Settings
    from specviz.engine import generate

    pair = tiny_pair(vocab=VOCAB)
    release(tmp_path / "plain")
    monkeypatch.setattr(models, "load_pair", lambda *a, **k: pair)
    monkeypatch.setattr(models, "resolve_pair", lambda *a, **k: None)
    argv = ["generate", "--prompt", "1 2", "--drafter", "eagle", "--compile", "off"]
    args = build_parser().parse_args([*argv, "--eagle-head", str(tmp_path / "plain")])
    got = load_pair_from_args(args)
    assert got.head is not None and got.without_eos().head is got.head
    assert got.with_compile("off").head is got.head
    s = Settings(drafter="eagle", gamma=3, max_new_tokens=8, temperature=0.0)
    spec = generate(got, "1 2 3", s)
    assert spec.stats.drafted > 0 and "EAGLE head" in spec.models["draft"]
