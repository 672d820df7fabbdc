"""Forwards compiled ahead of time and kept on disk: the compiled path's ``aoti`` backend.

A package is one model's decode call at one width on a static cache of one length
(specviz.backend.aoti.AotiStep), exported with ``torch.export`` and compiled by AOTInductor into a
``.pt2`` file of generated code only. Every package returns the call's logits and, beside
them, the model's last hidden state at its rows (``features``: what an EAGLE head reads, so
that a drafter that reads the target's features runs on the packaged target; the
autoregressive step ignores it: docs/compiled.md, Features). The weights stay out of it
(``aot_inductor.package_constants_in_so`` off) and a loaded package reads the model's own
tensors (``load_constants(..., user_managed=True)``), so a package is a few MB, loads in
milliseconds, and holds no second copy of the weights in memory.

Each package is keyed by what its code depends on: torch's version, the CPU's kernel
capability (``torch.backends.cpu.get_cpu_capability()``: a package built under AVX-512 is
not used under AVX2), the model (its class, its config's name, and every tensor's name,
shape and dtype) and the call's shape (width, cache length). The key's digest is the file
name, so a package built for anything else is never found: it is stale, and the set-up
step builds the right one beside it. A package that cannot be loaded, or whose call does
not give the eager model's argmax on a probe, is corrupt: one line on stderr says so, the
file is removed, and the call runs eager (the set-up step builds it again).

A package is written only when the loader can supply every constant its code needs (the
model's own tensors: ``check_constants``), and the set-up step keeps it only once a fresh
process has loaded and probed it (``prepare``'s ``check``). A package that could not be
built or kept is recorded beside the store with its reason (``failed``): it is not tried
again until torch, the CPU, the model or specviz's compiled-path code changes.

``python -m specviz prepare`` (run by scripts/setup.sh) builds the offline pair's packages
for the default run; ``--compile aoti`` builds what a run needs and lacks; ``auto`` takes
this path on a CPU wherever the packages exist (specviz.backend.policy.auto_backend).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from specviz.backend import kernels
from specviz.backend.aoti import AotiForwards, AotiStep, export_step, say
from specviz.backend.kernels import capability  # a package's key names it

FORMAT = 12  # bump when a package's layout, calling convention or generated code changes
# bump when the code of a call wider than kernels.STREAMED_ROWS changes (those calls only)
WIDE_ROWS = 2
PROBE_TOKEN = 1
aten = torch.ops.aten


def store() -> Path:
    """Where packages live: the specviz cache's aoti folder."""
    from specviz.backend.offline import cache_root

    return cache_root() / "aoti"


def model_key(model: torch.nn.Module) -> dict[str, Any]:
    """What a package's code depends on in the model: its class, its config's name and
    every tensor's name, shape and dtype (not the values: those are read at load)."""
    tensors = sorted(
        f"{n}:{tuple(t.shape)}:{t.dtype}" if isinstance(t, torch.Tensor) else f"{n}:{t!r}"
        for n, t in model.state_dict(keep_vars=True).items()
    )
    digest = hashlib.sha256("\n".join(tensors).encode()).hexdigest()[:16]
    return {
        "class": type(model).__name__,
        "name": str(getattr(model.config, "_name_or_path", "")),
        "tensors": digest,
    }


def key(model: torch.nn.Module, width: int, length: int) -> dict[str, Any]:
    device = next(model.parameters()).device
    return {
        "format": FORMAT,
        "torch": torch.__version__,
        "cpu": capability() if device.type == "cpu" else device.type,
        "model": model_key(model),
        "width": int(width),
        "length": int(length),
        # specviz's kernel library its code may call (specviz.backend.kernels; "" where unused)
        "kernels": kernels.tag() if device.type == "cpu" else "",
        # how a call wider than the kernels' rows is computed: its rows 8 at a time, and its
        # attention as per-query reductions (WIDE_ROWS); a narrower call's key is unchanged
        **({"wide": WIDE_ROWS} if width > kernels.STREAMED_ROWS else {}),
    }


def path_of(k: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(k, sort_keys=True).encode()).hexdigest()[:20]
    return store() / f"{k['model']['class']}-w{k['width']}-l{k['length']}-{digest}.pt2"


