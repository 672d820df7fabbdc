"""Which models a token tree may run on (specviz.lm.tree_refusal).

A tree's custom 4D attention mask reaches every layer unchanged, so a sliding-window or
chunked layer attends past its window. Those layers are read as transformers' caches read
them: from the decoder's text config (nested in Gemma3Config and Llama4Config, which
AutoModelForCausalLM loads for gemma-3-4b and up and for Llama 4), with its layer_types,
sliding_window and attention_chunk_size.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from specviz.config import Settings
from specviz.lm import CachedLM, tree_refusal
from specviz.rounds import check_tree_request
from tests.tiny import tiny_model, tiny_pair

WINDOW = 4
VOCAB = 32


def tiny_gemma3():
    """A tiny Gemma3ForConditionalGeneration (a sliding layer of WINDOW, then a full one)."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    text = {
        "vocab_size": VOCAB,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 8,
        "layer_types": ["sliding_attention", "full_attention"],
        "sliding_window": WINDOW,
        "max_position_embeddings": 64,
    }
    vision = {
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "image_size": 16,
        "patch_size": 4,
    }
    config = Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=4,
        boi_token_index=VOCAB - 3,
        eoi_token_index=VOCAB - 2,
        image_token_index=VOCAB - 1,
    )
    assert getattr(config, "layer_types", None) is None  # only the text config has them
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return Gemma3ForConditionalGeneration(config).eval()


LLAMA4_TEXT = {
    "vocab_size": VOCAB,
    "hidden_size": 16,
    "intermediate_size": 32,
    "intermediate_size_mlp": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 8,
    "num_local_experts": 1,
    "attention_chunk_size": WINDOW,
    "max_position_embeddings": 64,
}


def tiny_llama4_text():
    from transformers import Llama4ForCausalLM, Llama4TextConfig

    with torch.random.fork_rng():
        torch.manual_seed(0)
        return Llama4ForCausalLM(Llama4TextConfig(**LLAMA4_TEXT)).eval()


def tiny_llama4():
    """Llama4ForConditionalGeneration: its Llama4Config nests the chunked text config."""
    from transformers import Llama4Config, Llama4ForConditionalGeneration

    vision = {
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "image_size": 16,
        "patch_size": 4,
        "vision_output_dim": 16,
        "projector_input_dim": 16,
        "projector_output_dim": 16,
    }
    config = Llama4Config(text_config=LLAMA4_TEXT, vision_config=vision)
    assert getattr(config, "attention_chunk_size", None) is None  # nested only
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return Llama4ForConditionalGeneration(config).eval()


def test_a_multimodal_gemma3_with_a_nested_sliding_layer_is_refused():
    why = tree_refusal(tiny_gemma3())
    assert why is not None and "\n" not in why
    assert why.startswith("Gemma3ForConditionalGeneration has sliding-window")
    assert "sliding_attention" in why


@pytest.mark.parametrize("build", [tiny_llama4, tiny_llama4_text], ids=["multimodal", "text"])
def test_a_llama4_with_chunked_attention_is_refused(build):
    why = tree_refusal(build())
    assert why is not None and "\n" not in why
    assert "sliding-window" in why


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_a_full_attention_llama_is_accepted(impl):
    model = tiny_model(16, 0, layers=2, attn_implementation=impl)
    assert model.config._attn_implementation == impl
    assert tree_refusal(model) is None


def test_the_other_refusals_stay():
    model = tiny_model(16, 0, sliding_window=8)  # a window set on any config is refused
    assert "sliding-window" in tree_refusal(model)
    assert tree_refusal(torch.nn.Linear(2, 2)) == "Linear takes no attention mask"
    # a config that is not a transformers one: its top-level fields
    bare = torch.nn.Linear(2, 2)
    bare.config = SimpleNamespace(_attn_implementation="sdpa")
    assert tree_refusal(bare) is None
    bare.config.sliding_window = 8
    assert "sliding-window" in tree_refusal(bare)
    bare.config.use_sliding_window = False
    assert tree_refusal(bare) is None
    bare.config._attn_implementation = "flash_attention_2"
    assert tree_refusal(bare).endswith("this model uses flash_attention_2")


def chain_gap(model, vocab: int) -> float:
    """The largest logit gap between a causal call and a masked call with the causal mask
    on the same tokens (a chain is a tree too), past a window of prefix."""
    seq = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    start, n = 2, len(seq) - 2
    a, b = CachedLM(model, vocab), CachedLM(model, vocab)
    a.logits(seq[:start])
    causal = a.logits(seq, keep=n)
    b.logits(seq[:start])
    visible = torch.ones(n, len(seq), dtype=torch.bool).tril(diagonal=start)
    masked = b.masked_logits(seq[start:], list(range(start, len(seq))), visible)
    return (causal - masked).abs().max().item()


def test_why_a_tree_mask_is_wrong_on_a_sliding_model():
    """The mask lets the sliding layer see past its window: the logits move."""
    assert chain_gap(tiny_model(16, 0, layers=2), 16) < 1e-5
    assert chain_gap(tiny_gemma3(), VOCAB - 3) > 1e-2


def test_check_tree_request_refuses_a_gemma3_target_in_one_line():
    pair = tiny_pair()
    pair.target = dataclasses.replace(pair.target, model=tiny_gemma3())
    with pytest.raises(ValueError) as err:
        check_tree_request(pair, Settings(tree=(2,), max_new_tokens=8))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(
        "a tree cannot run on this target: Gemma3ForConditionalGeneration has sliding-window"
    )
    check_tree_request(pair, Settings(max_new_tokens=8))  # a chain still runs there
