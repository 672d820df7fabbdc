"""specviz's own CPU kernels (specviz.backend.kernels, specviz/backend/csrc/): the int8 and float32
products they compute, the top-p cut, how the set-up step builds them, what happens when it
cannot, and the int8 draft that calls them, eager and in a compiled package, exact as a draft
must be.

The ops are loaded once per process: the library the set-up step built where this CPU takes
it (AVX2, AVX-512; each its own code), else the one the module's own build compiles into a
temporary folder (about 15 s; the same build the set-up step's test checks), so that the
ops' tests run on any x86 CPU with a compiler."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from specviz.backend import kernels
from specviz.backend.offline import Int8WeightLinear, quantize_w8
from tests.tiny import tiny_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built_library(tmp_path_factory):
    """The set-up step's build of the library (kernels.build, as on a CPU that takes it)
    into a temporary folder, once for the module: the library's path, build's answer, the
    lines it reported and the folder's files right after it."""
    if kernels.compiler() is None:
        pytest.skip("no C++ compiler to build the kernel with")
    target = tmp_path_factory.mktemp("built") / "kernels" / "specviz_kernels-x.so"
    lines: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernels, "wanted", lambda: True)
        mp.setattr(kernels, "library_path", lambda: target)
        answer = kernels.build(report=lines.append)
    files = sorted(p.name for p in target.parent.iterdir()) if target.parent.exists() else []
    return target, answer, lines, files


@pytest.fixture(scope="module")
def op(request):
    """torch.ops.specviz.int8_linear, loaded: the library the set-up step built where this
    CPU takes it, else the module's own build (built_library)."""
    if not kernels.ready() and not hasattr(torch.ops.specviz, "int8_linear"):
        target, answer, lines, _ = request.getfixturevalue("built_library")
        assert answer == target, lines
        torch.ops.load_library(str(target))
        kernels._register_fake()
    return torch.ops.specviz.int8_linear


@pytest.fixture
def uses_kernel(op, monkeypatch):
    """Int8WeightLinear takes the kernel in this test, whatever this CPU is."""
    monkeypatch.setitem(kernels._state, "ready", True)
    return op


def _reference(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x.double() @ (w.double() * scale.double()[:, None]).T


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 9, 40])
@pytest.mark.parametrize("k, n", [(576, 103), (66, 7), (8, 1), (24, 40), (1536, 16)])
def test_the_kernel_computes_the_product_of_the_int8_weights_and_scales(op, rows, k, n):
    """Against float64, at every row count the kernel has a path for (1 to 4 rows together,
    more in fours), input channels in and out of sixteens and eights, output channels in and
    out of fours, extreme codes included."""
    g = torch.Generator().manual_seed(rows * 1000 + k + n)
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    w[0, : min(k, 4)] = torch.tensor([-128, 127, -1, 0][: min(k, 4)], dtype=torch.int8)
    scale = torch.rand(n, generator=g) / 100
    x = torch.randn(rows, k, generator=g)
    got = op(x, w, scale)
    assert got.dtype == torch.float32 and got.shape == (rows, n)
    want = _reference(x, w, scale)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * k**0.5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_kernel_answers_in_the_inputs_dtype_as_atens_does(op, dtype):
    """A 16-bit input: the same shape and dtype as torch._weight_int8pack_mm's answer, and
    the same values up to one rounding of the output (both sum in float32)."""
    g = torch.Generator().manual_seed(3)
    w = torch.randint(-128, 128, (96, 64), dtype=torch.int8, generator=g)
    scale = (torch.rand(96, generator=g) / 50).to(dtype)
    x = torch.randn(2, 5, 64, generator=g).to(dtype)
    got = op(x, w, scale)
    assert got.dtype == dtype and got.shape == (2, 5, 96)
    want = _reference(x.reshape(-1, 64), w, scale).reshape(2, 5, 96)
    torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=1e-2)
    if dtype == torch.bfloat16:  # ATen's CPU kernel takes bf16 inputs
        aten = torch._weight_int8pack_mm(x.reshape(-1, 64), w, scale).reshape(2, 5, 96)
        torch.testing.assert_close(got.float(), aten.float(), rtol=1e-2, atol=1e-2)