def constants(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's tensors under the names the exported AotiStep gives them (tied weights
    under each of their names)."""
    out = {
        f"model.{n}": t
        for n, t in model.state_dict(keep_vars=True).items()
        if isinstance(t, torch.Tensor)
    }
    out.update({f"model.{n}": t for n, t in model.named_buffers(remove_duplicate=False)})
    return out


def _rows_as_reductions(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [n, k] times w [out, k] transposed, in float32 [n, out], as one product-and-sum
    over the input channels per row of x: inductor generates a single loop over the output
    channels, split over every core, that loads each weight row once and keeps one
    vectorised accumulator per input row, so it streams the weights at close to the
    memory's bandwidth (the BLAS call it replaces runs a one-row product on one thread).
    The input is first laid out in memory (inductor_force_stride_order): left as an
    expression, inductor would recompute the norm or activation that made it for every
    output channel. Weights of another dtype (bf16, int8) are widened inside the loop: a
    reduction in bf16 measured 2.5 times slower than the same in float32."""
    k = x.shape[-1]
    flat = torch.ops.prims.inductor_force_stride_order(x.float(), [k, 1])
    w = w.float()
    return torch.stack([(w * flat[m]).sum(-1) for m in range(flat.shape[0])], 0)


def _package_linear(
    x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """linear in a CPU package, in x's dtype: in float32 where specviz's kernels are built
    (an AVX2 or AVX-512 CPU, specviz.backend.kernels), their specviz.linear, which streams the
    weights once for up to 5 or 6 rows and sums each output in the same order whatever rows
    are beside it; a verification of more than 8 rows (gamma 8, adaptive gamma's 9, 17 and
    33) calls it on 8 rows at a time; otherwise _rows_as_reductions. The target's
    one-position step (the autoregressive call) and its verification at any width then sum
    each linear layer's outputs alike (with inductor's reductions at one row and the kernel at
    2 to 8, 76 % of the linear outputs differed in their last bits). The rest of a package
    (attention, norms, their fusions) is generated per width, as per-row loops: the offline
    target's 1-, 5- and 9-position calls gave bit-identical rows (docs/compiled.md,
    Exactness; tests/test_packages.py holds it on a tiny target). On 2 cores of an AMD
    EPYC (AVX2), side by side in one process, the fp32 target's 1-position step took 25 to
    27 ms with the kernel against 25 to 26 with the reductions, its 5-position call 30 to
    32 ms against 31.5 to 33.5; under AVX-512, where the kernel prefetches the next tile's
    weights, see specviz.backend.kernels."""
    rows = x.numel() // max(1, x.shape[-1])
    if x.dtype == w.dtype == torch.float32 and x.device.type == "cpu" and kernels.ready():
        if rows <= kernels.STREAMED_ROWS:
            out = torch.ops.specviz.linear(x, w)
        else:  # a verification wider than 8: its rows in calls of up to 8, each summed alike
            flat = x.reshape(-1, x.shape[-1])
            parts = flat.split(kernels.STREAMED_ROWS)
            out = torch.cat([torch.ops.specviz.linear(part, w) for part in parts])
            out = out.reshape(*x.shape[:-1], w.shape[0])
    else:
        out = _rows_as_reductions(x.reshape(-1, x.shape[-1]), w).to(x.dtype)
        out = out.reshape(*x.shape[:-1], w.shape[0])
    return out if bias is None else out + bias


def _int8pack_mm_as_reductions(
    x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """torch._weight_int8pack_mm (x [n, k] by int8 weights [out, k] with one scale per output
    channel) as _rows_as_reductions, in x's dtype; outside AVX-512, where the input channels
    come in fours, as _int8_rows_as_words."""
    words = capability() != "AVX512" and w.shape[1] % 4 == 0
    rows = (_int8_rows_as_words if words else _rows_as_reductions)(x, w)
    return (rows * scale.float()).to(x.dtype)


def _int8_rows_as_words(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [n, k] times int8 w [out, k] transposed, in float32 [n, out], as _rows_as_reductions
    does it, for CPUs without AVX-512. There inductor's code loads 8 int8 weights at a time
    through a buffer (a partial load of a 32-lane vector), and a weight step runs at a
    fifth of the memory's rate. Here the weights are read as 32-bit words instead (their
    bytes viewed as float32, which loads whole vectors, then as int32), each word's four
    bytes taken out by shifts (sign-extended) and multiplied by four planes of x laid out
    as x[4j + b] for b = 0..3. Little-endian byte order: byte b of word j is w[4j + b]."""
    n, k = x.shape
    words = w.view(torch.float32).view(torch.int32)  # [out, k / 4]
    planes = torch.ops.prims.inductor_force_stride_order(
        x.float().reshape(n, k // 4, 4).permute(0, 2, 1), [k, k // 4, 1]
    )  # [n, 4, k / 4]
    weights = [((words << (24 - 8 * b)) >> 24).float() for b in range(4)]
    rows = []
    for m in range(n):
        acc = weights[0] * planes[m, 0]
        for b in range(1, 4):
            acc = acc + weights[b] * planes[m, b]
        rows.append(acc.sum(-1))
    return torch.stack(rows, 0)


def _attention_on_laid_out_query(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """scaled_dot_product_attention as torch's math form, its query first laid out in
    memory (inductor_force_stride_order). Left as an expression, inductor fuses the query's
    rotary embedding into the product with the keys and computes its sines and cosines again
    for every cached position: 115 us a layer of the offline draft at a cache of 256 on 2
    cores of an AMD EPYC, a third of its packaged step; 25 us laid out."""
    laid = query.contiguous()
    query = torch.ops.prims.inductor_force_stride_order(laid, list(laid.stride()))
    if not is_causal and dropout_p == 0.0:  # a decode call's queries, at every width
        return _attention_as_reductions(query, key, value, attn_mask, scale)
    if attn_mask is not None and attn_mask.dtype == torch.bool:  # as the op's front end does
        attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill(
            attn_mask.logical_not(), float("-inf")
        )
    return aten._scaled_dot_product_attention_math.default(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
    )[0]


def _attention_as_reductions(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    scale: float | None,
) -> torch.Tensor:
    """The attention of a decode call's positions (a package's width, 1 to 33 queries) as
    products and sums over the cache, in float32 as the math form computes a 16-bit model's
    attention: each score a sum over the head's channels, each output a sum over the cached
    positions, a query head reading its group's key and value head (grouped-query attention
    without repeating the cache). Inductor fuses them into loops over the cache, at every
    width as at one position, so each query's sums do not depend on the queries beside it
    (tests/test_packages.py); the math form's two batched products at 2 or more positions are
    ATen calls (60 a call of the offline pair, each 25 to 29 us for bf16). On 2 cores of an
    Intel Xeon with AVX-512 and AMX the w8-bf16 draft's packaged 2-position call took 12.2 to
    12.4 ms against 13.0 in a generation's rounds; the fp32 target's calls were unchanged."""
    b, h, n, d = query.shape
    hk, s = key.shape[1], key.shape[2]
    g = h // hk  # query heads per key and value head
    scaled = query.float().reshape(b, hk, g * n, d) * (d**-0.5 if scale is None else scale)
    scores = (scaled.unsqueeze(-2) * key.float().unsqueeze(-3)).sum(-1)  # [b, hk, g n, s]
    if attn_mask is not None:
        m = attn_mask
        if m.shape[1] == h and h > 1:  # a mask per query head
            m = m.reshape(b, hk, g * n, s)
        else:  # one mask for every head: the same for each head of a group
            m = m.reshape(m.shape[0], 1, 1, n, s).expand(m.shape[0], 1, g, n, s)
            m = m.reshape(m.shape[0], 1, g * n, s)
        scores = torch.where(m, scores, float("-inf")) if m.dtype == torch.bool else scores + m
    probs = torch.softmax(scores, dim=-1)
    out = (probs.unsqueeze(-1) * value.float().unsqueeze(-3)).sum(-2)  # [b, hk, g n, d]
    return out.reshape(b, h, n, d).to(query.dtype)


def decompositions() -> Any:
    """The decomposition table a CPU package's program runs before compiling: torch.export's
    own, with linear (a float32 one of up to 8 rows as specviz.linear where specviz's kernels
    are built: AVX2 and AVX-512),
    and under AVX-512 the int8 draft's kernel (torch._weight_int8pack_mm),
    as _rows_as_reductions, elsewhere as _int8_rows_as_words (on 2 cores of an
    AVX2 AMD EPYC the w8-bf16 draft's step 15.6 ms, the kernel's eager step 38; where
    specviz's own kernel is built, specviz.backend.kernels, the int8 layer calls it instead and
    never reaches this entry), and attention as _attention_on_laid_out_query. Measured
    on 2 cores (AMD EPYC, AVX-512): the offline pair's fp32 target's 1-position step 14 ms
    against 35 ms for the BLAS call, its 5-position call 20 ms against 40 ms; the w8-bf16
    draft's step 5.7 ms against 7.4 ms with the int8 kernel. It is the same products summed
    in another order, so the logits differ from eager's in the last bits only; the probe
    checks them at load. (Other forms measured worse: a single [out, rows, in] reduction is
    vectorised along the rows at 5 rows, 4 times slower than the BLAS call; the weights as
    the BLAS call's left operand give 26 ms at 5 positions and no gain at 1; the int8
    reduction in bf16 16 ms a draft step.)"""
    import torch._inductor.inductor_prims  # noqa: F401  (registers the prim; loads inductor)

    table = torch.export.default_decompositions()
    table[aten.linear.default] = _package_linear
    table[aten._weight_int8pack_mm.default] = _int8pack_mm_as_reductions
    table[aten.scaled_dot_product_attention.default] = _attention_on_laid_out_query
    return table


class Refused(ValueError):
    """A package that could not be built, or not kept: its one-line reason."""


@contextlib.contextmanager
def _package_lowerings() -> Any:
    """Inductor's lowerings while a package compiles, with one change: ATen's int4 kernel
    (torch._weight_int4pack_mm_for_cpu, the w4 drafts' layers) is called as it is, its
    group size an integer in the generated code. Inductor's own lowering of it turns the
    group size into a tensor constant of the graph (``add_tensor_constant``); a package
    built without its constants stores that tensor nowhere, and the loader supplies only the
    model's tensors, so no process could ever load the package. Called through
    AOTInductor's proxy executor, the kernel is the one the eager layer runs."""
    import logging

    from torch._inductor import lowering

    # inductor warns at each such call that the kernel has no C shim: that is the intent
    quiet = logging.getLogger("torch._inductor.ir")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    ops = [aten._weight_int4pack_mm_for_cpu, aten._weight_int4pack_mm_for_cpu.default]
    saved = {op: lowering.lowerings[op] for op in ops if op in lowering.lowerings}
    for op in ops:
        lowering.lowerings[op] = lowering.fallback_handler(
            aten._weight_int4pack_mm_for_cpu.default, add_to_fallback_set=False
        )
    try:
        yield
    finally:
        quiet.setLevel(level)
        for op in ops:
            if op in saved:
                lowering.lowerings[op] = saved[op]
            else:
                lowering.lowerings.pop(op, None)


def check_constants(path: str | Path, model: torch.nn.Module, what: str) -> None:
    """Refuse (Refused, naming one) a compiled package whose code needs a constant that the
    loader cannot supply: load() passes the model's own tensors (constants()) and nothing
    else, since the package stores none."""
    wanted = set(torch._inductor.aoti_load_package(str(path)).get_constant_fqns())
    missing = sorted(wanted - set(constants(model)))
    if missing:
        raise Refused(
            f"{what} needs {len(missing)} constant(s) the loader cannot supply, first "
            f"{missing[0]!r} (a lowering added a tensor that is not the model's)"
        )


def build(model: torch.nn.Module, width: int, length: int) -> Path:
    """Export and compile one package (the file appears whole or not at all); Refused when
    its code would need a constant the loader cannot supply (nothing is written)."""
    k = key(model, width, length)
    path = path_of(k)
    path.parent.mkdir(parents=True, exist_ok=True)
    step = AotiStep(model, width, length, features=True)
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".pt2", dir=path.parent)
    os.close(fd)
    try:
        with warnings.catch_warnings():  # torch.export's own deprecation notices
            warnings.simplefilter("ignore", FutureWarning)
            exported = export_step(step, step.example_args())
            if next(model.parameters()).device.type == "cpu":
                exported = exported.run_decompositions(decompositions())
            with _package_lowerings():
                torch._inductor.aoti_compile_and_package(
                    exported,
                    package_path=tmp,
                    inductor_configs={"aot_inductor.package_constants_in_so": False},
                )
        check_constants(tmp, model, f"{type(model).__name__}'s {width}-position package")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    path.with_suffix(".json").write_text(json.dumps(k, indent=1, sort_keys=True))
    return path


