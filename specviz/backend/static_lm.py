"""One request's static KV cache on the compiled path (``StaticLM``), and the pool that keeps
caches between requests so that their buffers keep one address."""

from __future__ import annotations

import threading
import time
import weakref

import torch
from transformers import StaticCache
from transformers.cache_utils import StaticLayer

from specviz.backend.compiler import Compiler
from specviz.backend.policy import cache_len
from specviz.clock import clock
from specviz.lm import common_prefix, input_device, kv_dtype, load_layers

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
    the request writes (prompt, new tokens and the widest padding).

    gives_hidden (per cache): whether its calls can give the model's last hidden state, as
    CachedLM's do: where the compiler's forwards return it (``features(model)``: the aoti
    packages, specviz.backend.packages), not torch.compile's, whose forwards return logits
    only. With want_hidden set, every call then keeps it at every row it read (hidden_all
    [n, H], padding rows dropped, the first at position hidden_at; hidden: the last keep
    rows), the eager prefill's from the same forward (``output_hidden_states``)."""

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
        self.device = input_device(model)
        self.out_device = out_device or self.device
        self.length = cache_len(max_len)
        self.cache: StaticCache | None = acquire_cache(model, self.length)
        # Moving the position rolls back a plain StaticLayer only (policy.py says why).
        other = sorted({type(x).__name__ for x in self.cache.layers if type(x) is not StaticLayer})
        if other:
            raise ValueError(f"{name}: the compiled path cannot roll back {', '.join(other)}")
        self._move(0)  # a reused cache starts empty: what it held lies beyond the position
        self.tokens: list[int] = []  # the tokens whose keys and values the cache holds
        self.calls = 0
        self.busy_s = 0.0  # seconds inside the model's forward (specviz.costs reads it)
        features = getattr(compiler, "features", None)
        self.gives_hidden = bool(features is not None and features(model))
        self.want_hidden = False  # as CachedLM's: asked by a drafter that reads features
        self.hidden: torch.Tensor | None = None
        self.hidden_all: torch.Tensor | None = None
        self.hidden_at = 0

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

    def prefix_kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.tokens)
        return [(layer.keys[:, :, :n], layer.values[:, :, :n]) for layer in self.cache.layers]

    @torch.inference_mode()
    def take_prefix(self, tokens: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """As the eager cache's (specviz.lm.ModelCache), then every width is compiled, as
        after a prefill."""
        if self.tokens:
            raise ValueError("only an empty cache takes another model's keys and values")
        load_layers(self.cache.layers, kv, kv_dtype(self.model), len(tokens), self.device)
        self.tokens = list(tokens)
        self._precompile(len(tokens))

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
        hidden = self.want_hidden and self.gives_hidden
        t0 = time.perf_counter()
        if start == 0 or m > self.widths[-1]:  # the prefill: eager, any length
            ids = torch.tensor([new], dtype=torch.long, device=self.device)
            res = self.model(
                input_ids=ids,
                past_key_values=self.cache,
                use_cache=True,
                logits_to_keep=keep,
                output_hidden_states=hidden,
            )
            out = res.logits[0]  # [keep, V]
            h = res.hidden_states[-1][0] if hidden else None  # [m, H]
            self._precompile(start + m)
        else:
            w = self.width(m)
            ids = torch.tensor([new + [0] * (w - m)], dtype=torch.long, device=self.device)
            if hidden:
                full, h = self.compiler.call(self.name, self.model, ids, self.cache, hidden=True)
                h = None if h is None else h[:m]  # the padding's rows dropped
            else:
                full, h = self.compiler(self.name, self.model, ids, self.cache), None
            out = full[m - keep : m]  # [keep, V]
            # the padding's keys lie beyond the position: never read. A torch.compile'd
            # forward advances every layer's position in its graph (transformers' static
            # layers), so an unpadded call leaves it where it belongs
            if w > m or not isinstance(self.compiler, Compiler):
                self._move(start + m)
        logits = out[:, : self.vocab_size].to(self.out_device)
        if hidden:
            if h is None:
                raise RuntimeError(f"{self.name}: a compiled call gave no hidden state")
            self.hidden_all = h.to(self.out_device)  # [m, H]
            self.hidden, self.hidden_at = self.hidden_all[-keep:], start
        self.busy_s += clock(logits.device) - t0
        self.tokens.extend(new)
        self.calls += 1
        return logits
