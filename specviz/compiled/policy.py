"""The compiled path's policy: which backend a run takes, which models it can run, and the
static cache's length."""

from __future__ import annotations

import torch

from specviz.config import COMPILE_BACKENDS, on_zero_gpu

BACKENDS = COMPILE_BACKENDS
MIN_CACHE_LEN = 256


def auto_backend(device: torch.device) -> str | None:
    """The path a run takes unless told otherwise: compiled with inductor on CUDA, where the
    GPU check measured it faster per speculative token than the eager path (docs/gpu-check.md),
    except on ZeroGPU; eager on the CPU, where it is faster too but each shape compiles for
    minutes (docs/compiled.md)."""
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