def _probe(model: torch.nn.Module, width: int, length: int, fn: Callable[..., Any]) -> bool:
    """Whether the package's call agrees with the eager model on one probe call: the same
    shape (and a finite hidden state of one row per position, where it returns one),
    finite, and at each row the token it ranks first is the eager model's first or
    within 2 % of the eager row's logit range of it (a low-precision draft's fused kernels
    may swap a near tie; a broken package ranks at random)."""
    step = AotiStep(model, width, length)
    args = step.example_args()
    ids = torch.full_like(args[0], PROBE_TOKEN)
    with torch.inference_mode():
        got = fn(ids, *[t.clone() for t in args[1:]])
        want = step(ids, *[t.clone() for t in args[1:]])
    if isinstance(got, (list, tuple)):
        if len(got) > 1:
            h = got[1]
            if h.shape[0] != width or not bool(torch.isfinite(h).all()):
                return False
        got = got[0]
    if tuple(got.shape) != tuple(want.shape) or not bool(torch.isfinite(got).all()):
        return False
    want = want.float()
    top = want.max(-1).values
    chosen = want.gather(-1, got.argmax(-1, keepdim=True)).squeeze(-1)
    spread = top - want.min(-1).values
    return bool(((top - chosen) <= 0.02 * spread + 1e-4).all())


