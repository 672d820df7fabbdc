"""Compile-time estimates: the last time each shape took to compile, kept beside inductor's
cache so that the "about N s" a compile announces follows a restart."""

from __future__ import annotations

import json
import os

import torch

from specviz.lm import input_device


def times_path() -> str:
    from specviz.backend.offline import cache_root

    return str(cache_root() / "compile_times.json")


def estimate(backend: str, key: tuple[str, int, int], model: torch.nn.Module) -> float:
    """The last recorded compile time of this shape (inductor), else a guess by depth."""
    try:
        if backend != "inductor":
            raise KeyError(backend)
        with open(times_path()) as f:
            return float(json.load(f)[_key(backend, key)])
    except (OSError, ValueError, KeyError, TypeError):
        layers = int(getattr(getattr(model, "config", None), "num_hidden_layers", 1) or 1)
        if backend != "inductor":
            return 0.1 * layers + 2.0
        if input_device(model).type == "cpu":  # autotuning benchmarks each layer shape
            return 35.0 + 3.5 * layers
        return 1.2 * layers + 2.0


def record(backend: str, key: tuple[str, int, int], seconds: float) -> None:
    """Keep an inductor compile time for the next estimate (the other backends keep no
    cache, and their times say nothing about a restart)."""
    if backend != "inductor":
        return
    path = times_path()
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
