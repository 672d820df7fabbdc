"""A causal LM plus the KV cache of one request.

Both the target and the model drafter keep a cache of the tokens they have already seen.
``CachedLM.logits`` feeds only what the cache lacks; ``CachedLM.rollback`` crops the cache
to the longest prefix it shares with the accepted sequence. The model itself is shared
read-only between requests; the cache belongs to one request.

A target spread over several devices by a device map (accelerate's hooks move activations
from block to block) returns its logits on the device of its last block; ``CachedLM`` hands
them over on one chosen device, so that p and q meet where the verification runs.

For a drafted tree (specviz.tree), ``CachedLM.masked_logits`` feeds tokens after the cache
with a custom attention mask and explicit position ids (several tokens at one position, each
seeing only its ancestors), and ``CachedLM.keep`` then gathers the accepted path: the cache
holds branches in between, and only those two methods may touch it then.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import torch
from transformers import DynamicCache

from specviz.clock import clock


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    i = 0
    while a[i] == b[i]:
        i += 1
    return i


def input_device(model: torch.nn.Module) -> torch.device:
    """Where a model's input ids go: the device of its first weight that is not offloaded.

    Weights that accelerate offloads (to the CPU or disk) sit on the meta device; its hooks
    move inputs on to each block's execution device.
    """
    for w in model.parameters():
        if w.device.type != "meta":
            return w.device
    return torch.device("cpu")


class ModelCache(Protocol):
    """One request's cache of one model, as the engine and the drafters use it: CachedLM on
    the eager path, specviz.backend.StaticLM on the compiled path."""

    vocab_size: int
    tokens: list[int]  # the tokens whose keys and values the cache holds
    calls: int  # forwards so far
    busy_s: float  # seconds inside the model's forward so far
    # whether it can keep the model's last hidden state of its calls (want_hidden): the
    # eager cache can, and the compiled path's where its forwards return it (the aoti
    # packages; not torch.compile's)
    gives_hidden: bool

    def logits(self, seq: list[int], keep: int = 1) -> torch.Tensor:
        """Logits [keep, V] for the last `keep` positions of seq, feeding only uncached
        tokens."""
        ...

    def rollback(self, seq: list[int]) -> None:
        """Keep only the longest prefix the cache shares with seq."""
        ...

    def close(self) -> None:
        """The request is over: release what the cache holds (once)."""
        ...

    def prefix_kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's keys and values of the cached tokens ([1, heads, cached, dim])."""
        ...

    def take_prefix(self, tokens: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """An empty cache takes these tokens' keys and values, as another model of the same
        layout computed them (prefix_kv), in this model's dtype, instead of reading them."""
        ...


def kv_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype a model's attention computes its keys and values in: its embeddings'."""
    return model.get_input_embeddings().weight.dtype


def load_layers(
    layers: list[Any],
    kv: list[tuple[torch.Tensor, torch.Tensor]],
    dtype: torch.dtype,
    n: int,
    device: torch.device,
) -> None:
    """Append each layer's keys and values (kv, one pair a layer, n positions each) to an
    empty cache's layers, converted to dtype on device; a cache of another layout, or layers
    that kept fewer positions (a sliding window), are refused (ValueError, one line)."""
    if len(layers) != len(kv):
        raise ValueError(f"cannot take keys and values of {len(kv)} layers into {len(layers)}")
    if any(keys.shape[-2] != n or values.shape[-2] != n for keys, values in kv):
        raise ValueError(f"cannot take keys and values that do not hold all {n} positions")
    for layer, (keys, values) in zip(layers, kv, strict=True):
        layer.update(keys.to(device, dtype), values.to(device, dtype))


class CachedLM:
    """One request's handle on a model: its KV cache and the tokens that cache holds.

    Logits are cut to the tokenizer's vocabulary: output columns beyond it are embedding
    padding (151936 vs 152064 in one family), never real tokens, and are dropped for p and
    q alike, so the target distribution is over real tokens for every method. They are
    returned on ``out_device`` (default: the input device).
    """

    gives_hidden = True

    def __init__(
        self, model: torch.nn.Module, vocab_size: int, out_device: torch.device | None = None
    ) -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.device = input_device(model)
        self.out_device = out_device or self.device
        self.cache = DynamicCache()
        self.tokens: list[int] = []  # the tokens whose keys and values the cache holds
        self.calls = 0
        self.busy_s = 0.0  # seconds inside the model's forward (specviz.costs reads it)
        self.branched = False  # the cache holds tree branches (masked_logits until keep)
        # a drafter that reads the target's features asks for its last hidden state: then
        # every call keeps it at every row it read ([n, H] in hidden_all, the first at
        # position hidden_at: a tree call's nodes in their order), and at the rows it
        # returns ([keep, H], in hidden: hidden_all's last keep)
        self.want_hidden = False
        self.hidden: torch.Tensor | None = None
        self.hidden_all: torch.Tensor | None = None
        self.hidden_at = 0

    @property
    def cached(self) -> int:
        return self.cache.get_seq_length()

    def close(self) -> None:
        """Nothing to hand back: the dynamic cache goes with the request."""

    def prefix_kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        self._linear()
        return [(layer.keys, layer.values) for layer in self.cache.layers]

    @torch.inference_mode()
    def take_prefix(self, tokens: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        if self.tokens:
            raise ValueError("only an empty cache takes another model's keys and values")
        self.cache = DynamicCache(config=self.model.config)
        load_layers(self.cache.layers, kv, kv_dtype(self.model), len(tokens), self.device)
        self.tokens = list(tokens)

    def rollback(self, seq: list[int]) -> None:
        """Crop the cache to the longest prefix it shares with seq."""
        self._linear()
        keep = common_prefix(self.tokens, seq)
        self._crop(keep)

    def _crop(self, keep: int) -> None:
        drop = len(self.tokens) - keep
        if drop > 0:
            self.cache.crop(-drop)
            del self.tokens[keep:]

    @torch.inference_mode()
    def logits(self, seq: list[int], keep: int = 1) -> torch.Tensor:
        """Logits [keep, V] for the last `keep` positions of seq, feeding only uncached tokens."""
        self._linear()
        start = min(common_prefix(self.tokens, seq), len(seq) - keep)
        self._crop(start)
        ids = torch.tensor([seq[start:]], dtype=torch.long, device=self.device)
        t0 = time.perf_counter()
        out = self.model(
            input_ids=ids,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=keep,
            output_hidden_states=self.want_hidden,
        )
        logits = out.logits[0, -keep:, : self.vocab_size].to(self.out_device)  # [keep, V]
        self._keep_hidden(out, keep, start)
        self.busy_s += clock(logits.device) - t0
        self.tokens.extend(seq[start:])
        self.calls += 1
        return logits

    def _linear(self) -> None:
        if self.branched:
            raise RuntimeError("the cache holds a tree: keep() the accepted path first")

    @torch.inference_mode()
    def masked_logits(
        self, ids: list[int], positions: list[int], visible: torch.Tensor, keep: int | None = None
    ) -> torch.Tensor:
        """Logits [keep, V] for the last `keep` (default: all) of n tokens fed after the
        cache's slots at the given position ids, where row j attends to the slots visible[j]
        marks (bool [n, cached + n]: the cache's slots, then this call's tokens). Each
        token's keys and values take the next slot."""
        n, total = len(ids), self.cached + len(ids)
        keep = n if keep is None else keep
        if visible.shape != (n, total):
            raise ValueError(f"mask must be [{n}, {total}], got {list(visible.shape)}")
        ids_t = torch.tensor([ids], dtype=torch.long, device=self.device)
        pos_t = torch.tensor([positions], dtype=torch.long, device=self.device)
        t0 = time.perf_counter()
        out = self.model(
            input_ids=ids_t,
            position_ids=pos_t,
            attention_mask=attention_mask_4d(self.model, visible.to(self.device)),
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=keep,
            output_hidden_states=self.want_hidden,
        )
        logits = out.logits[0, -keep:, : self.vocab_size].to(self.out_device)  # [keep, V]
        self._keep_hidden(out, keep, positions[0])
        self.busy_s += clock(logits.device) - t0
        self.tokens.extend(ids)
        self.calls += 1
        self.branched = True
        return logits

    def _keep_hidden(self, out: Any, keep: int, at: int) -> None:
        """The last layer's hidden state (after the final norm: what the output layer reads)
        at every row the call read, the first at position `at`, when asked for."""
        if self.want_hidden:
            self.hidden_all = out.hidden_states[-1][0].to(self.out_device)  # [n, H]
            self.hidden = self.hidden_all[-keep:]  # [keep, H]
            self.hidden_at = at

    def keep(self, slots: list[int]) -> None:
        """Keep only these cache slots, in this order (a prefix, then the accepted path):
        DynamicCache has no gather, so each layer's keys and values are index_select'ed
        along the sequence dimension. The cache is linear again afterwards."""
        keep_slots(self.cache, slots)
        self.tokens = [self.tokens[s] for s in slots]
        self.branched = False


def attention_mask_4d(model: torch.nn.Module, visible: torch.Tensor) -> torch.Tensor:
    """A custom 4D mask [1, 1, n, kv] that transformers passes through unchanged: bool for
    SDPA (True attends), additive in the model's dtype for eager attention."""
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    mask = visible[None, None]
    if impl == "sdpa":
        return mask
    if impl == "eager":
        dtype = next(model.parameters()).dtype
        zero = torch.zeros((), dtype=dtype, device=mask.device)
        return torch.where(mask, zero, torch.finfo(dtype).min)
    raise ValueError(f"trees need sdpa or eager attention; this model uses {impl}")


def cache_layers(model: torch.nn.Module) -> list[tuple[str, dict[str, Any]]] | None:
    """(layer type, its kwargs) of every layer of the StaticCache that transformers would
    build for this model, as StaticCache itself reads the config: the decoder's text config
    (nested in a multimodal config such as Gemma3Config or Llama4Config), its
    ``layer_types``, or each layer's ``sliding_window`` / ``attention_chunk_size``. None for
    a model without a transformers config."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "get_text_config"):
        return None
    types, kwargs = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    return list(zip(types, kwargs, strict=True))


def tree_refusal(model: torch.nn.Module) -> str | None:
    """Why a tree cannot run on this model (None: it can): a custom 4D mask replaces the
    sliding-window and chunked masks, so a model with any layer that is not plain full
    attention (read as :func:`cache_layers` reads them) is refused."""
    name = type(model).__name__
    config = getattr(model, "config", None)
    if config is None:
        return f"{name} takes no attention mask"
    layers = cache_layers(model)
    if layers is not None:
        other = sorted({kind for kind, _ in layers} - {"full_attention"})
    else:  # not a transformers config: its top-level fields only
        kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
        window = getattr(config, "sliding_window", None)
        if window is not None and getattr(config, "use_sliding_window", True):
            kinds.add("sliding_attention")
        other = sorted(kinds - {"full_attention"})
    if other:
        return f"{name} has sliding-window or mixed attention layers ({', '.join(other)})"
    impl = getattr(config, "_attn_implementation", None) or "eager"
    if impl not in ("sdpa", "eager"):
        return f"trees need sdpa or eager attention; this model uses {impl}"
    return None


def keep_slots(cache: Any, slots: list[int]) -> None:
    """Keep only these positions of a DynamicCache, in this order, in every layer (it has
    no gather: each layer's keys and values are index_select'ed along the sequence)."""
    index = torch.tensor(slots, dtype=torch.long)
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        at = index.to(layer.keys.device)
        layer.keys = layer.keys.index_select(-2, at)
        layer.values = layer.values.index_select(-2, at)
