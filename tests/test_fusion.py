"""The offline draft's stacked products (specviz.backend.fusion): the quantised copies hold one
query-key-value product and one gate-up product per layer, and give the logits the same
layers give unstacked, bit for bit where specviz's int8 kernel runs."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import DynamicCache

from specviz.backend import kernels, offline
from specviz.backend.fusion import StackedMLP, stack_products
from tests.tiny import tiny_model

LAYERS = {"w8": offline.Int8WeightLinear, "w4": offline.Int4WeightLinear}
QUANTIZE = {"w8": offline.quantize_w8, "w4": offline.quantize_w4}


def unstacked(model: torch.nn.Module, kind: str, dtype: torch.dtype) -> torch.nn.Module:
    """The quantised copy layer by layer, every Linear quantised on its own (the reference:
    written here, not through specviz.backend.offline's copy)."""
    q = copy.deepcopy(model).to(dtype)
    q.config.tie_word_embeddings = False
    head = q.get_output_embeddings()
    for module in list(q.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                top = offline.REFINE_TOP if child is head else 0
                setattr(module, name, LAYERS[kind](child, dtype, top))
    return q.eval()


def logits_of_a_decode(model: torch.nn.Module) -> list[torch.Tensor]:
    """A 5-token prefill, then three 2-token calls on the same cache."""
    cache = DynamicCache(config=model.config)
    calls = [[1, 5, 9, 3, 7], [4, 5], [8, 9], [2, 3]]
    with torch.inference_mode():
        return [
            model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True).logits
            for ids in calls
        ]


@pytest.mark.parametrize(
    ("kind", "dtype"),
    [
        ("w8", torch.bfloat16),
        ("w8", torch.float16),
        ("w8", torch.float32),
        ("w4", torch.bfloat16),
    ],
)
def test_a_stacked_copy_gives_the_unstacked_layers_logits(kind, dtype, one_thread):
    # grouped-query attention (2 query heads on 1 key-value head), a bias on the projections
    base = tiny_model(64, 3, layers=2, num_key_value_heads=1, attention_bias=True)
    got = logits_of_a_decode(QUANTIZE[kind](base, dtype))
    want = logits_of_a_decode(unstacked(base, kind, dtype))
    for g, w in zip(got, want, strict=True):
        if kind == "w8" and kernels.ready():
            # each output channel is summed in one order whatever channels are beside it
            assert torch.equal(g, w)
        else:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_each_llama_layer_holds_one_stacked_product_per_input():
    base = tiny_model(64, 0, layers=2, num_key_value_heads=1)
    q = offline.quantize_w8(base, torch.bfloat16)
    for layer, original in zip(q.model.layers, base.model.layers, strict=True):
        attn, mlp = layer.self_attn, layer.mlp
        assert not any(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj"))
        sizes = [
            original.self_attn.q_proj.out_features,
            original.self_attn.k_proj.out_features,
            original.self_attn.v_proj.out_features,
        ]
        assert attn.qkv_sizes == sizes and attn.qkv.out_features == sum(sizes)
        assert isinstance(mlp, StackedMLP) and not hasattr(mlp, "gate_proj")
        assert mlp.gate_up.out_features == 2 * original.mlp.gate_proj.out_features
        # the stacked rows are the separate layers' rows in order, quantised alike
        rows = torch.cat([original.mlp.gate_proj.weight, original.mlp.up_proj.weight])
        alone = offline.Int8WeightLinear(_linear_of(rows.to(torch.bfloat16)), torch.bfloat16)
        assert torch.equal(mlp.gate_up.weight, alone.weight)
        assert torch.equal(mlp.gate_up.scale, alone.scale)
    # the original model is untouched
    assert hasattr(base.model.layers[0].self_attn, "q_proj")


def _linear_of(weight: torch.Tensor) -> torch.nn.Linear:
    lin = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        lin.weight.copy_(weight)
    return lin


def test_other_networks_are_left_as_they_are():
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    before = [type(m) for m in net.modules()]
    assert stack_products(net) is net
    assert [type(m) for m in net.modules()] == before


def test_a_layer_whose_projections_differ_is_left_as_it_is():
    base = tiny_model(64, 0, layers=1)
    attn = base.model.layers[0].self_attn
    attn.k_proj.bias = torch.nn.Parameter(torch.zeros(attn.k_proj.out_features))
    stack_products(base)
    assert hasattr(attn, "q_proj") and not hasattr(attn, "qkv")
    assert isinstance(base.model.layers[0].mlp, StackedMLP)  # the MLP's are alike