def _int16_reference(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """What the kernel computes for a 16-bit x of a decode call, independently: each row as
    int16 against its largest magnitude (rounded half to even, as nearbyint), the products
    with the int8 weights summed exactly in int64, then float32(sum) times the row's scale
    times the channel's, rounded once to x's dtype."""
    xf = x.float()
    # the row's two scalars as IEEE float32 divisions (numpy): torch divides by a scalar
    # as a multiplication by its reciprocal, which can differ in the last bit
    amax = xf.abs().amax(-1).numpy()
    inv = np.where(amax > 0, np.float32(32767.0) / np.maximum(amax, np.float32(1e-30)), 0)
    step = amax / np.float32(32767.0)
    q = torch.round(xf * torch.from_numpy(inv.astype(np.float32))[:, None]).long()  # [m, k]
    sums = (q[:, None, :] * w.long()[None, :, :]).sum(-1)  # [m, n], exact
    out = sums.float() * torch.from_numpy(step.astype(np.float32))[:, None] * scale.float()
    return out.to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("k, n", [(576, 103), (66, 7), (8, 1), (4200, 9)])
def test_a_16_bit_input_is_multiplied_as_int16_exactly(op, dtype, rows, k, n):
    """A 16-bit input at 1 to 8 rows (a draft's decode call): every output bit for bit the
    independent int16 computation (_int16_reference), so the sums are exact (k = 4200 crosses
    the kernel's int32 chunks), and each row the row alone gives."""
    g = torch.Generator().manual_seed(rows * 100 + k + n)
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    w[0, : min(k, 4)] = torch.tensor([-128, 127, -1, 0][: min(k, 4)], dtype=torch.int8)
    scale = (torch.rand(n, generator=g) / 50).to(dtype)
    x = (torch.randn(rows, k, generator=g) * 3).to(dtype)
    x[0, 0] = -x.abs().max()  # the largest magnitude negative: -32767
    got = op(x, w, scale)
    assert got.dtype == dtype and torch.equal(got, _int16_reference(x, w, scale))
    assert torch.equal(got, torch.cat([op(x[i : i + 1], w, scale) for i in range(rows)]))


def test_a_16_bit_input_of_zeros_or_with_a_non_finite_value(op):
    """A row of zeros gives zeros; a row holding an infinity or a NaN is multiplied in float
    (the int16 scale would be meaningless), so it carries through as the float product
    does, and the finite row beside it is unaffected; so is a row whose largest magnitude
    is too small for its int16 scale (below about 1e-34)."""
    w = torch.randint(
        -128, 128, (6, 64), dtype=torch.int8, generator=torch.Generator().manual_seed(1)
    )
    scale = torch.full((6,), 0.01, dtype=torch.bfloat16)
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    x[1] = 0.0
    x[2, 5] = float("nan")
    got = op(x, w, scale)
    assert torch.equal(got[0], op(x[:1], w, scale)[0]) and torch.equal(
        got[1], torch.zeros(6, dtype=torch.bfloat16)
    )
    assert bool(got[2].isnan().all())
    x[2, 5] = float("inf")
    assert not bool(op(x, w, scale)[2].isfinite().any())
    # a row of near-zeros (its int16 scale would overflow): the float product, not zeros
    x[2] = 1e-37
    want = x[2:].double() @ (w.double() * scale.double()[:, None]).T
    torch.testing.assert_close(op(x, w, scale)[2:].double(), want, rtol=1e-2, atol=0.0)


def test_the_kernel_refuses_what_it_cannot_multiply(op):
    w = torch.zeros(4, 8, dtype=torch.int8)
    with pytest.raises(RuntimeError, match="last size"):
        op(torch.zeros(1, 9), w, torch.ones(4))
    with pytest.raises(RuntimeError, match="one scale per output channel"):
        op(torch.zeros(1, 8), w, torch.ones(3))
    with pytest.raises(RuntimeError, match="int8"):
        op(torch.zeros(1, 8), w.float(), torch.ones(4))


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6, 7, 9, 40])
@pytest.mark.parametrize("k, n", [(576, 103), (66, 7), (8, 1), (1536, 16)])
def test_the_float32_kernel_computes_the_product_and_each_row_alone(op, rows, k, n):
    """specviz.linear against float64 at every row path (one pass for up to 6 rows, then
    more passes, a prefill's BLAS product beyond 8), and every output bit for bit what the
    row alone gives: a verification's logits for a position do not depend on the positions
    fed beside it."""
    g = torch.Generator().manual_seed(rows * 1000 + k + n)
    w = torch.randn(n, k, generator=g)
    x = torch.randn(rows, k, generator=g)
    got = torch.ops.specviz.linear(x, w)
    assert got.dtype == torch.float32 and got.shape == (rows, n)
    want = x.double() @ w.double().T
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * k**0.5)
    if rows <= 8:
        alone = torch.cat([torch.ops.specviz.linear(x[i : i + 1], w) for i in range(rows)])
        assert torch.equal(got, alone)


