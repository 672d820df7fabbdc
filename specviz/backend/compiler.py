"""The compiler: one torch.compile'd forward per model, compiled once per shape, and the
inductor settings and cache directory it compiles with."""

from __future__ import annotations

import contextlib
import copy
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

from specviz.backend.estimates import estimate, record
from specviz.lm import input_device


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
        if backend == "inductor":  # inductor reads the variable whenever it compiles
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = compile_cache_dir()
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
            for m, compiled in list(self._models.items())
            for (w, n), s in compiled.shapes.items()
        }

    def ready(self, model: torch.nn.Module, width: int, length: int) -> bool:
        """Whether this model has been compiled for this width and cache length."""
        compiled = self._models.get(model)
        return compiled is not None and (width, length) in compiled.shapes

    def _entry(self, model: torch.nn.Module) -> _Compiled:
        compiled = self._models.get(model)
        if compiled is None:
            with self.lock:
                compiled = self._models.get(model)
                if compiled is None:
                    compiled = self._models[model] = _Compiled.of(model, self.backend)
        return compiled

    def __call__(
        self, name: str, model: torch.nn.Module, ids: torch.Tensor, cache: StaticCache
    ) -> torch.Tensor:
        """Logits [B, V] for ids [1, B] on cache, compiling the shape on its first call."""
        shape = (int(ids.shape[1]), int(cache.layers[0].max_cache_len))
        compiled = self._entry(model)
        if shape in compiled.shapes:
            return _call(compiled.fn, compiled.twin, ids, cache)
        with self.lock:
            if shape in compiled.shapes:
                return _call(compiled.fn, compiled.twin, ids, cache)
            est = estimate(self.backend, (name, *shape), model)
            self.report(
                f"compiling {name} for {shape[0]} positions ({self.backend}), about {est:.0f} s"
            )
            t0 = time.perf_counter()
            with _inductor_config(self.backend, ids.device), warnings.catch_warnings():
                # inductor's autotuner reads a storage size through a deprecated call
                warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
                out = _call(compiled.fn, compiled.twin, ids, cache)
            compiled.shapes[shape] = dt = time.perf_counter() - t0
            record(self.backend, (name, *shape), dt)
            self.report(f"compiled {name} for {shape[0]} positions in {dt:.1f} s")
            return out


@dataclass
class _Compiled:
    """One model's compiled forward, the twin of the model it runs (modules of its own over
    the same weight tensors), and its shapes."""

    fn: Callable[..., torch.Tensor]
    twin: torch.nn.Module
    shapes: dict[tuple[int, int], float]  # (width, cache length): seconds to compile

    @classmethod
    def of(cls, model: torch.nn.Module, backend: str) -> _Compiled:
        weights = {id(t): t for t in (*model.parameters(), *model.buffers())}
        options: dict[str, Any] = {"guard_filter_fn": _input_guards(weights)}
        if backend == "inductor" and input_device(model).type == "cuda":
            options["triton.cudagraphs"] = True  # what mode="reduce-overhead" sets
        fn = torch.compile(
            _own_forward(), backend=backend, fullgraph=True, dynamic=False, options=options
        )
        return cls(fn, _twin(model, weights), {})


def _own_forward() -> Callable[..., torch.Tensor]:
    """_forward with a code object of its own. Dynamo keeps its graphs per code object, and
    neither the guards kept (see _input_guards) nor freezing's constants tell two models of
    the same shapes apart: sharing one code object, a draft could run its target's graph."""
    return types.FunctionType(_forward.__code__.replace(), _forward.__globals__, "_forward")


def _twin(model: torch.nn.Module, weights: dict[int, torch.Tensor]) -> torch.nn.Module:
    """The module tree the compiled forwards run: the model's own parameters and buffers
    (shared, never copied) in modules of their own, whose config asks for transformers'
    eager attention. Inductor fuses that attention (a query row against a static cache of
    a few hundred keys) with its neighbours, where SDPA stays one opaque call per layer;
    the eager path, which keeps SDPA, shares the weights and nothing else. weights: the
    model's parameters and buffers by id."""
    twin = copy.deepcopy(model, dict(weights))  # the memo: each weight copies to itself
    twin.set_attn_implementation("eager")
    return twin


def _input_guards(weights: dict[int, torch.Tensor]) -> Callable[[list[Any]], list[bool]]:
    """Dynamo's guard filter for one model's compiled forward: keep the guards on the
    call's own tensors (the ids' width, the static cache's length), drop the rest. Every
    call runs under inference mode on the same view of the same model, whose weights are
    never written; the hundreds of guards on those weights and modules cost time on every
    call and can never fail. weights: the model's parameters and buffers by id."""

    def keep(entries: list[Any]) -> list[bool]:
        return [e.guard_type == "TENSOR_MATCH" and id(e.value) not in weights for e in entries]

    return keep


def _inductor_config(backend: str, device: torch.device) -> Any:
    """Inductor's settings while a shape compiles, on the CPU:
    - freezing: the weights become constants of the graph, so that each linear layer runs
      on weights prepacked once for the CPU's GEMM kernels, at the cost of that packed copy
      per compiled shape;
    - max_autotune with the C++ GEMM template beside ATen's: each linear layer gets the
      faster of the two for its exact shape.
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
    return inductor_config.patch(
        {k: value for k, value in settings.items() if hasattr(inductor_config, k)}
    )


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


def compile_cache_dir() -> str:
    """Where inductor keeps generated code: TORCHINDUCTOR_CACHE_DIR if the user set it,
    else the specviz cache (torch fills the variable in with a temporary directory of its
    own as soon as transformers builds a model; that choice does not count)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from specviz.backend.offline import cache_root

    d = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not d or os.path.abspath(d) == os.path.abspath(default_cache_dir()):
        return str(cache_root() / "inductor")
    return d


_compilers: dict[str, Compiler] = {}


def compiler_for(backend: str) -> Compiler:
    """The process's compiler for a backend (created on first use)."""
    with _registry_lock:
        if backend not in _compilers:
            _compilers[backend] = Compiler(backend)
        return _compilers[backend]


_registry_lock = threading.Lock()
