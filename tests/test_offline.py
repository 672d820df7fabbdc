"""The offline draft's int8 variants: every Linear in int8, the LM head's logits in float32."""

from __future__ import annotations

import torch

from specviz.offline import Int8WeightLinear, quantize_w8
from tests.tiny import tiny_model


def test_w8_head_returns_float32_and_the_body_keeps_its_dtype(one_thread):
    q = quantize_w8(tiny_model(vocab=64, seed=3, tie_word_embeddings=True), torch.bfloat16)
    linears = [m for m in q.modules() if isinstance(m, Int8WeightLinear)]
    assert linears and not any(isinstance(m, torch.nn.Linear) for m in q.modules())
    assert q.lm_head.out_dtype == torch.float32
    assert all(m.out_dtype == torch.bfloat16 for m in linears if m is not q.lm_head)
    with torch.inference_mode():
        out = q(input_ids=torch.tensor([[1, 2, 3]]), output_hidden_states=True)
    assert out.logits.dtype == torch.float32
    assert out.hidden_states[-1].dtype == torch.bfloat16


def test_w8_head_keeps_the_digits_bf16_rounding_drops(one_thread):
    """The head's product is the int8 weights times the scale at full precision: against a
    float64 reference it is off by float32 error, where a bf16 result is off by up to half a
    bf16 step (0.0625 at a logit of 10), enough to tie the top two tokens."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 512, bias=False)
    with torch.no_grad():
        lin.weight.mul_(8.0)
    head = Int8WeightLinear(lin, torch.bfloat16, torch.float32)
    x = torch.randn(2, 64).to(torch.bfloat16)
    w = head.weight.double() * head.scale.double()[:, None]  # [out, in]
    ref = x.double() @ w.T  # [2, out]
    got = head(x)
    assert got.dtype == torch.float32
    assert (got.double() - ref).abs().max() < 1e-3 * ref.abs().max()
    rounded = ref.to(torch.bfloat16).double()
    assert (rounded - ref).abs().max() > 10 * (got.double() - ref).abs().max()
