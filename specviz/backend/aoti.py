"""Forwards compiled ahead of time (AOTInductor): a model's decode call at one fixed width on
a static KV cache, exported with ``torch.export`` and compiled into a package that a fresh
process loads without compiling anything.

ZeroGPU has no ``torch.compile`` at run time: a GPU is attached per call, in a process that
lives for that call. Hugging Face's answer is to compile ahead of time inside the Space's
GPU start-up (``spaces.aoti_capture``, ``spaces.aoti_compile``, ``spaces.aoti_apply``;
specviz.ui.zerogpu does that), and the GPU check packages and loads the same forward with
``torch._inductor.aoti_compile_and_package`` and ``aoti_load_package``
(specviz.gpucheck.aoti). Both export :class:`AotiStep`.

:class:`AotiStep` takes the cache as plain tensors (each layer's keys, values and position)
and writes them in place, as transformers' ``StaticCache`` does, so an exported program has
only tensors in and out. :class:`AotiForwards` is the compiled path's compiler for such
forwards (specviz.backend.StaticLM calls it): a call whose width and cache length have a
forward runs it; any other runs the model eagerly on the same cache, and one line on stderr
says why. The prompt's prefill is always eager, as on the compiled path.

Needs only torch and transformers.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import StaticCache


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def state_of(cache: StaticCache) -> list[torch.Tensor]:
    """A static cache as the tensors an AotiStep takes: per layer its keys, values and
    position (cumulative_length), in layer order. The cache must be initialised (after a
    prefill)."""
    out: list[torch.Tensor] = []
    for layer in cache.layers:
        out += [layer.keys, layer.values, layer.cumulative_length]
    return out


def bind(config: Any, length: int, state: Sequence[torch.Tensor]) -> StaticCache:
    """A StaticCache whose layers are the given tensors (state_of's order); its updates
    write into them."""
    cache = StaticCache(config=config, max_cache_len=length)
    if len(state) != 3 * len(cache.layers):
        raise ValueError(f"{len(state)} cache tensors for {len(cache.layers)} layers")
    for i, layer in enumerate(cache.layers):
        keys, values, pos = state[3 * i : 3 * i + 3]
        layer.keys, layer.values, layer.cumulative_length = keys, values, pos
        layer.dtype, layer.device = keys.dtype, keys.device
        layer.batch_size, layer.num_heads = keys.shape[0], keys.shape[1]
        layer.k_head_dim, layer.v_head_dim = keys.shape[-1], values.shape[-1]
        layer.is_initialized = True
    return cache


class AotiStep(torch.nn.Module):
    """A model's call over `width` new tokens on a static cache of `length` positions, the
    cache given as tensors (see state_of), returning the logits [width, V]; with features,
    the pair (logits [width, V], last hidden state [width, H]), the hidden state after the
    final norm (what the output layer reads: an EAGLE head's features), from the same call
    (``output_hidden_states``: the logits' computation is unchanged). This is what is
    exported and compiled; its parameters are the model's own."""

    def __init__(
        self, model: torch.nn.Module, width: int, length: int, features: bool = False
    ) -> None:
        super().__init__()
        self.model, self.width, self.length = model, width, length
        self.features = features

    def forward(self, ids: torch.Tensor, *state: torch.Tensor) -> Any:
        cache = bind(self.model.config, self.length, state)
        out = self.model(
            input_ids=ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=self.width,
            output_hidden_states=self.features,
        )
        if self.features:
            return out.logits[0], out.hidden_states[-1][0, -self.width :]
        return out.logits[0]

    def example_args(self, device: torch.device | None = None) -> tuple[torch.Tensor, ...]:
        """Arguments of the call's shapes: zero ids, and a cache initialised by an eager
        one-token prefill (its position then moved back to 0)."""
        device = device or next(self.model.parameters()).device
        cache = StaticCache(config=self.model.config, max_cache_len=self.length)
        with torch.inference_mode():
            self.model(
                input_ids=torch.zeros(1, 1, dtype=torch.long, device=device),
                past_key_values=cache,
                use_cache=True,
            )
        state = [t.clone() for t in state_of(cache)]  # plain tensors, not inference ones
        for t in state[2::3]:
            t.zero_()
        return (torch.zeros(1, self.width, dtype=torch.long, device=device), *state)


def export_step(step: AotiStep, args: Sequence[Any], kwargs: dict | None = None) -> Any:
    """torch.export's program of an AotiStep at the given arguments' shapes."""
    with torch.no_grad():
        return torch.export.export(step, args=tuple(args), kwargs=kwargs or {}, strict=False)


class Shell(torch.nn.Module):
    """A module with no weights of its own whose forward is replaced by a compiled one
    (``spaces.aoti_apply`` drains the parameters of the module it patches: patching the
    shell leaves the model, which the eager prefill runs, untouched)."""

    def forward(self, *args: torch.Tensor) -> torch.Tensor:  # replaced
        raise RuntimeError("no compiled forward was applied to this shell")


class AotiForwards:
    """The compiled path's compiler (the interface StaticLM calls) for forwards compiled
    ahead of time: per model, one callable per (width, cache length), each taking
    (ids, *state_of(cache)) and returning logits [width, V], or, where it was added with
    features (a package: specviz.backend.packages), (logits, last hidden state [width, H]).
    Nothing compiles at run time; a call of any other shape runs the model eagerly on the
    same cache and says so once. :meth:`call` gives the hidden state beside the logits
    where asked and given (the eager calls give it too); calling the object gives logits."""

    def __init__(self, report: Callable[[str], None] = say) -> None:
        self.report = report
        self.lock = threading.Lock()
        self._forwards: weakref.WeakKeyDictionary[
            torch.nn.Module, dict[tuple[int, int], Callable[..., torch.Tensor]]
        ] = weakref.WeakKeyDictionary()
        # the (width, length) of each model's forwards that return its last hidden state too
        self._features: weakref.WeakKeyDictionary[torch.nn.Module, set[tuple[int, int]]] = (
            weakref.WeakKeyDictionary()
        )
        self._told: set[tuple[str, int, int]] = set()
        self.calls = 0  # calls that ran a compiled forward
        self.eager_calls = 0

    def add(
        self,
        model: torch.nn.Module,
        width: int,
        length: int,
        fn: Callable[..., Any],
        features: bool = False,
    ) -> None:
        """fn: the forward of this shape; features: it returns (logits, hidden state)."""
        with self.lock:
            self._forwards.setdefault(model, {})[width, length] = fn
            mine = self._features.setdefault(model, set())
            (mine.add if features else mine.discard)((width, length))

    def features(self, model: torch.nn.Module) -> bool:
        """Whether every forward this model has here returns its last hidden state (then
        every call gives it: a shape without a forward runs eager, which gives it too)."""
        shapes = set(self._forwards.get(model, {}))
        return bool(shapes) and shapes <= self._features.get(model, set())

    def has(self, model: torch.nn.Module) -> bool:
        return bool(self._forwards.get(model))

    def serving(self) -> bool:
        """Whether any model has a forward here."""
        return any(self._forwards.values())

    def shapes(self, model: torch.nn.Module) -> list[tuple[int, int]]:
        return sorted(self._forwards.get(model, {}))

    def clear(self) -> None:
        with self.lock:
            self._forwards.clear()
            self._features.clear()
            self._told.clear()

    @property
    def compiles(self) -> int:  # the compiled path's counter: nothing compiles here
        return 0

    def ready(self, model: torch.nn.Module, width: int, length: int) -> bool:
        return True  # nothing to compile at run time (StaticLM then makes no trial call)

    def __call__(
        self, name: str, model: torch.nn.Module, ids: torch.Tensor, cache: StaticCache
    ) -> torch.Tensor:
        return self.call(name, model, ids, cache)[0]

    def call(
        self,
        name: str,
        model: torch.nn.Module,
        ids: torch.Tensor,
        cache: StaticCache,
        hidden: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits [width, V], the last hidden state [width, H] where hidden is asked and
        the forward gives it, else None) for ids [1, width] on cache."""
        width, length = int(ids.shape[1]), int(cache.layers[0].max_cache_len)
        fn = self._forwards.get(model, {}).get((width, length))
        if fn is not None:
            self.calls += 1
            out = fn(ids, *state_of(cache))
            if isinstance(out, (list, tuple)):
                return out[0], (out[1] if hidden and len(out) > 1 else None)
            return out, None
        if (name, width, length) not in self._told:
            self._told.add((name, width, length))
            self.report(
                f"{name}: no ahead-of-time forward for {width} positions on a cache of "
                f"{length}: those calls run eager"
            )
        self.eager_calls += 1
        out = model(
            input_ids=ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=width,
            output_hidden_states=hidden,
        )
        return out.logits[0], (out.hidden_states[-1][0] if hidden else None)


# The process's forwards compiled ahead of time (filled at start-up on ZeroGPU).
FORWARDS = AotiForwards()
