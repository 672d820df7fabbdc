"""Tiny real models for tests: random Llama networks with a vocabulary small enough that
the exact target distribution over short continuations can be enumerated."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specviz.pair import LoadedModel, ModelPair


class TinyTokenizer:
    """Token i is the text "<i>"; a prompt is a space-separated list of ids."""

    chat_template = None

    def __init__(self, vocab: int, eos: int | None) -> None:
        self.vocab, self.eos_token_id = vocab, eos

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [int(t) for t in text.split()]}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(
            f"<{i}>" for i in ids if not (skip_special_tokens and i == self.eos_token_id)
        )

    def __len__(self) -> int:
        return self.vocab

    def get_vocab(self) -> dict[str, int]:
        return {f"<{i}>": i for i in range(self.vocab)}


def tiny_model(
    vocab: int, seed: int, sharpness: float | None = 4.0, layers: int = 1, **config: Any
) -> LlamaForCausalLM:
    """A seeded tiny Llama; `config` overrides its LlamaConfig fields, and a sharpness
    scales the output layer to that standard deviation (None: transformers' own init)."""
    fields = {
        "vocab_size": vocab,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": layers,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
        "tie_word_embeddings": False,
        **config,
    }
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(LlamaConfig(**fields))
        if sharpness is not None:
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
    sharpness: float = 4.0,
    target_vocab: int | None = None,
) -> ModelPair:
    """A target and a draft with different random weights and one toy tokenizer.

    target_vocab / draft_vocab give a model more output columns than the tokenizer has
    tokens, as padded embeddings do."""

    def loaded(name: str, model: Any, v: int) -> LoadedModel:
        return LoadedModel(name, model, torch.device("cpu"), "float32", v, 0.0, "test")

    return ModelPair(
        name="tiny",
        target=loaded(
            "tiny-target",
            tiny_model(target_vocab or vocab, target_seed, sharpness),
            target_vocab or vocab,
        ),
        draft=loaded(
            "tiny-draft",
            tiny_model(draft_vocab or vocab, draft_seed, sharpness),
            draft_vocab or vocab,
        ),
        tokenizer=TinyTokenizer(vocab, eos),
        eos_ids=frozenset() if eos is None else frozenset({eos}),
        context_len=128,
    )


def close_pair(vocab: int = 16, noise: float = 0.16, sharpness: float = 1.0) -> ModelPair:
    """A draft that is the target with its output layer perturbed (noise times the weights'
    standard deviation): both accepted and rejected drafts are common, greedy included."""
    pair = tiny_pair(vocab=vocab, sharpness=sharpness)
    draft = copy.deepcopy(pair.target.model)
    g = torch.Generator().manual_seed(99)
    with torch.no_grad():
        w = draft.lm_head.weight
        w.add_(torch.randn(w.shape, generator=g) * noise * w.std())
    pair.draft = LoadedModel(
        "tiny-close-draft", draft, torch.device("cpu"), "float32", vocab, 0, "test"
    )
    return pair