class Forward:
    """A loaded package's call, its tensors passed straight to the package's runner: the
    loaded model's own call parses its input and output specs from JSON and flattens its
    arguments on every call (0.18 ms a call under cProfile with a cache of 90 tensors).
    The arguments are tensors only, in the exported order (ids, *state), so they
    are the flat inputs; the output spec is parsed once."""

    def __init__(self, compiled: Any) -> None:
        from torch.utils import _pytree as pytree

        self.loader = compiled.loader
        self._unflatten = pytree.tree_unflatten
        self._out_spec = pytree.treespec_loads(self.loader.get_call_spec()[1])

    def __call__(self, *args: torch.Tensor) -> Any:
        return self._unflatten(self.loader.boxed_run(list(args)), self._out_spec)


def load(
    model: torch.nn.Module, width: int, length: int, report: Callable[[str], None] = say
) -> Callable[..., Any] | None:
    """The package's forward on the model's own tensors, or None when there is none; a
    corrupt one is removed with one line on stderr (and None)."""
    path = path_of(key(model, width, length))
    if not path.exists():
        return None
    try:
        fn = torch._inductor.aoti_load_package(str(path))
        wanted = set(fn.get_constant_fqns())
        fn.load_constants(
            {n: t for n, t in constants(model).items() if n in wanted},
            check_full_update=True,
            user_managed=True,
        )
        fn = Forward(fn)
        if not _probe(model, width, length, fn):
            raise ValueError("its probe call disagrees with the eager model")
    except Exception as exc:  # a package is a file on disk: anything may be wrong with it
        report(
            f"specviz: the compiled package {path.name} is unusable "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}); "
            "removed, so the set-up step builds it again"
        )
        for p in (path, path.with_suffix(".json")):
            p.unlink(missing_ok=True)
        return None
    return fn


