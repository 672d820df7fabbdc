"""Hub ids, loaded for real and offline.

A local hub cache, laid out as the hub client lays it out (``models--owner--name`` with
``blobs/``, ``snapshots/<revision>/`` and ``refs/main``), holds tiny Llama models that share
the offline pair's tokenizer: a target of two layers, a draft of one (the target's first
layer, embeddings and head, so the two often agree) and a model whose vocabulary is
narrower than the tokenizer. With HF_HUB_OFFLINE=1 and the hub cache pointed there, the
models load by hub id through ``specviz.models.load_pair``, the loader a Space uses.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from transformers import LlamaForCausalLM

from specviz import ui
from specviz.backend.offline import prepare_offline
from specviz.config import Deployment, Limits, Settings
from specviz.engine import generate
from specviz.models import load_pair
from tests.tiny import tiny_model

OWNER = "specviz-test"
TARGET = f"{OWNER}/tiny-llama-2-layers"
DRAFT = f"{OWNER}/tiny-llama-1-layer"
NARROW = f"{OWNER}/tiny-llama-narrow-vocab"
REVISION = "0123456789abcdef0123456789abcdef01234567"
PROMPTS = ["Why is the sky blue?", "Name three prime numbers.", "Write a haiku about rain."]


def tiny_llama(layers: int, vocab: int, seed: int) -> LlamaForCausalLM:
    return tiny_model(
        vocab,
        seed,
        sharpness=None,
        layers=layers,
        hidden_size=32,
        intermediate_size=64,
        num_key_value_heads=1,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=True,
        initializer_range=0.3,  # at the default 0.02 greedy decoding repeats one token
    )


def models() -> dict[str, LlamaForCausalLM]:
    target = tiny_llama(2, 49152, seed=0)
    with torch.no_grad():  # a quieter second layer: the one-layer draft agrees about half the time
        for lin in (target.model.layers[1].self_attn.o_proj, target.model.layers[1].mlp.down_proj):
            lin.weight.mul_(0.3)
    draft = tiny_llama(1, 49152, seed=1)
    state = {k: v for k, v in target.state_dict().items() if "layers.1." not in k}
    draft.load_state_dict(state)
    return {TARGET: target, DRAFT: draft, NARROW: tiny_llama(1, 49000, seed=2)}


def add_to_hub_cache(cache: Path, model_id: str, source: Path) -> None:
    """Store the files of source as the hub client does: content-addressed blobs,
    a snapshot of relative links to them, and refs/main naming the snapshot."""
    repo = cache / f"models--{model_id.replace('/', '--')}"
    blobs, snapshot = repo / "blobs", repo / "snapshots" / REVISION
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for f in sorted(source.iterdir()):
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        f.replace(blobs / digest)
        (snapshot / f.name).symlink_to(os.path.relpath(blobs / digest, snapshot))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    from transformers import AutoTokenizer

    cache = tmp_path_factory.mktemp("hub")
    tokenizer = AutoTokenizer.from_pretrained(prepare_offline())  # the offline pair's
    for model_id, model in models().items():
        staging = tmp_path_factory.mktemp("staging")
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        add_to_hub_cache(cache, model_id, staging)
    with pytest.MonkeyPatch.context() as mp:
        # huggingface_hub reads both variables once, at import: patch its constants too
        mp.setenv("HF_HUB_CACHE", str(cache))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
        mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        yield cache


@pytest.fixture(scope="module")
def hub_pair(hub_cache):
    return load_pair(draft=DRAFT, target=TARGET, dtype="float32", device="cpu")


def test_the_cache_has_the_hub_layout(hub_cache):
    from huggingface_hub import try_to_load_from_cache

    for model_id in (TARGET, DRAFT, NARROW):
        repo = hub_cache / f"models--{model_id.replace('/', '--')}"
        assert (repo / "refs" / "main").read_text() == REVISION
        config = try_to_load_from_cache(model_id, "config.json")
        assert config == str(repo / "snapshots" / REVISION / "config.json")
        assert Path(config).is_symlink() and Path(config).resolve().parent == repo / "blobs"


def test_hub_ids_load_offline_through_the_spaces_loader(hub_pair):
    assert hub_pair.name == "custom" and hub_pair.target.source == "hub"
    assert hub_pair.target.name == TARGET and hub_pair.draft.name == DRAFT
    assert hub_pair.target.model.config.num_hidden_layers == 2
    assert hub_pair.draft.model.config.num_hidden_layers == 1
    assert hub_pair.vocab_size == 49152 and hub_pair.eos_ids == frozenset({2})
    assert load_pair(draft=DRAFT, target=TARGET, dtype="float32", device="cpu") is hub_pair


def test_greedy_speculative_equals_greedy_autoregressive_on_the_hub_pair(hub_pair):
    accepted = rejected = 0
    for prompt in PROMPTS:
        s = Settings(greedy=True, gamma=3, max_new_tokens=24)
        ar = generate(hub_pair, prompt, s.with_(method="ar"))
        spec = generate(hub_pair, prompt, s)
        assert spec.token_ids == ar.token_ids, prompt
        assert len(set(ar.token_ids)) > 8  # not one token repeated
        accepted += spec.stats.accepted
        rejected += spec.stats.verified - spec.stats.accepted
    assert accepted > 0 and rejected > 0  # the drafts were tested both ways


def test_the_apps_custom_pair_runs_the_hub_models(hub_pair):
    form = ui.Form(
        prompt=PROMPTS[0],
        pair=ui.CUSTOM,
        custom_draft=DRAFT,
        custom_target=TARGET,
        dtype="float32",
        greedy=True,
        gamma=3,
        max_new_tokens=16,
    )
    source = ui.PairSource(ui.default_loader, ["default"], Deployment())  # default custom loader
    session = ui.new_session()
    frames = list(ui.run_updates(session, form, ui.AppContext(source, Limits())))
    expected = generate(hub_pair, PROMPTS[0], form.settings(Limits()).with_(method="ar"))
    assert session.spec.token_ids == expected.token_ids == session.ar.token_ids
    assert TARGET in session.spec.models["target"] and DRAFT in session.spec.models["draft"]
    assert "identical" in frames[-1]["greedy_check"]


def test_a_model_narrower_than_the_tokenizer_is_refused_at_load(hub_cache):
    with pytest.raises(ValueError) as err:
        load_pair(draft=DRAFT, target=NARROW, dtype="float32", device="cpu")
    message = str(err.value)
    assert f"the target {NARROW!r} embeds and scores only 49000 token ids" in message
    assert "tokenizer has 49152 tokens" in message and "\n" not in message