class BagLM(torch.nn.Module):
    """A very small autoregressive LM whose context lives in a transformers DynamicCache.

    logits(t) = A[x_t] + mean(E[x_1..x_t]) @ B + P[t]: every logit depends on the whole
    prefix through the cache, so a cache that is not cropped to the accepted prefix changes
    the distribution. About 20x cheaper per call than a transformers Llama, which is what
    lets the distribution tests draw tens of thousands of samples in seconds.

    A call's logits are a function of the cache's content after its update (the prefix's
    embeddings, the new tokens' last) and of how many tokens it fed, so each such pair is
    computed once and its rows handed out again as a copy (``seen``): the same numbers, read
    off the same cache, at about a third of the call's cost where samples share prefixes.
    """

    def __init__(self, vocab: int, seed: int, sharpness: float = 2.0, dim: int = 8) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.A = torch.nn.Parameter(torch.randn(vocab, vocab, generator=g) * sharpness)
        self.E = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))
        self.B = torch.nn.Parameter(torch.randn(dim, vocab, generator=g) * sharpness)
        self.P = torch.nn.Parameter(torch.randn(128, vocab, generator=g))
        self.seen: dict[tuple[bytes, int], torch.Tensor] = {}

    def forward(self, input_ids, past_key_values, use_cache=True, logits_to_keep=1, **_):
        x = input_ids[0]  # [n]
        start = past_key_values.get_seq_length()
        e = self.E[x][None, None]  # [1, 1, n, dim]
        keys, _ = past_key_values.update(e, e, 0)  # the whole prefix: [1, 1, L, dim]
        key = (keys.detach().contiguous().numpy().tobytes(), len(x))
        logits = self.seen.get(key)
        if logits is None:
            pos = torch.arange(start, start + len(x))
            mean = keys[0, 0].cumsum(0)[start:] / (pos + 1)[:, None]  # [n, dim]
            logits = self.seen[key] = self.A[x] + mean @ self.B + self.P[pos]  # [n, V]
        return SimpleNamespace(logits=logits[None, -logits_to_keep:].clone())

    @torch.no_grad()
    def batch_logits(self, ids: torch.Tensor) -> torch.Tensor:
        """The same logits at every position of each row of ids [S, n], computed directly
        from the formula (no cache): [S, n, V]."""
        pos = torch.arange(ids.shape[1])
        mean = self.E[ids].cumsum(1) / (pos + 1)[None, :, None]  # [S, n, dim]
        return self.A[ids] + mean @ self.B + self.P[pos]


def bag_pair(
    vocab: int = 6, target_seed: int = 0, draft_seed: int = 1, eos: int | None = None
) -> ModelPair:
    """A BagLM target and draft with different weights (token eos ends a generation)."""

    def loaded(name: str, model: Any) -> LoadedModel:
        return LoadedModel(name, model.eval(), torch.device("cpu"), "float32", vocab, 0.0, "test")

    return ModelPair(
        name="bag",
        target=loaded("bag-target", BagLM(vocab, target_seed)),
        draft=loaded("bag-draft", BagLM(vocab, draft_seed)),
        tokenizer=TinyTokenizer(vocab, eos),
        eos_ids=frozenset() if eos is None else frozenset({eos}),
        context_len=128,
    )


def text_pair(noise: float = 0.3, sharpness: float = 4.0, context: int = 1024) -> ModelPair:
    """Tiny Llama networks over the offline pair's own tokenizer (its chat template, its
    49152 tokens): any text is a prompt, and a run of a hundred tokens costs milliseconds.
    Both draw short lowercase words (an output bias of -30 on every other token), so that
    the page's rows are one line high as with the offline pair. The draft is the target
    with its output layer perturbed (noise times the weights' standard deviation): at the
    defaults about half the drafts are kept, so that every status shows within a few dozen
    tokens. No EOS: a run always generates its budget."""
    import re

    from transformers import AutoTokenizer

    from specviz.backend.offline import prepare_offline

    tokenizer = AutoTokenizer.from_pretrained(prepare_offline())
    vocab = len(tokenizer)
    short = re.compile(r"\u0120?[a-z]{1,5}")  # "\u0120" is the byte-level BPE's space
    bias = torch.full((vocab,), -30.0)
    for token, i in tokenizer.get_vocab().items():
        if i < vocab and short.fullmatch(token):
            bias[i] = 0.0

    def network(seed: int, perturb: float) -> LlamaForCausalLM:
        model = tiny_model(vocab, 0, sharpness, max_position_embeddings=context)
        head = torch.nn.Linear(model.lm_head.in_features, vocab, bias=True)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            w = model.lm_head.weight
            head.weight.copy_(w + torch.randn(w.shape, generator=g) * perturb * w.std())
            head.bias.copy_(bias)
        model.lm_head = head
        return model.eval()

    def loaded(name: str, model: Any) -> LoadedModel:
        return LoadedModel(name, model, torch.device("cpu"), "float32", vocab, 0.0, "test")

    return ModelPair(
        name="tiny-text",
        target=loaded("tiny-text-target", network(0, 0.0)),
        draft=loaded("tiny-text-draft", network(99, noise)),
        tokenizer=tokenizer,
        eos_ids=frozenset(),
        context_len=context,
    )
