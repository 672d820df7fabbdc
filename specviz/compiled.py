"""The compiled path: a static KV cache and forwards compiled for a few fixed shapes.

``StaticLM`` is ``CachedLM``'s drop-in on this path (same ``logits``, ``rollback``,
``tokens``, ``calls``). Its cache is transformers' ``StaticCache``: key and value tensors of
a fixed length, written in place at the cache's position. Rolling back moves that position
(one ``fill_`` per layer) and copies nothing; what lies beyond it is overwritten by the next
call and never read before that, because every query attends only to keys at or before its
own position (the causal mask).

Shapes. A call that feeds m new tokens is padded on the right to the smallest of its
``widths`` that holds m (the draft: 1 and 2; the target: 1 and gamma + 1), so that a run has
two or three shapes per model and none changes from round to round. The padding positions
come after every real one, so the causal mask hides them from the real queries; their rows
of logits are dropped and the position moves back past them. The cache length is a power of
two of at least 256 positions. The prompt's first call (the prefill) runs eagerly on the
same cache, as transformers recommends.

Caches are handed back when a run finishes and reused by the next run of the same model and
length, so that their buffers keep one address (CUDA graphs replay on fixed addresses).

What a compiled call costs beyond its arithmetic (measured on the offline pair, 2 CPU
cores), and what removes it:

- dynamo's guards: about 2 ms a call, nearly all on the model's weights and modules. Only
  the guards on the call's own tensors are kept (``_input_guards``); each model has a
  forward of its own, so no model can run another's graph;
- attention: SDPA is one opaque call per layer; the compiled forwards run a view of the
  model (its own modules, the same weight tensors) with transformers' eager attention,
  which inductor fuses with its neighbours. The prefill keeps the model's SDPA;
- the weights' layout: on the CPU, inductor compiles with freezing, so each linear layer
  runs on weights packed once for the GEMM kernels. Each compiled shape holds its packed
  copy of the fp32 weights (the int8 draft's are used as they are);
- the GEMM kernels: on the CPU, inductor also autotunes each linear layer between ATen's
  kernel and its own C++ GEMM template for the layer's exact shape. In the quick bench the
  compiled AR run fell from 52.6 to 29.4 ms/token; each shape compiles 2.5 to 3.5 times as
  long.

Compilation happens once per process, model, width and cache length (``Compiler``), under
a lock, and is reported on stderr ("compiling ..., about N s"; the estimate is the last
time recorded for that shape, kept beside torch's compile cache). Inductor's caches live
under the specviz cache directory unless TORCHINDUCTOR_CACHE_DIR says otherwise, so a
restarted process reuses the generated code and compiles in a fraction of the first time.

Exactness. The rule, the warps and the draws are the eager path's own code; only the
forward differs. Greedy speculative output equals greedy autoregressive output on this path
as on the eager one. Compiled logits may differ from eager logits in the last bits (fused
kernels sum in another order), so compiled and eager greedy outputs agree only as far as no
argmax is that close to a tie.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import StaticCache

from specviz.config import COMPILE_BACKENDS, on_zero_gpu
from specviz.lm import common_prefix, finished

BACKENDS = COMPILE_BACKENDS
MIN_CACHE_LEN = 256


def auto_backend(device: torch.device) -> str | None:
    """The path a run takes unless told otherwise: compiled with inductor on CUDA, where the
    GPU check measured it 5.8 to 7.0 times faster per speculative token than the eager path
    (an H200, README "GPU check"), except on ZeroGPU; eager on the CPU, where it gains about
    2.5x but each shape compiles for about two and a half minutes on 2 cores."""
    return "inductor" if device.type == "cuda" and not on_zero_gpu() else None


def check_compilable(model: torch.nn.Module, backend: str) -> None:
    """Raise ValueError unless the compiled path can run this model with this backend."""
    if backend not in BACKENDS:
        raise ValueError(f"compile backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if on_zero_gpu():
        raise ValueError("the compiled path is not available on ZeroGPU (no torch.compile there)")
    name = type(model).__name__
    if not getattr(model, "_can_compile_fullgraph", False):
        raise ValueError(f"{name} cannot run on the compiled path (no static-cache support)")
    spread = set((getattr(model, "hf_device_map", None) or {}).values())
    if len(spread) > 1:
        raise ValueError("the compiled path needs the target on one device (SPECVIZ_DEVICE_MAP)")


def cache_len(needed: int) -> int:
    """The static cache's length: a power of two of at least MIN_CACHE_LEN positions."""
    n = MIN_CACHE_LEN
    while n < needed:
        n *= 2
    return n


