"""The offline draft's int8 layers: every Linear in int8 weights, the LM head's largest
logits per row refined at full precision so that bf16 rounding does not decide the argmax."""

from __future__ import annotations

import pytest
import torch

from specviz.backend import offline
from specviz.backend.offline import REFINE_TOP, Int8WeightLinear, quantize_w8
from tests.tiny import tiny_model


def test_only_the_head_refines_and_it_returns_float32(one_thread):
    q = quantize_w8(tiny_model(vocab=64, seed=3, tie_word_embeddings=True), torch.bfloat16)
    linears = [m for m in q.modules() if isinstance(m, Int8WeightLinear)]
    assert linears and not any(isinstance(m, torch.nn.Linear) for m in q.modules())
    assert q.lm_head.refine_top == REFINE_TOP
    assert all(m.refine_top == 0 for m in linears if m is not q.lm_head)
    with torch.inference_mode():
        out = q(input_ids=torch.tensor([[1, 2, 3]]), output_hidden_states=True)
    assert out.logits.dtype == torch.float32
    assert out.hidden_states[-1].dtype == torch.bfloat16


def head(seed: int = 0, out: int = 512, bias: bool = False) -> Int8WeightLinear:
    torch.manual_seed(seed)
    lin = torch.nn.Linear(64, out, bias=bias)
    with torch.no_grad():
        lin.weight.mul_(8.0)
    return Int8WeightLinear(lin, torch.bfloat16, REFINE_TOP)


def reference(h: Int8WeightLinear, x: torch.Tensor) -> torch.Tensor:
    """The head's product in float64 from the same int8 weights and float32 scales."""
    w = h.weight.double() * h.scale32.double()[:, None]  # [out, in]
    ref = x.double() @ w.T  # [n, out]
    return ref if h.bias is None else ref + h.bias.double()