def _usable_keys() -> list[dict[str, Any]]:
    """The keys of the store's packages built for this torch and this CPU."""
    d = store()
    out = []
    for meta in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            k = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue
        if (
            isinstance(k, dict)
            and k.get("format") == FORMAT
            and k.get("torch") == torch.__version__
            and k.get("cpu") == capability()
            and meta.with_suffix(".pt2").exists()
        ):
            out.append(k)
    return out


def available() -> bool:
    """Whether the store holds any package for this torch and this CPU (auto's test)."""
    return bool(_usable_keys())


def has_any(model: torch.nn.Module) -> bool:
    """Whether the store holds a package of any shape for this model here."""
    mk = model_key(model)
    return any(k.get("model") == mk for k in _usable_keys())


def has_package(model: torch.nn.Module, width: int, length: int) -> bool:
    """Whether the store holds this model's package for this width and cache length, for
    this torch and this CPU, and its build is not recorded as failed: what load() looks for
    (nothing is built or loaded here)."""
    return path_of(key(model, width, length)).exists() and not failed(model, width, length)


class Packages:
    """The process's loaded packages, per model and (width, length); loaded once and
    shared by every run (the forwards are only ever called from the model thread)."""

    def __init__(self, report: Callable[[str], None] = say) -> None:
        self.report = report
        self.lock = threading.Lock()
        # per model (weakly: a model that goes away takes its forwards with it)
        self._loaded: weakref.WeakKeyDictionary[
            torch.nn.Module, dict[tuple[int, int], Callable[..., Any] | None]
        ] = weakref.WeakKeyDictionary()

    def get(
        self, model: torch.nn.Module, width: int, length: int, build_missing: bool = False
    ) -> Callable[..., Any] | None:
        k = (width, length)
        with self.lock:
            loaded = self._loaded.setdefault(model, {})
            if loaded.get(k) is None:
                fn = load(model, width, length, self.report)
                why = failed(model, width, length) if fn is None else None
                if fn is None and build_missing and why is None:
                    t0 = time.perf_counter()
                    self.report(
                        f"specviz: compiling {type(model).__name__}'s {width}-position call on a "
                        f"cache of {length} ahead of time (one to three minutes on 2 CPU cores)"
                    )
                    try:
                        build(model, width, length)
                    except Exception as exc:  # recorded: not tried again (see failed())
                        why = f"its build failed ({_reason(exc)})"
                        record_failure(model, width, length, why)
                        self.report(f"specviz: {why}; it runs eager")
                    else:
                        fn = load(model, width, length, self.report)
                        self.report(f"specviz: compiled in {time.perf_counter() - t0:.0f} s")
                loaded[k] = fn
            return loaded[k]