def compile_cache_dir() -> str:
    """Where inductor keeps generated code: TORCHINDUCTOR_CACHE_DIR if the user set it,
    else the specviz cache (torch fills the variable in with a temporary directory of its
    own as soon as transformers builds a model; that choice is replaced)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from specviz.offline import cache_root

    d = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not d or os.path.abspath(d) == os.path.abspath(default_cache_dir()):
        d = str(cache_root() / "inductor")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = d  # read by inductor whenever it compiles
    return d


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Compiler:
    """One compiled forward per model, and the shapes it has been compiled for.

    Dynamo keeps one graph per shape (static shapes: ``dynamic=False``); the first call of
    a shape compiles under the lock, later calls only check guards. Each model gets its own
    ``torch.compile`` wrapper, so that no model's graphs can serve another (their static
    caches may have the same shapes); the state is keyed by the model object itself, never
    by ``id()``, which a later model can reuse. ``compile_s`` holds each shape's compile
    time in this process; ``compiles`` counts dynamo's graphs since the first call, so a
    steady state shows no growth."""

    def __init__(self, backend: str = "inductor", report: Callable[[str], None] = say) -> None:
        self.backend, self.report = backend, report
        self.lock = threading.Lock()
        self._models: weakref.WeakKeyDictionary[torch.nn.Module, _Compiled] = (
            weakref.WeakKeyDictionary()
        )
        self._graphs0 = _graphs()
        if backend == "inductor":
            compile_cache_dir()
        # shapes x models of one process; dynamo's default limit (8) is per code object
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)

    @property
    def compiles(self) -> int:
        return _graphs() - self._graphs0

    @property
    def compile_s(self) -> dict[tuple[int, int, int], float]:
        """Seconds per (model, width, cache length) compiled in this process."""
        return {
            (id(m), w, n): s
            for m, c in list(self._models.items())
            for (w, n), s in c.shapes.items()
        }

    def ready(self, model: torch.nn.Module, width: int, length: int) -> bool:
        """Whether this model has been compiled for this width and cache length."""
        c = self._models.get(model)
        return c is not None and (width, length) in c.shapes

    def _entry(self, model: torch.nn.Module) -> _Compiled:
        c = self._models.get(model)
        if c is None:
            with self.lock:
                c = self._models.get(model)
                if c is None:
                    c = self._models[model] = _Compiled.of(model, self.backend)
        return c

    def __call__(
        self, name: str, model: torch.nn.Module, ids: torch.Tensor, cache: StaticCache
    ) -> torch.Tensor:
        """Logits [B, V] for ids [1, B] on cache, compiling the shape on its first call."""
        shape = (int(ids.shape[1]), int(cache.layers[0].max_cache_len))
        c = self._entry(model)
        if shape in c.shapes:
            return _call(c.fn, c.view, ids, cache)
        with self.lock:
            if shape in c.shapes:
                return _call(c.fn, c.view, ids, cache)
            est = _estimate(self.backend, (name, *shape), model)
            self.report(
                f"compiling {name} for {shape[0]} positions ({self.backend}), about {est:.0f} s"
            )
            t0 = time.perf_counter()
            with _inductor_config(self.backend, ids.device), warnings.catch_warnings():
                # inductor's autotuner reads a storage size through a deprecated call
                warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
                out = _call(c.fn, c.view, ids, cache)
            c.shapes[shape] = dt = time.perf_counter() - t0
            _record(self.backend, (name, *shape), dt)
            self.report(f"compiled {name} for {shape[0]} positions in {dt:.1f} s")
            return out


@dataclass
class _Compiled:
    """One model's compiled forward, the view of the model it runs, and its shapes."""

    fn: Callable[..., torch.Tensor]
    view: torch.nn.Module
    shapes: dict[tuple[int, int], float]  # (width, cache length): seconds to compile

    @classmethod
    def of(cls, model: torch.nn.Module, backend: str) -> _Compiled:
        weights = {id(t): t for t in (*model.parameters(), *model.buffers())}
        options: dict[str, Any] = {"guard_filter_fn": _input_guards(weights)}
        if backend == "inductor" and _device(model).type == "cuda":
            options["triton.cudagraphs"] = True  # what mode="reduce-overhead" sets
        fn = torch.compile(
            _own_forward(), backend=backend, fullgraph=True, dynamic=False, options=options
        )
        return cls(fn, _view(model, weights), {})


def _own_forward() -> Callable[..., torch.Tensor]:
    """_forward with a code object of its own. Dynamo keeps its graphs per code object, and
    neither the guards kept (see _input_guards) nor freezing's constants tell two models of
    the same shapes apart: sharing one code object, a draft could run its target's graph."""
    return types.FunctionType(_forward.__code__.replace(), _forward.__globals__, "_forward")


