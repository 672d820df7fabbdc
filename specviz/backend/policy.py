"""The compiled path's policy: which backend a run takes, which models it can run, and the
static cache's length.

The static cache rolls back by moving each layer's position (specviz.backend.static_lm),
which is exact for transformers' plain ``StaticLayer`` only: it keeps every position up to
the cache's length. A sliding-window (or chunked) layer, ``StaticSlidingWindowLayer``, keeps
only the last min(window, max_cache_len) positions and rolls them over, so after a rollback
past an evicted position the cache no longer holds what the eager path would; its length
and masks also follow a Python counter (``cumulative_length_int``) that moving the position
does not reset. Such models are refused with :class:`SlidingWindowRefused`, after which a
run takes the eager path (which is exact for them) whatever backend was named. The layers
are read as ``StaticCache`` itself builds them (``get_layer_types_and_kwargs``: the config's
``layer_types``, or each layer's ``sliding_window`` / ``attention_chunk_size``), which
covers Gemma 2 and 3, Mistral's ``sliding_window`` and Qwen2's ``use_sliding_window``.
"""

from __future__ import annotations

import torch

from specviz.config import COMPILE_BACKENDS, on_zero_gpu
from specviz.lm import cache_layers

BACKENDS = COMPILE_BACKENDS
MIN_CACHE_LEN = 256


def auto_backend(device: torch.device) -> str | None:
    """The path a run takes unless told otherwise: compiled with inductor on CUDA, where the
    GPU check measured it faster per speculative token than the eager path (docs/gpu-check.md),
    except on ZeroGPU; on the CPU, the forwards compiled ahead of time ("aoti") where the
    set-up step built packages for this torch and this CPU (specviz.backend.packages; a
    model or shape without one runs eager), else eager: torch.compile's CPU shapes take
    minutes each in every process (docs/compiled.md)."""
    if on_zero_gpu():
        return None
    if device.type == "cuda":
        return "inductor"
    from specviz.backend.packages import available

    return "aoti" if device.type == "cpu" and available() else None


class SlidingWindowRefused(ValueError):
    """The model has sliding-window attention layers: the compiled path's rollback cannot be
    exact for it, and the run takes the eager path instead (one line on stderr says so)."""


def sliding_window(model: torch.nn.Module) -> int | None:
    """The smallest window of the model's sliding-window or chunked attention layers (the
    static cache keeps that many positions in them), or None when it has none."""
    from transformers.cache_utils import STATIC_LAYER_TYPE_MAPPING, StaticSlidingWindowLayer

    windows = [
        int(kw.get("sliding_window") or 0)
        for kind, kw in cache_layers(model) or []
        if issubclass(STATIC_LAYER_TYPE_MAPPING.get(kind, object), StaticSlidingWindowLayer)
        or kw.get("sliding_window") is not None
    ]
    return min(windows) if windows else None


def _unrollable(model: torch.nn.Module) -> list[str]:
    """The cache layer types of the model that moving a position cannot roll back: all but
    transformers' plain StaticLayer (sliding windows are told apart by sliding_window)."""
    from transformers.cache_utils import STATIC_LAYER_TYPE_MAPPING, StaticLayer

    kinds = {kind for kind, _ in cache_layers(model) or []}
    return sorted(k for k in kinds if STATIC_LAYER_TYPE_MAPPING.get(k) is not StaticLayer)


def check_compilable(model: torch.nn.Module, backend: str) -> None:
    """Raise ValueError unless the compiled path can run this model with this backend;
    SlidingWindowRefused (a ValueError) for a model with sliding-window layers."""
    if backend not in BACKENDS:
        raise ValueError(f"compile backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if on_zero_gpu():
        raise ValueError("the compiled path is not available on ZeroGPU (no torch.compile there)")
    name = type(model).__name__
    if not getattr(model, "_can_compile_fullgraph", False):
        why = getattr(model, "specviz_not_compilable", "") or "no static-cache support"
        raise ValueError(f"{name} cannot run on the compiled path ({why})")
    spread = set((getattr(model, "hf_device_map", None) or {}).values())
    if len(spread) > 1:
        raise ValueError("the compiled path needs the target on one device (SPECVIZ_DEVICE_MAP)")
    window = sliding_window(model)
    if window is not None:
        raise SlidingWindowRefused(
            f"{name} has sliding-window attention (window {window}): the compiled path's "
            "static cache keeps only the window's last positions and cannot roll back "
            "exactly, so it runs eager"
        )
    other = _unrollable(model)
    if other:
        raise ValueError(
            f"{name} cannot run on the compiled path: its cache layers ({', '.join(other)}) "
            "cannot roll back by moving a position"
        )


def check_tree_path(backend: str | None) -> None:
    """Raise ValueError when a tree would run on the compiled path: its static cache has no
    tree attention mask or path gather, so trees run on the eager path only."""
    if backend is not None:
        raise ValueError("--tree runs on the eager path only: add --compile off")


def cache_len(needed: int) -> int:
    """The static cache's length: a power of two of at least MIN_CACHE_LEN positions."""
    n = MIN_CACHE_LEN
    while n < needed:
        n *= 2
    return n