def test_both_kernels_give_zeros_for_an_empty_sum(op):
    """k == 0: every output is the empty sum, 0, whatever the memory it lands in held
    before (a buffer of the same size, filled and freed just before, is the one malloc
    hands back)."""
    for _ in range(3):
        junk = torch.full((3, 5), 7.0)
        del junk
        got = torch.ops.specviz.linear(torch.zeros(3, 0), torch.zeros(5, 0))
        assert got.shape == (3, 5) and torch.equal(got, torch.zeros(3, 5))
        for dtype in (torch.float32, torch.bfloat16):
            junk = torch.full((2, 4), 7.0, dtype=dtype)
            del junk
            x, w = torch.zeros(2, 0, dtype=dtype), torch.zeros(4, 0, dtype=torch.int8)
            got = op(x, w, torch.ones(4))
            assert got.shape == (2, 4) and got.dtype == dtype
            assert torch.equal(got.float(), torch.zeros(2, 4))


def test_the_float32_kernel_refuses_what_it_cannot_multiply(op):
    with pytest.raises(RuntimeError, match="last size"):
        torch.ops.specviz.linear(torch.zeros(1, 9), torch.zeros(4, 8))
    with pytest.raises(RuntimeError, match="float32"):
        torch.ops.specviz.linear(torch.zeros(1, 8), torch.zeros(4, 8, dtype=torch.int8))
    with pytest.raises(RuntimeError, match="float32"):
        torch.ops.specviz.linear(torch.zeros(1, 8, dtype=torch.bfloat16), torch.zeros(4, 8))


def _outside_nucleus_by_stable_sort(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The top-p cut's definition: sorted by decreasing probability (ties by lower id), the
    tokens whose running mass before them reaches top_p are dropped."""
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    drop_sorted = sorted_p.cumsum(-1) - sorted_p >= top_p
    return torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)


@pytest.mark.parametrize("scale", [0.3, 3.0, 12.0])
@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.9, 0.99])
def test_the_top_p_kernel_keeps_a_full_sort_s_nucleus_renormalised(op, scale, top_p):
    """Rows from flat (every token a candidate) to peaked (one row a single token): the
    kernel keeps exactly the tokens a full sort's cut keeps, divides them by their mass, and
    cuts a row alone as it does beside others."""
    gen = torch.Generator().manual_seed(int(scale * 10 + top_p * 100))
    logits = torch.randn(6, 5000, generator=gen) * scale
    logits[0] *= 40.0
    probs = torch.softmax(logits, -1)
    got = torch.ops.specviz.top_p(probs, top_p)
    drop = _outside_nucleus_by_stable_sort(probs, top_p)
    assert got.shape == probs.shape and got.dtype == torch.float32
    assert torch.equal(got > 0, ~drop)
    want = probs.masked_fill(drop, 0.0)
    want = want / want.sum(-1, keepdim=True)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-12)
    for i in range(probs.shape[0]):
        assert torch.equal(torch.ops.specviz.top_p(probs[i : i + 1], top_p), got[i : i + 1])


def test_the_top_p_kernel_breaks_ties_by_the_lower_id(op):
    """Four tokens of 0.25 each and top_p 0.6: three are kept, the three of lowest id."""
    probs = torch.zeros(1, 1000)
    probs[0, [900, 5, 300, 42]] = 0.25
    got = torch.ops.specviz.top_p(probs, 0.6)
    assert got[0].nonzero().squeeze(1).tolist() == [5, 42, 300]
    assert torch.equal(got[0, [5, 42, 300]], torch.full((3,), 0.25 / 0.75))


def test_the_top_p_kernel_leaves_to_torch_a_row_it_cannot_cut(op, monkeypatch):
    """A row of NaNs has no candidate, so no nucleus the kernel can show: it answers with
    an empty tensor, and warp cuts with torch's operations, as where the kernel is absent."""
    from specviz import sampling
    from specviz.config import Warp

    logits = torch.randn(2, 3000, generator=torch.Generator().manual_seed(3)) * 3
    logits[1, 7] = float("nan")
    probs = torch.softmax(logits, -1)
    assert torch.ops.specviz.top_p(probs, 0.9).numel() == 0
    assert torch.ops.specviz.top_p(probs[:1], 0.9).shape == (1, 3000)
    assert sampling._top_p_registered()  # the op fixture loaded the library
    assert sampling._kernel_cut(probs, 0.9) is None
    with_kernel = sampling.warp(logits, Warp(1.0, 0, 0.9))
    monkeypatch.setattr(sampling, "_top_p_registered", lambda: False)
    without = sampling.warp(logits, Warp(1.0, 0, 0.9))
    assert torch.equal(with_kernel.nan_to_num(-1.0), without.nan_to_num(-1.0))


@pytest.mark.parametrize("top_p", [0.5, 0.9])
def test_warp_cuts_with_the_kernel_as_with_torch(op, monkeypatch, top_p):
    """warp with the kernel (one row or several, any leading shape) keeps the tokens that
    torch's cut keeps, with the same probabilities to float32 rounding."""
    from specviz import sampling
    from specviz.config import Warp

    w = Warp(0.7, 0, top_p)
    logits = torch.randn(2, 3, 6000, generator=torch.Generator().manual_seed(5)) * 4
    assert sampling._top_p_registered()  # the op fixture loaded the library
    assert sampling._kernel_cut(torch.softmax(logits / 0.7, -1), top_p) is not None
    got, one = sampling.warp(logits, w), sampling.warp(logits[1, 2], w)
    monkeypatch.setattr(sampling, "_top_p_registered", lambda: False)
    want = sampling.warp(logits, w)
    assert got.shape == want.shape and one.shape == (6000,)
    assert torch.equal(got > 0, want > 0) and torch.equal(one, got[1, 2])
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-12)