def _view(model: torch.nn.Module, weights: dict[int, torch.Tensor]) -> torch.nn.Module:
    """The module tree the compiled forwards run: the model's own parameters and buffers
    (shared, never copied) in modules of their own, whose config asks for transformers'
    eager attention. Inductor fuses that attention (a query row against a static cache of
    a few hundred keys) with its neighbours, where SDPA stays one opaque call per layer;
    the eager path, which keeps SDPA, shares the weights and nothing else. weights: the
    model's parameters and buffers by id."""
    view = copy.deepcopy(model, dict(weights))  # the memo: each weight copies to itself
    view.set_attn_implementation("eager")
    return view


def _input_guards(weights: dict[int, torch.Tensor]) -> Callable[[list[Any]], list[bool]]:
    """Dynamo's guard filter for one model's compiled forward: keep the guards on the
    call's own tensors (the ids' width, the static cache's length), drop the rest. Every
    call runs under inference mode on the same view of the same model, whose weights are
    never written; the hundreds of guards on those weights and modules cost about 2 ms a
    call on a CPU and can never fail. weights: the model's parameters and buffers by id."""

    def keep(entries: list[Any]) -> list[bool]:
        return [e.guard_type == "TENSOR_MATCH" and id(e.value) not in weights for e in entries]

    return keep


def _inductor_config(backend: str, device: torch.device) -> Any:
    """Inductor's settings while a shape compiles, on the CPU:
    - freezing: the weights become constants of the graph, so that each linear layer runs
      on weights prepacked once for the CPU's GEMM kernels (about 1.3x on a target step
      here), at the cost of that packed copy per compiled shape;
    - max_autotune with the C++ GEMM template beside ATen's: each linear layer gets the
      faster of the two for its exact shape (about 2x on a one-token target step here).
    On CUDA the defaults stay: CUDA graphs remove the launch costs that dominate there."""
    if backend != "inductor" or device.type != "cpu":
        return contextlib.nullcontext()
    import torch._inductor.config as inductor_config

    settings = {
        "freezing": True,
        "max_autotune": True,
        "max_autotune_gemm_backends": "CPP,ATEN",
        # the autotuner's tables of candidates and timings, written to stderr per layer
        "autotune_num_choices_displayed": 0,
        "max_autotune_report_choices_stats": False,
    }
    return inductor_config.patch({k: v for k, v in settings.items() if hasattr(inductor_config, k)})


def _forward(model: torch.nn.Module, ids: torch.Tensor, cache: StaticCache) -> torch.Tensor:
    n = ids.shape[1]
    return model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=n).logits


def _call(fn: Callable[..., torch.Tensor], model: Any, ids: torch.Tensor, cache: Any) -> Any:
    if ids.device.type == "cuda":
        torch.compiler.cudagraph_mark_step_begin()
        return fn(model, ids, cache)[0].clone()  # a graph's output is overwritten on replay
    return fn(model, ids, cache)[0]


def _graphs() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def _device(model: torch.nn.Module) -> torch.device:
    from specviz.lm import input_device

    return input_device(model)


# --- compile times, kept beside inductor's cache so that the estimate follows a restart --


def _times_path() -> str:
    from specviz.offline import cache_root

    return str(cache_root() / "compile_times.json")


def _estimate(backend: str, key: tuple[str, int, int], model: torch.nn.Module) -> float:
    """The last recorded compile time of this shape (inductor), else a guess by depth."""
    try:
        if backend != "inductor":
            raise KeyError(backend)
        with open(_times_path()) as f:
            return float(json.load(f)[_key(backend, key)])
    except (OSError, ValueError, KeyError, TypeError):
        layers = int(getattr(getattr(model, "config", None), "num_hidden_layers", 1) or 1)
        if backend != "inductor":
            return 0.1 * layers + 2.0
        if _device(model).type == "cpu":  # autotuning benchmarks each layer shape: ~35 s
            return 35.0 + 3.5 * layers
        return 1.2 * layers + 2.0


def _record(backend: str, key: tuple[str, int, int], seconds: float) -> None:
    """Keep an inductor compile time for the next estimate (the other backends keep no
    cache, and their times say nothing about a restart)."""
    if backend != "inductor":
        return
    path = _times_path()
    try:
        with open(path) as f:
            times = json.load(f)
    except (OSError, ValueError):
        times = {}
    times[_key(backend, key)] = round(seconds, 1)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(times, f)
        os.replace(tmp, path)
    except OSError:
        pass  # an estimate is a nicety; a read-only cache must not stop a run


def _key(backend: str, key: tuple[str, int, int]) -> str:
    """Inductor's cache is keyed on the thread count too: so is the estimate."""
    return f"{backend}|{key[0]}|{key[1]}|{key[2]}|{torch.get_num_threads()} threads"


# --- static caches, kept between requests ------------------------------------------------