def test_the_largest_logits_keep_the_digits_bf16_rounding_drops(one_thread):
    """Each row's REFINE_TOP largest entries are off the float64 product by float32 error
    only, where the bf16 product is off by up to half a bf16 step; the rest are the bf16
    product's values, so the refine costs a few rows' work."""
    for bias in (False, True):
        h = head(bias=bias)
        x = torch.randn(3, 64).to(torch.bfloat16)
        ref, got = reference(h, x), h(x)
        assert got.dtype == torch.float32 and got.shape == (3, 512)
        top = ref.topk(REFINE_TOP // 2, dim=-1).indices
        err = (got.double() - ref).gather(-1, top).abs().max()
        assert err < 1e-5 * ref.abs().max()
        rounded = (ref.to(torch.bfloat16).double() - ref).abs().max()
        assert rounded > 10 * err
        assert torch.equal(got.argmax(-1), ref.argmax(-1))
        h.refine_top = 0
        bf16 = h(x).float()
        h.refine_top = REFINE_TOP
        changed = (got != bf16).sum(-1)
        assert bool((changed <= REFINE_TOP).all())


def test_a_tie_in_bf16_is_broken_by_the_unrounded_logits(one_thread):
    """Two output rows built to differ by a quarter of a bf16 step at a logit near 30: bf16
    rounds them to the same value and argmax takes the lower id; the refined head takes
    the larger, as the float64 product does."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64, bias=False)
    with torch.no_grad():
        lin.weight.mul_(0.1)  # every other logit near 0
        lin.weight[2] = 0.0
        lin.weight[5] = 0.0
        lin.weight[2, 0] = 30.0
        lin.weight[5, 0] = 30.0
        lin.weight[5, 1] = 0.3  # int8: 0.3 -> 1 step of 30/127
    h = Int8WeightLinear(lin, torch.bfloat16, REFINE_TOP)
    x = torch.zeros(1, 64, dtype=torch.bfloat16)
    x[0, 0], x[0, 1] = 1.0, 0.125  # 5 leads 2 by 0.03
    h.refine_top = 0
    bf16 = h(x)
    assert bf16[0, 2] == bf16[0, 5] and int(bf16.argmax()) == 2  # the tie and the lower id
    h.refine_top = REFINE_TOP
    got, ref = h(x), reference(h, x)
    assert int(ref.argmax()) == 5 and int(got.argmax()) == 5


def test_a_copys_head_is_refined_and_stays_tied(one_thread):
    """The bf16 and fp16 copies' LM head returns float32 with its largest logits at full
    precision, and still shares its weight with the input embedding."""
    from specviz.backend.draft_choice import build
    from specviz.backend.offline import RefinedHead

    base = tiny_model(vocab=64, seed=3, tie_word_embeddings=True)
    for variant, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        m = build(base, variant)
        head = m.get_output_embeddings()
        assert isinstance(head, RefinedHead) and head.weight.dtype == dtype
        assert head.weight is m.get_input_embeddings().weight
        with torch.inference_mode():
            out = m(input_ids=torch.tensor([[1, 2, 3]]), output_hidden_states=True)
        h = out.hidden_states[-1][0]  # [3, hidden], the head's input
        ref = h.double() @ head.weight.double().T
        top = ref.topk(REFINE_TOP // 2, dim=-1).indices
        got = out.logits[0].double()
        assert out.logits.dtype == torch.float32
        assert (got - ref).gather(-1, top).abs().max() < 1e-4 * ref.abs().max()
        assert torch.equal(got.argmax(-1), ref.argmax(-1))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_widening_linear_gives_the_16bit_product_over_many_rows(one_thread, dtype):
    """From WIDEN_MIN_ROWS rows the product runs in float32 and is rounded once to the
    layer's dtype: within half a 16-bit step of the float64 product of the same 16-bit
    numbers (plus the float32 sums' error); below, it is the plain 16-bit Linear's."""
    from specviz.backend.offline import WIDEN_MIN_ROWS, WideningLinear

    torch.manual_seed(1)
    lin = torch.nn.Linear(96, 80).to(dtype)
    wide = torch.nn.Linear(96, 80).to(dtype)
    wide.load_state_dict(lin.state_dict())
    wide.__class__ = WideningLinear
    few = torch.randn(3, WIDEN_MIN_ROWS - 1, 96).to(dtype)[0]
    assert torch.equal(wide(few), lin(few))
    x = torch.randn(2, WIDEN_MIN_ROWS, 96).to(dtype)
    got = wide(x)
    assert got.dtype == dtype and got.shape == (2, WIDEN_MIN_ROWS, 80)
    ref = x.double() @ lin.weight.double().T + lin.bias.double()
    step = torch.finfo(dtype).eps * ref.abs()  # one 16-bit step at each value
    assert ((got.double() - ref).abs() <= 0.5 * step + 1e-5 * ref.abs().max()).all()


def test_a_copy_widens_its_products_only_on_a_cpu_without_16bit_arithmetic(one_thread, monkeypatch):
    """The bf16 and fp16 copies' decoder layers widen many-row products where the CPU lacks
    the flag of that dtype's arithmetic; the LM head never does; names and tensors are the
    plain copy's (so a compiled package's key does not change)."""
    from specviz.backend import draft_choice
    from specviz.backend.draft_choice import build
    from specviz.backend.offline import RefinedHead, WideningLinear

    base = tiny_model(vocab=64, seed=3, tie_word_embeddings=True)
    for variant in ("bf16", "fp16"):
        for native, widened in (((), True), ((variant,), False)):
            monkeypatch.setattr(draft_choice, "cpu_has_16bit", lambda kind, n=native: kind in n)
            m = build(base, variant)
            kinds = {type(x) for x in m.model.modules() if isinstance(x, torch.nn.Linear)}
            assert kinds == ({WideningLinear} if widened else {torch.nn.Linear})
            head = m.get_output_embeddings()
            assert isinstance(head, RefinedHead) and type(head.linear) is torch.nn.Linear
            plain = base.state_dict()
            assert list(m.state_dict()) == [k.replace("lm_head.", "lm_head.linear.") for k in plain]


def test_a_tie_in_a_bf16_copy_is_broken_by_the_unrounded_logits(one_thread):
    from specviz.backend.offline import RefinedHead

    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64, bias=False)
    with torch.no_grad():
        lin.weight.mul_(0.1)
        lin.weight[2] = 0.0
        lin.weight[5] = 0.0
        lin.weight[2, 0] = 30.0
        lin.weight[5, 0] = 30.0
        lin.weight[5, 1] = 0.25  # bf16 keeps 0.25 exactly
    lin = lin.to(torch.bfloat16)
    x = torch.zeros(1, 64, dtype=torch.bfloat16)
    x[0, 0], x[0, 1] = 1.0, 0.125  # 5 leads 2 by 0.03, a quarter of a bf16 step at 30
    plain = lin(x)
    assert plain[0, 2] == plain[0, 5] and int(plain.argmax()) == 2
    assert int(RefinedHead(lin, REFINE_TOP)(x).argmax()) == 5


def test_a_gguf_file_is_parsed_once_during_a_conversion(tmp_path) -> None:
    """Within _gguf_read_once the config, tokenizer and weights share one parse of the file
    and one name map, read from the file's bytes in memory, with the same fields and
    tensors as the gguf package's own parse of its memory map; the package's own names come
    back after."""
    import gguf
    import gguf.gguf_reader
    import numpy as np

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_token_list(["<s>", "a", "bé", "</s>"])
    writer.add_token_scores([0.0, -1.5, -2.0, 0.0])
    writer.add_tensor("token_embd.weight", torch.arange(8.0).reshape(4, 2).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader, name_map, numpy = gguf.GGUFReader, gguf.get_tensor_name_map, gguf.gguf_reader.np
    plain = gguf.GGUFReader(path)
    with offline._gguf_read_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is gguf.get_tensor_name_map(
            gguf.MODEL_ARCH.LLAMA, 2
        )
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, name_map)
    assert gguf.gguf_reader.np is numpy
    assert isinstance(plain.data, np.memmap) and not isinstance(first.data, np.memmap)
    assert list(first.fields) == list(plain.fields)
    for name, field in plain.fields.items():
        ours = first.fields[name]
        assert (ours.types, ours.data) == (field.types, field.data), name
        assert [p.tobytes() for p in ours.parts] == [p.tobytes() for p in field.parts], name
    assert [(t.name, t.shape.tolist(), t.data.tobytes()) for t in first.tensors] == [
        (t.name, t.shape.tolist(), t.data.tobytes()) for t in plain.tensors
    ]


# --- the draft variants with an x86 kernel: dynamic int8 and int4 weights ------------------

NEW_VARIANTS = ("dyn8", "w4-bf16", "w4-fp32")


def variant_pair(variant: str, vocab: int = 32, draft_temperature: float | None = None):
    """The tiny target with a draft built from it as the offline pair's is."""
    import dataclasses

    from specviz.backend.draft_choice import build, describe_variant
    from specviz.pair import LoadedModel
    from tests.tiny import tiny_pair

    pair = tiny_pair(vocab=vocab)
    draft = build(pair.target.model, variant)
    loaded = LoadedModel(
        f"tiny-{variant}", draft, torch.device("cpu"), describe_variant(variant), vocab, 0.0, "test"
    )
    return dataclasses.replace(pair, draft=loaded)


@pytest.mark.parametrize("variant", NEW_VARIANTS)
def test_greedy_speculative_equals_autoregressive_with_each_new_variant(variant, one_thread):
    from specviz.config import Settings
    from specviz.engine import generate

    pair = variant_pair(variant)
    s = Settings(gamma=3, max_new_tokens=12).with_(greedy=True)
    paths = [pair]
    if variant.startswith("w4"):  # int4 compiles; aot_eager traces the graphs inductor gets
        paths.append(pair.with_compile("aot_eager"))
    else:  # dynamo cannot trace torch.ao's packed layers: refused, and auto runs eager
        with pytest.raises(ValueError, match="cannot run on the compiled path"):
            pair.with_compile("aot_eager")
        assert pair.with_compile("auto").compile_backend is None
    for p in paths:
        spec, ar = generate(p, "1 2 3", s), generate(p, "1 2 3", s.with_(method="ar"))
        assert spec.token_ids == ar.token_ids and len(spec.token_ids) == 12
        assert spec.stats.accepted > 0


@pytest.mark.parametrize("variant", NEW_VARIANTS)
def test_the_distribution_check_passes_with_each_new_variant(variant, one_thread):
    """The check's verdict on the rule with the variant as the draft; the draft drafts at
    temperature 2 so that rejections happen, and q is what the variant computes."""
    from specviz.analysis import distribution_check
    from specviz.config import Settings

    pair = variant_pair(variant, vocab=8)
    s = Settings(gamma=2, draft_temperature=2.0)
    r = distribution_check.run_check(pair, "1 2", s, n=200, length=2)
    assert r.passed, r.summary()
    assert r.spec_acceptance < 1.0  # the rule rejected some drafts


def test_int4_weights_are_what_the_kernel_multiplies_by(one_thread):
    from specviz.backend.offline import Int4WeightLinear

    torch.manual_seed(0)
    lin = torch.nn.Linear(80, 48)  # 80 input channels: padded to 96, three groups of 32
    q = Int4WeightLinear(lin, torch.float32)
    x = torch.randn(3, 80)
    w = q.dequantised()[:, :80]
    assert (w - lin.weight).abs().max() <= (lin.weight.abs().max() * 2 / 15)  # 16 levels
    ref = x @ w.T + lin.bias
    assert torch.allclose(q(x), ref, atol=1e-4)
    head = Int4WeightLinear(lin, torch.bfloat16, refine_top=4)
    x = x.to(torch.bfloat16)
    got = head(x)
    ref = x.float() @ w.T + head.bias.float()
    top = ref.topk(2, dim=-1).indices  # the largest logits, recomputed in float32
    assert got.dtype == torch.float32
    assert torch.allclose(got.gather(-1, top), ref.gather(-1, top), atol=1e-4)


def test_the_new_variants_read_fewer_bytes(one_thread):
    from specviz import costs
    from specviz.backend.draft_choice import build
    from tests.tiny import tiny_model

    base = tiny_model(64, 0, hidden_size=64, intermediate_size=128, num_attention_heads=4)
    size = {v: costs.weight_bytes(build(base, v)) for v in ("bf16", "w8-bf16", "w4-bf16", "dyn8")}
    fp32 = costs.weight_bytes(base)
    assert size["w4-bf16"] < size["w8-bf16"] < size["bf16"] < fp32
    assert size["dyn8"] < size["bf16"]
