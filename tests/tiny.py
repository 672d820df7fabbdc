"""Tiny real models for tests: random Llama networks with a vocabulary small enough that
the exact target distribution over short continuations can be enumerated."""

from __future__ import annotations

from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specviz.models import LoadedModel, ModelPair


class TinyTokenizer:
    """Token i is the text "<i>"; a prompt is a space-separated list of ids."""

    chat_template = None

    def __init__(self, vocab: int, eos: int | None) -> None:
        self.vocab, self.eos_token_id = vocab, eos

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [int(t) for t in text.split()]}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(f"<{i}>" for i in ids if not (skip_special_tokens and i == self.eos_token_id))

    def get_vocab(self) -> dict[str, int]:
        return {f"<{i}>": i for i in range(self.vocab)}


def tiny_model(vocab: int, seed: int, sharpness: float = 4.0) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        with torch.no_grad():
            # Spread the logits so that p and q are far from uniform and differ.
            model.lm_head.weight.mul_(sharpness / model.lm_head.weight.std())
    return model.eval()


def tiny_pair(
    vocab: int = 8,
    eos: int | None = None,
    target_seed: int = 0,
    draft_seed: int = 1,
    draft_vocab: int | None = None,
) -> ModelPair:
    """A target and a draft with different random weights and one toy tokenizer."""
    def loaded(name: str, model: Any, v: int) -> LoadedModel:
        return LoadedModel(name, model, torch.device("cpu"), "float32", v, 0.0, "test")

    return ModelPair(
        name="tiny",
        target=loaded("tiny-target", tiny_model(vocab, target_seed), vocab),
        draft=loaded("tiny-draft", tiny_model(draft_vocab or vocab, draft_seed), draft_vocab or vocab),
        tokenizer=TinyTokenizer(vocab, eos),
        eos_ids=frozenset() if eos is None else frozenset({eos}),
        context_len=128,
    )