_pool: weakref.WeakKeyDictionary[torch.nn.Module, dict[int, list[StaticCache]]] = (
    weakref.WeakKeyDictionary()
)
_pool_lock = threading.Lock()


def acquire_cache(model: torch.nn.Module, length: int) -> StaticCache:
    """A static cache of this length for this model: a released one when there is one (its
    buffers keep their addresses, which CUDA graphs replay), else a new one."""
    with _pool_lock:
        free = _pool.get(model, {}).get(length)
        if free:
            return free.pop()
    return StaticCache(config=model.config, max_cache_len=length)


def release_cache(model: torch.nn.Module, length: int, cache: StaticCache) -> None:
    with _pool_lock:
        _pool.setdefault(model, {}).setdefault(length, []).append(cache)


# --- one request's static cache -----------------------------------------------------------


class StaticLM:
    """One request's view of a model on the compiled path (see CachedLM for the contract).

    widths: the padded shapes of the calls after the prefill; max_len: the most positions
    the request writes (prompt, new tokens and the widest padding)."""

    def __init__(
        self,
        model: torch.nn.Module,
        name: str,
        vocab_size: int,
        compiler: Compiler,
        widths: tuple[int, ...],
        max_len: int,
        out_device: torch.device | None = None,
    ) -> None:
        self.model, self.name, self.vocab_size = model, name, vocab_size
        self.compiler, self.widths = compiler, tuple(sorted(widths))
        self.device = _device(model)
        self.out_device = out_device or self.device
        self.length = cache_len(max_len)
        self.cache: StaticCache | None = acquire_cache(model, self.length)
        self._move(0)  # a reused cache starts empty: what it held lies beyond the position
        self.tokens: list[int] = []  # the tokens whose keys and values the cache holds
        self.calls = 0
        self.busy_s = 0.0  # seconds inside the model's forward (specviz.costs reads it)

    def close(self) -> None:
        """The request is over: hand the cache back for the next one (once)."""
        if self.cache is not None:
            release_cache(self.model, self.length, self.cache)
            self.cache = None

    @property
    def cached(self) -> int:
        return len(self.tokens)

    def rollback(self, seq: list[int]) -> None:
        """Move the cache's position back to the longest prefix it shares with seq."""
        self._crop(common_prefix(self.tokens, seq))

    def _crop(self, keep: int) -> None:
        if keep < len(self.tokens):
            del self.tokens[keep:]
            self._move(keep)

    @torch.inference_mode()
    def _move(self, pos: int) -> None:
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.cumulative_length.fill_(pos)

    def _precompile(self, pos: int) -> None:
        """Compile every width not yet compiled, right after the prefill, so that no later
        call of the run (or of a timed run after a warm-up) pays for compiling. Each trial
        call writes beyond pos, and the position moves back to pos."""
        for w in self.widths:
            if pos + w <= self.length and not self.compiler.ready(self.model, w, self.length):
                ids = torch.zeros(1, w, dtype=torch.long, device=self.device)
                self.compiler(self.name, self.model, ids, self.cache)
                self._move(pos)

    def width(self, m: int) -> int:
        """The padded width of a call feeding m tokens: the smallest width that holds m."""
        return next((w for w in self.widths if w >= m), m)

    @torch.inference_mode()
    def logits(self, seq: list[int], keep: int = 1) -> torch.Tensor:
        """Logits [keep, V] for the last `keep` positions of seq, feeding only uncached tokens."""
        start = min(common_prefix(self.tokens, seq), len(seq) - keep)
        self._crop(start)
        new = seq[start:]
        m = len(new)
        t0 = time.perf_counter()
        if start == 0 or m > self.widths[-1]:  # the prefill: eager, any length
            ids = torch.tensor([new], dtype=torch.long, device=self.device)
            out = self.model(
                input_ids=ids, past_key_values=self.cache, use_cache=True, logits_to_keep=keep
            ).logits[0]  # [keep, V]
            self._precompile(start + m)
        else:
            w = self.width(m)
            ids = torch.tensor([new + [0] * (w - m)], dtype=torch.long, device=self.device)
            out = self.compiler(self.name, self.model, ids, self.cache)[m - keep : m]  # [keep, V]
            self._move(start + m)  # the padding's keys lie beyond the position: never read
        logits = out[:, : self.vocab_size].to(self.out_device)
        self.busy_s += finished(logits) - t0
        self.tokens.extend(new)
        self.calls += 1
        return logits


_compilers: dict[str, Compiler] = {}


def compiler_for(backend: str) -> Compiler:
    """The process's compiler for a backend (created on first use)."""
    with _registry_lock:
        if backend not in _compilers:
            _compilers[backend] = Compiler(backend)
        return _compilers[backend]


_registry_lock = threading.Lock()