def test_a_cpu_package_calls_the_float32_kernel_for_a_float32_linear(uses_kernel):
    """Where the kernels are ready, a CPU package's float32 linear over 1 to 8 rows becomes
    specviz.linear (bias added after), no matrix product or reduction left, and the program
    computes what the module does (one row too: the autoregressive step sums as the
    verification does); a bf16 linear keeps the reductions."""
    from specviz.backend import packages

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.SiLU(), torch.nn.Linear(24, 8))
    for rows in (1, 2, 5, 8):
        x = torch.randn(1, rows, 16)
        program = torch.export.export(block, (x,)).run_decompositions(packages.decompositions())
        ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
        assert not [op for op in ops if "mm" in op or "aten.linear" in op], ops
        assert "specviz.linear.default" in ops and "aten.sum.dim_IntList" not in ops, ops
        with torch.no_grad():
            torch.testing.assert_close(program.module()(x), block(x))
    half = block.to(torch.bfloat16)
    x = torch.randn(1, 2, 16).to(torch.bfloat16)
    program = torch.export.export(half, (x,)).run_decompositions(packages.decompositions())
    ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "specviz.linear.default" not in ops and "aten.sum.dim_IntList" in ops, ops


def test_the_int8_layer_takes_the_kernel_where_it_is_ready(uses_kernel, monkeypatch):
    """Int8WeightLinear calls the kernel when it is ready (the same values as ATen's kernel,
    to bf16 rounding), ATen's kernel when not; exported, the program calls the op."""
    torch.manual_seed(0)
    layer = Int8WeightLinear(torch.nn.Linear(64, 24), torch.bfloat16).eval()
    x = torch.randn(1, 3, 64).to(torch.bfloat16)
    with torch.inference_mode():
        mine = layer(x)
        monkeypatch.setitem(kernels._state, "ready", False)
        theirs = layer(x)
    torch.testing.assert_close(mine.float(), theirs.float(), rtol=2e-2, atol=2e-2)
    monkeypatch.setitem(kernels._state, "ready", True)
    program = torch.export.export(layer, (x,))
    ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "specviz.int8_linear.default" in ops and not any("int8pack" in o for o in ops)


@pytest.mark.parametrize("act", [torch.float32, torch.bfloat16])
def test_greedy_speculative_equals_autoregressive_with_the_kernels_draft(uses_kernel, act):
    """The int8 draft on the kernel drafts, the target decides: greedy speculative output is
    the target's greedy output token for token, and some drafts are accepted."""
    import dataclasses

    from specviz.config import Settings
    from specviz.engine import generate
    from specviz.pair import LoadedModel
    from tests.tiny import tiny_pair

    pair = tiny_pair(vocab=32)
    draft = quantize_w8(pair.target.model, act)
    loaded = LoadedModel("tiny-w8", draft, torch.device("cpu"), str(act), 32, 0.0, "test")
    pair = dataclasses.replace(pair, draft=loaded)
    s = Settings(gamma=3, max_new_tokens=12).with_(greedy=True)
    spec, ar = generate(pair, "1 2 3", s), generate(pair, "1 2 3", s.with_(method="ar"))
    assert spec.token_ids == ar.token_ids and len(spec.token_ids) == 12
    assert spec.stats.accepted > 0


