"""Pairs: the registry, ids, tokenizer compatibility, the offline pair."""

from __future__ import annotations

import pytest

from specviz.config import Settings
from specviz.engine import prompt_ids_for
from specviz.models import (
    PAIRS,
    check_model_id,
    check_tokenizers,
    load_pair,
    resolve_dtype,
    resolve_pair,
)
from tests.tiny import TinyTokenizer


@pytest.mark.parametrize(
    "model_id",
    [
        "../etc/passwd",
        "/abs/path",
        "https://huggingface.co/x/y",
        "a/../b",
        "a/b/c",
        "",
        "~/m",
        "offline:nope",
        "a b",
    ],
)
def test_path_like_or_malformed_ids_are_refused(model_id):
    with pytest.raises(ValueError):
        check_model_id(model_id)


def test_hub_ids_are_accepted():
    assert check_model_id("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert check_model_id("gpt2") == "gpt2"


def test_registry_has_the_offline_default_and_hub_pairs():
    assert resolve_pair(None, None, None) is PAIRS["default"] == resolve_pair("default", None, None)
    assert {"smollm2", "qwen2.5", "llama3"} <= set(PAIRS)
    with pytest.raises(ValueError, match="unknown pair"):
        resolve_pair("nope", None, None)


def test_tokenizer_mismatch_names_both_models():
    with pytest.raises(ValueError, match="tokenizer mismatch: draft 'd/x'.*target 't/y'"):
        check_tokenizers(TinyTokenizer(8, None), TinyTokenizer(9, None), "d/x", "t/y")
    check_tokenizers(TinyTokenizer(8, None), TinyTokenizer(8, None), "d/x", "t/y")


@pytest.mark.parametrize("role", ["target", "draft"])
def test_a_tokenizer_wider_than_a_model_is_refused(role):
    from tests.tiny import tiny_pair

    # 10 tokens, but one model embeds and scores only 8: ids 8 and 9 could reach it
    narrow = {f"{role}_vocab": 8, "draft_vocab" if role == "target" else "target_vocab": 10}
    with pytest.raises(ValueError) as err:
        tiny_pair(vocab=10, **narrow)
    message = str(err.value)
    assert f"{role} 'tiny-{role}'" in message and "8 token ids" in message
    assert "tokenizer has 10" in message and "\n" not in message
    tiny_pair(vocab=8, target_vocab=12, draft_vocab=9)  # wider (padded) models are fine


def test_token_width_reads_the_model_not_the_config():
    from specviz.pair import token_width
    from tests.tiny import tiny_model

    model = tiny_model(12, seed=0)
    assert token_width(model) == 12
    model.config.vocab_size = 99  # a stale config must not widen what the model can embed
    assert token_width(model) == 12


def test_unknown_hub_model_fails_cleanly_offline():
    with pytest.raises(ValueError, match="could not load the tokenizer of 'nobody/no-such-model'"):
        load_pair(draft="nobody/no-such-model", target="nobody/no-such-model")


def test_offline_pair_loads_once_and_runs_fp32(offline_pair):
    assert load_pair("default", dtype="float32", device="cpu") is offline_pair
    assert offline_pair.target.dtype == "float32"
    from specviz.backend import draft_choice

    choice = offline_pair.draft.choice
    assert choice is not None and choice.variant in draft_choice.VARIANTS
    assert offline_pair.draft.dtype == draft_choice.describe_variant(choice.variant)
    # the models table, generate's header and the trace show the variant with c and alpha
    assert choice.summary() in offline_pair.describe()["draft"]
    assert f"c {choice.c:.2f}" in choice.summary()  # on the path that decided
    if choice.decided_by == "packaged" and choice.chosen.packaged_step_ms:
        assert choice.c == choice.chosen.packaged_step_ms / choice.packaged_target_ms
    else:
        assert choice.c == choice.chosen.c
    assert offline_pair.vocab_size == 49152 and offline_pair.eos_ids


def test_auto_dtype_keeps_the_offline_target_in_fp32():
    import torch

    assert resolve_dtype("auto", torch.device("cpu"), offline=True) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda"), offline=False) == torch.bfloat16
    assert resolve_dtype("float32", torch.device("cuda"), offline=False) == torch.float32


def test_chat_template_is_applied_unless_raw(offline_pair):
    s = Settings()
    chat = prompt_ids_for(offline_pair, "Hello", s)
    raw = prompt_ids_for(offline_pair, "Hello", s, raw=True)
    assert len(chat) > len(raw) and offline_pair.tokenizer.decode(raw) == "Hello"


def test_batch_size_above_one_is_refused(offline_pair):
    with pytest.raises(ValueError, match="batch size must be 1"):
        prompt_ids_for(offline_pair, ["one", "two"], Settings())