PACKAGES = Packages()


def forwards_for(
    model: torch.nn.Module,
    widths: tuple[int, ...],
    length: int,
    build_missing: bool = False,
) -> dict[int, Callable[..., Any]] | None:
    """The packaged forward of every width at this cache length, or None when any is
    missing (and not built)."""
    out = {}
    for w in widths:
        fn = PACKAGES.get(model, w, length, build_missing)
        if fn is None:
            return None
        out[w] = fn
    return out


def code_digest() -> str:
    """specviz's code that a package's generated code depends on beyond its key: the
    compiled path's modules, the export step, the offline models' layers (and their
    stacking) and the kernels' loader. A recorded failure (failed()) stands only while
    this is unchanged."""
    files = sorted(Path(__file__).resolve().parent.glob("*.py"))  # the backend's modules
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def _failed_path(k: dict[str, Any]) -> Path:
    return path_of(k).with_suffix(".failed.json")


def failed(model: torch.nn.Module, width: int, length: int) -> str | None:
    """Why this package could not be built or kept here, when that is recorded for this
    torch, CPU, model, shape and code; None otherwise (then it may be built)."""
    k = key(model, width, length)
    try:
        rec = json.loads(_failed_path(k).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("key") != k or rec.get("code") != code_digest():
        return None
    return str(rec.get("reason") or "unknown")


def record_failure(model: torch.nn.Module, width: int, length: int, reason: str) -> None:
    """Record why a package could not be built or kept (written whole), and remove any file
    of it: set-up does not try it again until torch, the CPU, the model or the code changes."""
    k = key(model, width, length)
    path = path_of(k)
    for p in (path, path.with_suffix(".json")):
        p.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = {"key": k, "code": code_digest(), "reason": reason, "made": time.strftime("%F %T")}
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
    os.replace(tmp, _failed_path(k))


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__


def prepare(
    models: dict[str, torch.nn.Module],
    shapes: dict[str, tuple[int, ...]],
    length: int,
    report: Callable[[str], None] = say,
    elsewhere: Callable[[list[tuple[str, int]]], Any] | None = None,
    check: Callable[[list[tuple[str, int]]], dict[str, str]] | None = None,
) -> dict[str, float]:
    """The set-up step's builds: each model's widths at one cache length, those missing
    built (seconds per built package, by "role/width"; a package already there costs a
    load and a probe). elsewhere, given half of the missing (role, width) pairs, starts
    building them in another process and returns a handle whose wait() gives a dict of
    their seconds when it is done (a build is mostly one core's work: code generation in
    Python, then one compiler process); what it did not build is built here after it.

    check, given the (role, width) pairs built, loads and probes them in a fresh process
    and returns, by "role/width", why each one it could not use failed ("" for a good one):
    only a package a fresh process loaded is kept. A package that could not be built or
    kept is recorded with its reason (record_failure) and not tried again while that record
    stands (failed()); one line says so."""
    took: dict[str, float] = {}
    todo: list[tuple[str, int]] = []
    paths: set[Path] = set()
    for role, model in models.items():
        for w in shapes[role]:
            path = path_of(key(model, w, length))
            if path in paths:  # the same model and shape under another role
                continue
            paths.add(path)
            why = failed(model, w, length)
            if why is not None:
                report(
                    f"specviz: the {role}'s {w}-position call is not compiled here: {why} "
                    "(recorded; tried again when torch, the CPU or specviz's code changes)"
                )
            elif load(model, w, length, report) is None:
                todo.append((role, w))
    theirs: list[tuple[str, int]] = []
    handle = None
    if elsewhere is not None and len(todo) > 1:
        theirs, todo = todo[1::2], todo[0::2]
        handle = elsewhere(theirs)

    def here(role: str, w: int) -> None:
        t0 = time.perf_counter()
        try:
            build(models[role], w, length)
        except Exception as exc:  # any failure of a build is recorded
            record_failure(models[role], w, length, f"its build failed ({_reason(exc)})")
            report(f"specviz: the {role}'s {w}-position call could not be compiled: {_reason(exc)}")
            return
        took[f"{role}/{w}"] = time.perf_counter() - t0
        report(
            f"specviz: compiled the {role}'s {w}-position call ahead of time in "
            f"{took[f'{role}/{w}']:.0f} s"
        )

    for role, w in todo:
        here(role, w)
    if handle is not None:
        done = handle.wait() or {}
        for role, w in theirs:
            if load(models[role], w, length, report) is None:
                here(role, w)  # the other process did not build it
            else:
                took[f"{role}/{w}"] = float(done.get(f"{role}/{w}", float("nan")))
    built = [(r, w) for r, w in [*todo, *theirs] if f"{r}/{w}" in took]
    if check is not None and built:
        verdicts = check(built)
        for role, w in built:
            why = verdicts.get(f"{role}/{w}", "a fresh process did not report on it")
            if why:
                record_failure(models[role], w, length, f"a fresh process could not use it ({why})")
                report(f"specviz: the {role}'s {w}-position package is not kept: {why}")
                del took[f"{role}/{w}"]
    return took


_forwards: weakref.WeakKeyDictionary[torch.nn.Module, dict[tuple[Any, ...], Any]] = (
    weakref.WeakKeyDictionary()
)
_told: set[tuple[str, tuple[int, ...], int]] = set()
_why_eager: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()


def why_eager(model: torch.nn.Module) -> str | None:
    """Why packaged() last found no packages for this model (None if it did not fail)."""
    return _why_eager.get(model)


def packaged(
    m: Any, widths: tuple[int, ...], length: int, build_missing: bool = False
) -> Any | None:
    """The compiled path's compiler (specviz.backend.aoti.AotiForwards) for one loaded model (a
    specviz.pair.LoadedModel) at these widths and this cache length, or None where a package
    is missing: the caller then runs eager. One line on stderr says so once per shape when
    the model has packages of other shapes; a model never compiled here runs eager quietly."""
    k = (tuple(widths), int(length))
    mine = _forwards.setdefault(m.model, {})
    if k not in mine:
        recorded = [why for w in widths if (why := failed(m.model, w, length))]
        if recorded:
            _why_eager[m.model] = f"its package could not be built here ({recorded[0]})"
        if not build_missing and not has_any(m.model):
            _why_eager.setdefault(m.model, "no compiled package was built for it here")
            return None  # never compiled for this model: the eager path, as auto promises
        fns = forwards_for(m.model, widths, length, build_missing)
        if fns is None:
            _why_eager.setdefault(
                m.model,
                f"no compiled package for {'/'.join(map(str, widths))} positions on a cache "
                f"of {length}",
            )
            told = (m.name, tuple(widths), int(length))
            if told not in _told:
                _told.add(told)
                say(
                    f"specviz: {m.name}: no compiled package for "
                    f"{'/'.join(map(str, widths))} positions on a cache of {length} "
                    "(`python -m specviz prepare` builds the default run's; `--compile aoti` "
                    "builds what a run needs): it runs eager"
                )
            return None
        _why_eager.pop(m.model, None)
        fw = AotiForwards()
        for w, fn in fns.items():
            fw.add(m.model, w, length, fn, features=True)  # every package returns them
        mine[k] = fw
    return mine[k]