def test_the_distribution_check_passes_with_the_kernels_draft(uses_kernel):
    """The rule with the int8 draft on the kernel keeps the target's distribution (the
    draft at temperature 2, so that rejections happen; q is what the kernel computes)."""
    import dataclasses

    from specviz.analysis import distribution_check
    from specviz.config import Settings
    from specviz.pair import LoadedModel
    from tests.tiny import tiny_pair

    pair = tiny_pair(vocab=8)
    draft = quantize_w8(pair.target.model, torch.float32)
    loaded = LoadedModel("tiny-w8", draft, torch.device("cpu"), "float32", 8, 0.0, "test")
    pair = dataclasses.replace(pair, draft=loaded)
    s = Settings(gamma=2, draft_temperature=2.0)
    r = distribution_check.run_check(pair, "1 2", s, n=200, length=2)
    assert r.passed, r.summary()
    assert r.spec_acceptance < 1.0


@pytest.mark.variants  # four package builds: CI's package step runs it (.ci/run)
def test_a_package_of_the_kernels_draft_calls_it_and_decodes_as_eager(
    uses_kernel, tmp_path, monkeypatch
):
    """The int8 draft's compiled package calls the op (through AOTInductor's proxy executor),
    the float32 target's verification calls specviz.linear, their keys name the library,
    and greedy speculative decoding on the packages gives the target's greedy output.

    Its four package builds take about 35 s of the suite's two cores, so it runs in CI's
    second step with tests/test_variants.py (which builds the same kind of packages under
    AVX2 and AVX-512 in fresh processes), on whatever CPU CI has: the kernel is forced on
    here."""
    import dataclasses
    import zipfile

    from specviz.backend import cache_len, packages
    from specviz.config import Settings
    from specviz.engine import generate
    from specviz.pair import LoadedModel
    from tests.tiny import tiny_pair

    monkeypatch.setattr(packages, "store", lambda: tmp_path)
    pair = tiny_pair(vocab=16)
    draft = quantize_w8(pair.target.model, torch.float32).eval()
    loaded = LoadedModel("tiny-w8", draft, torch.device("cpu"), "float32", 16, 0.0, "test")
    pair = dataclasses.replace(pair, draft=loaded)
    s = Settings(gamma=2, max_new_tokens=16).with_(greedy=True)
    length = cache_len(len(pair.encode_prompt("1 2 3")) + 16 + 2 + 2)
    assert packages.key(draft, 1, length)["kernels"] == kernels.digest()
    packages.prepare(
        {"target": pair.target.model, "draft": draft},
        {"target": (1, 3), "draft": (1, 2)},
        length,
        report=lambda _m: None,
    )
    code = "".join(
        p.read_text(errors="ignore") for p in tmp_path.glob("*.json")
    )  # the keys written beside the packages
    assert kernels.digest() in code

    def extern_ops(model, width):  # the ops the package's code calls through the executor
        with zipfile.ZipFile(packages.path_of(packages.key(model, width, length))) as z:
            return "".join(z.read(n).decode() for n in z.namelist() if n.endswith("wrapper.json"))

    for w in (1, 2):
        assert "specviz::int8_linear" in extern_ops(draft, w)
    for w in (1, 3):  # the step and the verification sum each output alike
        calls = extern_ops(pair.target.model, w)
        assert "specviz::linear" in calls and "int8_linear" not in calls
    want = generate(pair, "1 2 3", s.with_(method="ar")).token_ids
    compiled = pair.with_compile("aoti")
    got = generate(compiled, "1 2 3", s).token_ids
    assert got == want and len(want) == 16
    fw = packages.packaged(compiled.draft, (1, 2), length)
    assert fw is not None and fw.calls > 0 and fw.eager_calls == 0


def test_the_set_up_step_builds_the_library_once(built_library, monkeypatch):
    """build() compiles the source with the system's compiler into the cache's path, whole
    or not at all, and finds it there the next time without compiling."""
    target, answer, lines, files = built_library
    assert answer == target and target.stat().st_size > 0 and lines == []
    assert files == [target.name]  # no temporary left
    monkeypatch.setattr(kernels, "wanted", lambda: True)
    monkeypatch.setattr(kernels, "library_path", lambda: target)
    monkeypatch.setenv("CXX", "/nonexistent/compiler")
    monkeypatch.setattr(kernels, "compiler", lambda: None)
    assert kernels.build(report=lines.append) == target and lines == []  # found: no compiling


