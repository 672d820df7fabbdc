"""A model's cache shared by every sample of the distribution check.

The check draws hundreds of short continuations of one prompt. Each sample is a real engine
run (specviz.engine.Run), but none of them needs to read the prompt again: a
:class:`PromptCache` holds one cache per model (CachedLM, or StaticLM on the compiled path)
that has read the prompt once, and after each run it crops that cache back to the prompt
instead of prefilling a fresh one.

It also keeps the rows it has computed (unless told to keep the prompt-end rows only). A
causal model's logits at position j are a function of the tokens up to j alone, so a row is
stored under the tokens that follow the prompt up to its position, and a later call that
asks for the same position after the same tokens gets the stored row instead of a forward.
The prompt-end row (the target's p and the draft's q for the first token) is thus computed
once for every sample, and a draft or a continuation that an earlier sample already took
costs nothing. The rows are the model's own, from its own forwards through the same cache,
so the engine's decisions over them are the decisions it takes on any run; what a sample
no longer repeats is the forward itself.

Only ``logits``, ``rollback`` and ``close`` go through the store; anything else is handed to
the model's cache, which may then hold fewer tokens than the calls so far have named (a
stored row feeds nothing): like ``logits``, such a call must feed what its cache lacks.
"""

from __future__ import annotations

from typing import Any

import torch

from specviz.lm import ModelCache, common_prefix

# Rows kept per model: room for a few hundred short samples that rarely repeat, at most
# about 100 MB for a 49k vocabulary in float32. Beyond it, rows are computed again.
MAX_ROWS = 512


class PromptCache:
    """One model's cache holding one prompt, for many runs (the ModelCache protocol).

    ``calls`` counts the model's forwards and ``fed`` the positions they read, the prompt's
    own prefill included; ``served`` counts rows handed out from the store. With
    ``reuse_rows`` False only the prompt-end row is stored: every other row comes from a
    forward of the run that asks for it."""

    def __init__(
        self,
        inner: ModelCache,
        prompt_ids: list[int],
        reuse_rows: bool = True,
        max_rows: int = MAX_ROWS,
    ) -> None:
        if not prompt_ids:
            raise ValueError("a prompt cache needs a non-empty prompt")
        self.inner = inner
        self.prompt = list(prompt_ids)
        self.max_rows = max_rows if reuse_rows else 1
        self.fed = 0
        self.served = 0
        self._rows: dict[tuple[int, ...], torch.Tensor] = {}
        self.logits(self.prompt)  # the prefill, and the prompt-end row

    @property
    def vocab_size(self) -> int:
        return self.inner.vocab_size

    @property
    def tokens(self) -> list[int]:
        return self.inner.tokens

    @property
    def calls(self) -> int:
        return self.inner.calls

    @property
    def busy_s(self) -> float:
        return self.inner.busy_s

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def prompt_row(self) -> torch.Tensor:
        """Logits after the whole prompt: [V]."""
        return self._rows[()][0]

    def logits(self, seq: list[int], keep: int = 1) -> torch.Tensor:
        """Logits [keep, V] for the last `keep` positions of seq: stored rows where there are
        some, and one forward (feeding only what the cache lacks) for the rest."""
        p = len(self.prompt)
        first = len(seq) - keep  # position of the first row asked for
        if first < p - 1 or seq[:p] != self.prompt:
            return self._forward(seq, keep)  # not after this prompt: nothing stored applies
        keys = [tuple(seq[p : j + 1]) for j in range(first, len(seq))]
        missing = next((i for i, k in enumerate(keys) if k not in self._rows), None)
        if missing is not None:
            fresh = self._forward(seq, keep - missing)  # [keep - missing, V]
            for k, row in zip(keys[missing:], fresh, strict=True):
                if len(self._rows) < self.max_rows:  # a copy: the caller owns `fresh`
                    self._rows[k] = row.unsqueeze(0).clone()
            if missing == 0:
                return fresh
            rows = [self._rows[k] for k in keys[:missing]]
            self.served += missing
            return torch.cat([*rows, fresh])
        self.served += keep
        return torch.cat([self._rows[k] for k in keys])

    def _forward(self, seq: list[int], keep: int) -> torch.Tensor:
        start = min(common_prefix(self.inner.tokens, seq), len(seq) - keep)
        self.fed += len(seq) - start
        return self.inner.logits(seq, keep)

    def rollback(self, seq: list[int]) -> None:
        """Keep only the longest prefix the model's cache shares with seq."""
        self.inner.rollback(seq)

    def close(self) -> None:
        """A run is over: back to the prompt (the cache itself stays open for the next)."""
        self.inner.rollback(self.prompt)

    def release(self) -> None:
        """The check is over: release the model's cache and the stored rows."""
        self._rows.clear()
        self.inner.close()
