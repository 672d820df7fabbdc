"""The app's error handling, in one place: what the page shows of an error is one line.

:func:`failure` builds that line from any exception; :func:`model_failures` is the one
context manager around model work (a ValueError passes through as it is, anything else
becomes the line, after releasing cached GPU memory on out-of-memory); :func:`user_errors`
turns the ValueError a handler raises into the visible gr.Error.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import gradio as gr
import torch

from specviz.views import markup


def failure(exc: BaseException, doing: str) -> ValueError:
    """A one-line ValueError for an error while loading or running a model (builds it and
    nothing else: the caller that handles it frees memory, see :func:`model_failures`)."""
    if isinstance(exc, ValueError):
        return exc
    if is_out_of_memory(exc):
        where = "GPU memory" if not isinstance(exc, MemoryError) else "memory"
        return ValueError(
            f"out of {where} while {doing}: choose a smaller pair (such as 'default'), "
            "fewer max new tokens or a shorter prompt"
        )
    text = str(exc).strip().splitlines()
    return ValueError(f"{doing} failed: {text[0] if text else type(exc).__name__}")


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.cuda.OutOfMemoryError, MemoryError, or an older RuntimeError saying so."""
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def free_gpu_memory() -> None:
    """Release cached CUDA blocks after an out-of-memory error (no-op without CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@contextmanager
def model_failures(doing: str, cleanup: Callable[[], None] | None = None) -> Iterator[None]:
    """Around model work: any exception calls ``cleanup`` (if given); a ValueError is raised
    again as it is, any other exception as :func:`failure`'s one line, after freeing the
    GPU's cached memory when it was an out-of-memory error."""
    try:
        yield
    except Exception as exc:
        if cleanup is not None:
            cleanup()
        if isinstance(exc, ValueError):
            raise
        if is_out_of_memory(exc):
            free_gpu_memory()
        raise failure(exc, doing) from None


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn ValueError into gr.Error (escaped, one line) for plain and generator handlers."""

    def error(exc: ValueError) -> gr.Error:
        return gr.Error(markup.esc(str(exc).splitlines()[0] if str(exc) else "invalid input"))

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen_wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            except ValueError as exc:
                raise error(exc) from None

        return gen_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ValueError as exc:
            raise error(exc) from None

    return wrapper