def test_without_a_compiler_or_with_a_failing_one_the_draft_keeps_atens_kernel(
    tmp_path, monkeypatch
):
    """One line each, no library left behind, and build() answers None."""
    target = tmp_path / "specviz_kernels-x.so"
    monkeypatch.setattr(kernels, "wanted", lambda: True)
    monkeypatch.setattr(kernels, "library_path", lambda: target)
    lines: list[str] = []
    monkeypatch.setattr(kernels, "compiler", lambda: None)
    assert kernels.build(report=lines.append) is None
    monkeypatch.setattr(kernels, "compiler", lambda: "false")  # a compiler that fails
    assert kernels.build(report=lines.append) is None
    assert len(lines) == 2 and all(line.count("\n") == 0 for line in lines)
    assert "no C++ compiler" in lines[0] and "did not compile" in lines[1]
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(kernels, "wanted", lambda: False)  # no AVX2: no library, no build
    monkeypatch.setattr(kernels, "compiler", lambda: pytest.fail("compiled"))
    assert kernels.build(report=lines.append) is None


def test_a_corrupt_library_is_removed_with_one_line(tmp_path):
    """A library file that will not load: one line on stderr, the file removed, the op not
    ready (ATen's kernel runs), no traceback."""
    code = (
        "from specviz.backend import kernels; import torch\n"
        "kernels.wanted = lambda: True\n"
        "p = kernels.library_path(); p.parent.mkdir(parents=True)\n"
        "p.write_bytes(b'not a library')\n"
        "print(kernels.ready(), p.exists())\n"
    )
    env = dict(os.environ, SPECVIZ_CACHE=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
    err = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and "unusable" in err[0] and "Traceback" not in done.stderr


def test_the_machine_key_of_the_draft_choice_names_the_library(monkeypatch):
    """The int8 variants' steps depend on the kernel: a choice measured without it is not
    read once it is there (and the other way round)."""
    from specviz.backend import draft_choice

    monkeypatch.setitem(kernels._state, "ready", False)
    without = draft_choice.machine_key(torch.device("cpu"))
    monkeypatch.setitem(kernels._state, "ready", True)
    with_it = draft_choice.machine_key(torch.device("cpu"))
    assert without["kernels"] == "" and with_it["kernels"] == kernels.digest()
    assert draft_choice._key_id(without) != draft_choice._key_id(with_it)


def test_a_tiny_int8_draft_with_the_kernel_matches_its_float_model(uses_kernel):
    """The whole int8 model on the kernel gives logits close to the float32 model it was
    quantised from (int8 weights: about one part in a hundred)."""
    m = tiny_model(vocab=32, seed=5, layers=2).eval()
    q = quantize_w8(m, torch.float32).eval()
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        a, b = m(input_ids=ids).logits, q(input_ids=ids).logits
    assert (a - b).abs().max() < 0.05 * a.abs().max()
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_the_library_s_digest_reads_the_code_not_its_comments():
    """A corrected comment in a C++ source leaves the digest (and so the library and every
    package that names it) as it is; a changed line of code changes it."""
    src = kernels.SOURCES[1].read_text()
    base = kernels.code_of(src)
    assert kernels.code_of(src.replace("// ", "//  edited ", 3)) == base
    assert kernels.code_of("/* a\nblock */\n" + src + "\n\n// trailing\n") == base
    assert kernels.code_of(src.replace("float tau", "float tau2", 1)) != base
    assert "//" not in base


def test_the_one_translation_unit_compiles_every_source_and_keys_the_library(tmp_path, monkeypatch):
    """build() gives the compiler kernels.cpp alone: it includes each source, and a changed
    line of it changes the digest as a source's does."""
    included = re.findall(r'^#include "([^"]+)"$', kernels.UNIT.read_text(), flags=re.M)
    assert included == [s.name for s in kernels.SOURCES]
    unit = tmp_path / "kernels.cpp"
    unit.write_text(kernels.UNIT.read_text())
    monkeypatch.setattr(kernels, "UNIT", unit)
    kernels.digest.cache_clear()
    try:
        before = kernels.digest()
        unit.write_text(unit.read_text() + '#include "another.cpp"\n')
        kernels.digest.cache_clear()
        assert kernels.digest() != before
    finally:
        kernels.digest.cache_clear()
