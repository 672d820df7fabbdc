"""A Llama network's layers that read the same input, stacked into one product: an
attention's query, key and value projections (``qkv``) and an MLP's gate and up projections
(``gate_up``), each a single Linear whose weight rows are the separate layers' rows one
after the other. The offline draft's quantised copies (specviz.backend.offline) are built from it.

Every output channel of a stacked layer is the same row of weights times the same input as
before, and the int8 and int4 layers quantise per output row (specviz.backend.offline), so the
quantised stacked layer holds the same rows and scales as the separate ones; specviz's int8
kernel sums each output in an order that does not depend on the channels computed beside
it (specviz/backend/csrc/int8_linear.cpp) for the widths a chain's calls take, 1 to 8 rows, so there
its outputs are the separate layers' outputs, bit for bit. At 9 and 10 rows (a tree level
of 9 or 10 nodes) they are not: with float32 activations about 18 % of the stacked
outputs differ from the separate ones in the last bits. The draft's q stays the
distribution each draft was drawn from either way; only the bits differ. What changes
is the number of calls: a decode step of the offline draft makes 121
products instead of 211 (30 layers, and the LM head), and the smaller calls paid most of
their time in starting up. On 2 cores of an Intel Xeon with AVX-512 and AMX, the w8-bf16
draft's products at one row, read from memory, took a median of 9.16 ms stacked against
11.36 ms separate (25 interleaved passes each, ``int8_linear`` on random weights of the
draft's shapes); ``generate --compare`` at the defaults with the w8-fp16 draft, seeds 0 to
2 twice, alternated run by run with the unstacked build, gave the same tokens at a median
speedup of 1.45x and 1.47x against 1.42x and 1.39x.

Only transformers' own Llama classes are stacked (the offline pair is a Llama); any other
network is left as it is.
"""

from __future__ import annotations

import functools
from typing import Any

import torch


def _stackable(*layers: Any) -> bool:
    """Whether the layers are plain Linears on one input, all with a bias or all without."""
    return (
        all(type(x) is torch.nn.Linear for x in layers)
        and len({(x.in_features, x.bias is None, x.weight.dtype) for x in layers}) == 1
        and not any(x.weight.is_meta for x in layers)
    )


def _stacked(*layers: torch.nn.Linear) -> torch.nn.Linear:
    """One Linear whose weight (and bias) rows are the layers' rows in order. It is made on
    the meta device and given the stacked tensors: no initialisation to overwrite, and no
    draw from torch's global generator."""
    first = layers[0]
    biased = first.bias is not None
    out = torch.nn.Linear(
        first.in_features, sum(x.out_features for x in layers), bias=biased, device="meta"
    )
    out.weight = torch.nn.Parameter(
        torch.cat([x.weight.detach() for x in layers]), requires_grad=False
    )
    if biased:
        out.bias = torch.nn.Parameter(
            torch.cat([x.bias.detach() for x in layers]), requires_grad=False
        )
    return out


class StackedMLP(torch.nn.Module):
    """A Llama MLP with its gate and up projections as one product (``gate_up``):
    down_proj(act(gate) * up), as the MLP it replaces computes it."""

    def __init__(self, mlp: torch.nn.Module) -> None:
        super().__init__()
        self.gate_up = _stacked(mlp.gate_proj, mlp.up_proj)
        self.down_proj = mlp.down_proj
        self.act_fn = mlp.act_fn
        self.width = mlp.gate_proj.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).split(self.width, dim=-1)
        return self.down_proj(self.act_fn(gate) * up)


@functools.cache
def _stacked_attention_class() -> type[torch.nn.Module]:
    """LlamaAttention with its query, key and value projections as one product (``qkv``);
    the rest of its forward (rotary embedding, cache update, the attention function the
    config names, o_proj) as transformers' own."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama import modeling_llama as llama

    class StackedAttention(llama.LlamaAttention):
        def forward(
            self,
            hidden_states: torch.Tensor,
            position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
            attention_mask: torch.Tensor | None = None,
            past_key_values: Any = None,
            **kwargs: Any,
        ) -> tuple[torch.Tensor, torch.Tensor | None]:
            positions = hidden_states.shape[:-1]
            heads = (*positions, -1, self.head_dim)
            query, key, value = (
                part.view(heads).transpose(1, 2)
                for part in self.qkv(hidden_states).split(self.qkv_sizes, dim=-1)
            )
            cos, sin = position_embeddings
            query, key = llama.apply_rotary_pos_emb(query, key, cos, sin)
            if past_key_values is not None:
                key, value = past_key_values.update(key, value, self.layer_idx)
            attend = ALL_ATTENTION_FUNCTIONS.get_interface(
                self.config._attn_implementation, llama.eager_attention_forward
            )
            out, weights = attend(
                self,
                query,
                key,
                value,
                attention_mask,
                dropout=0.0 if not self.training else self.attention_dropout,
                scaling=self.scaling,
                **kwargs,
            )
            return self.o_proj(out.reshape(*positions, -1).contiguous()), weights

    return StackedAttention


def stack_products(model: torch.nn.Module) -> torch.nn.Module:
    """model with each of transformers' LlamaAttention and LlamaMLP layers stacked (in
    place; the model is returned) where their projections are plain Linears alike (one
    input, a bias on all or none, in memory). Anything else is left as it is."""
    try:
        from transformers.models.llama import modeling_llama as llama
    except ImportError:  # pragma: no cover - transformers always ships Llama
        return model
    attention = _stacked_attention_class()
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is llama.LlamaMLP and _stackable(child.gate_proj, child.up_proj):
                setattr(module, name, StackedMLP(child))
            elif type(child) is llama.LlamaAttention and _stackable(
                child.q_proj, child.k_proj, child.v_proj
            ):
                parts = (child.q_proj, child.k_proj, child.v_proj)
                child.qkv = _stacked(*parts)
                child.qkv_sizes = [p.out_features for p in parts]
                del child.q_proj, child.k_proj, child.v_proj
                child.__class__ = attention
    return model
