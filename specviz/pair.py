"""A loaded model and a model pair: what a run needs from its models (the models, the
tokenizer, the EOS ids, the device, the compiled path), whatever loaded them. The registry
and the loading are specviz.models.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class LoadedModel:
    """A model ready to run, with what the page shows about it."""

    name: str
    model: torch.nn.Module
    device: torch.device
    dtype: str  # e.g. "float32", "int8 weights / bfloat16", "float16 copy"
    vocab_size: int  # token ids it can embed and score (see token_width)
    load_s: float
    source: str  # "cache", "converted from GGUF", "hub", "derived"
    # The offline draft's record (specviz.backend.draft_choice.DraftChoice): which variant, its c
    # and alpha, measured on this machine. None for every other model.
    choice: Any = None

    @property
    def variant(self) -> str | None:
        return self.choice.variant if self.choice is not None else None

    def describe(self) -> str:
        spread = (getattr(self.model, "hf_device_map", None) or {}).values()
        placed = sorted({f"cuda:{d}" if isinstance(d, int) else str(d) for d in spread})
        where = "+".join(placed) if len(placed) > 1 else self.device.type
        detail = f"; {self.choice.summary()}" if self.choice is not None else ""
        return f"{self.name} on {where} ({self.dtype}{detail})"


def token_width(model: torch.nn.Module) -> int:
    """How many token ids a model can both embed and score: the smaller of its input
    embedding's rows and its output layer's columns (the config is not trusted)."""
    widths = [int(model.config.vocab_size)] if hasattr(model, "config") else []
    inp = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if inp is not None:
        widths = [int(inp.weight.shape[0])]
    if out is not None:
        widths.append(int(getattr(out, "out_features", 0) or out.weight.shape[0]))
    if not widths:
        raise ValueError(f"cannot tell how many token ids {type(model).__name__} embeds")
    return min(widths)


# The models already said to run eager beside the compiled path (said once per process)
_told_eager: set[str] = set()

# What a run's description of a model gains when the model ran eager although the pair is
# on the compiled path (Run.open_lm), followed by why.
RAN_EAGER = "; ran eager: "


def encode_prompt(tok: Any, prompt: str, raw: bool = False) -> list[int]:
    """Token ids of a user prompt for a tokenizer, inside its chat template unless raw (or
    it has none)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("prompt is empty")
    if not raw and getattr(tok, "chat_template", None):
        text = tok.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        return list(tok(text, add_special_tokens=False)["input_ids"])
    return list(tok(prompt)["input_ids"])


@dataclass
class ModelPair:
    """A target, its draft and their shared tokenizer.

    Both models must embed and score every id of the tokenizer: a model narrower than the
    tokenizer would be handed ids it cannot embed (an IndexError on the CPU, a device-side
    assert on CUDA). Wider models (padded embeddings) are fine: their extra columns are
    dropped (see specviz.lm).
    """

    name: str
    target: LoadedModel
    draft: LoadedModel | None
    tokenizer: Any
    eos_ids: frozenset[int]
    context_len: int
    _texts: dict[int, str] = field(default_factory=dict, repr=False)
    # None: eager forwards on a DynamicCache; else the torch.compile backend of the
    # compiled path (specviz.backend). Set through with_compile.
    compile_backend: str | None = None
    aoti_build: bool = False  # the aoti backend named: a run builds the packages it lacks
    compile_auto: bool = False  # the backend was chosen by "auto", not named
    # Under "auto", a model the compiled path cannot run, by name, with why: it runs eager
    # beside the other, compiled, model.
    eager_models: dict[str, str] = field(default_factory=dict)
    # An EAGLE head given with the pair (a published one: --eagle-head); None: the eagle
    # drafter looks for one train-head saved for the target (specviz.drafters.head.head_for).
    head: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.tokenizer)
        for role, m in (("target", self.target), ("draft", self.draft)):
            if m is not None and m.vocab_size < n:
                raise ValueError(
                    f"refused pair: the tokenizer has {n} tokens but the {role} {m.name!r} "
                    f"embeds and scores only {m.vocab_size} token ids "
                    f"(ids {m.vocab_size}..{n - 1} would crash it)"
                )

    @property
    def device(self) -> torch.device:
        return self.target.device

    @property
    def vocab_size(self) -> int:
        """The tokenizer's vocabulary: what p and q range over (padded columns dropped)."""
        return len(self.tokenizer)

    def token_text(self, token_id: int) -> str:
        """The text of one token (cached; shared read-only apart from this memo)."""
        text = self._texts.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id], skip_special_tokens=False)
            self._texts[token_id] = text
        return text

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def encode_prompt(self, prompt: str, raw: bool = False) -> list[int]:
        """Token ids of a user prompt, inside the chat template unless raw (or none exists)."""
        return encode_prompt(self.tokenizer, prompt, raw)

    def describe(self) -> dict[str, str]:
        """Each model as a trace names it: where it runs and in what dtype, and the pair's
        compiled path, or for a model that runs eager beside it, that it does and why; for a
        draft that is the target's copy, that it takes the target's keys and values of the
        prompt (specviz.rounds)."""
        how = f", compiled with {self.compile_backend}" if self.compile_backend else ""
        if self.compile_backend == "aoti":
            how = ", compiled ahead of time (AOTInductor)"

        def named(m: LoadedModel) -> str:
            why = self.eager_models.get(m.name) if self.compile_backend else None
            return m.describe() + (RAN_EAGER + why if why else how)

        d = {"pair": self.name, "target": named(self.target)}
        if self.draft is not None:
            takes = "; takes the target's keys and values of the prompt"
            d["draft"] = named(self.draft) + (takes if self.draft_is_target_copy else "")
        return d

    @property
    def draft_is_target_copy(self) -> bool:
        """Whether the draft is the target's own weights at a lower precision (the offline
        draft, specviz.backend.draft_choice): the same layers, heads and positions, so the target's
        keys and values of a prompt stand for the draft's own, and a run's draft takes the
        target's instead of reading the prompt (specviz.rounds)."""
        return self.draft is not None and self.draft.source == "derived"

    def without_eos(self) -> ModelPair:
        """The same models with no EOS ids: a run always generates max_new_tokens (the
        bench, the sweep and the cost measurement compare runs of one length)."""
        return dataclasses.replace(self, eos_ids=frozenset())

    def open_cache(
        self, m: LoadedModel, widths: tuple[int, ...], max_len: int, eager: bool = False
    ) -> Any:
        """A cache for one of the pair's models (a specviz.lm.ModelCache): on the eager path
        (specviz.lm.CachedLM) when the pair has no compiled path or eager is asked (trees),
        else on the compiled path (specviz.backend.StaticLM), its calls after the prefill
        padded to one of widths on a static cache of at least max_len positions. On the
        aoti path a model without its packages runs eager (ran_eager says why). The engine
        opens every cache here, so it names no backend."""
        from specviz.lm import CachedLM

        backend = self.compile_backend
        if backend is None or eager or m.name in self.eager_models:
            return CachedLM(m.model, self.vocab_size, self.device)
        from specviz.backend import StaticLM, cache_len, compiler_for

        if backend == "aoti":
            from specviz.backend.packages import packaged

            compiler: Any = packaged(m, widths, cache_len(max_len), self.aoti_build)
            if compiler is None:  # no package for this shape: the eager path, said once
                return CachedLM(m.model, self.vocab_size, self.device)
        else:
            compiler = compiler_for(backend)
        return StaticLM(m.model, m.name, self.vocab_size, compiler, widths, max_len, self.device)

    def compiled_widths(
        self, m: LoadedModel, widths: tuple[int, ...], max_len: int
    ) -> tuple[int, ...]:
        """Of widths, those a cache opened now (open_cache) could run on the compiled path
        without building anything: on the aoti path those with a package here (a cache asked
        for any other runs eager), else all of them (the eager path, or a path that compiles
        on demand)."""
        if self.compile_backend != "aoti" or self.aoti_build or m.name in self.eager_models:
            return tuple(widths)
        from specviz.backend import cache_len
        from specviz.backend.packages import has_package

        length = cache_len(max_len)
        return tuple(w for w in widths if has_package(m.model, w, length))

    def ran_eager(self, m: LoadedModel, cache: Any) -> str | None:
        """Why this model's cache (from open_cache) runs eager although the pair is on the
        compiled path; None when it runs compiled, or the pair is eager."""
        from specviz.lm import CachedLM

        if self.compile_backend is None or not isinstance(cache, CachedLM):
            return None
        if m.name in self.eager_models:
            return self.eager_models[m.name]
        if self.compile_backend == "aoti":
            from specviz.backend.packages import why_eager

            return why_eager(m.model) or "no compiled package for this model here"
        return "this model cannot run compiled"

    def check_tree(self) -> None:
        """Refuse (ValueError, one line) a tree on a compiled path that was named: trees run
        on the eager path only (a backend "auto" chose leaves them there quietly)."""
        from specviz.backend.policy import check_tree_path

        check_tree_path(None if self.compile_auto else self.compile_backend)

    def _packaged(self) -> bool:
        """Whether either model has a package compiled ahead of time on this machine."""
        from specviz.backend.packages import has_any

        return any(has_any(m.model) for m in (self.target, self.draft) if m is not None)

    def with_compile(self, backend: str | None = "inductor") -> ModelPair:
        """The same models on the compiled path with this torch.compile backend; None or
        "off": the eager path; "auto": specviz.backend.auto_backend for the pair's device,
        or the eager path where a model cannot run compiled. Raises ValueError for a named
        backend that a model cannot run, except for a model with sliding-window attention:
        that one runs eager whatever the backend, and one line on stderr says why."""
        from specviz.backend import SlidingWindowRefused, auto_backend, check_compilable

        auto = backend == "auto"
        if auto:
            backend = auto_backend(self.device)
            if backend == "aoti" and not self._packaged():
                backend = None  # packages exist here, but none for these models
        if backend == "off":
            backend = None
        eager: dict[str, str] = {}
        if backend is not None:
            models = [m for m in (self.target, self.draft) if m is not None]
            try:
                for m in models:
                    try:
                        check_compilable(m.model, backend)
                    except SlidingWindowRefused:
                        raise
                    except ValueError as exc:
                        if not auto:
                            raise
                        eager[m.name] = str(exc)  # this one runs eager beside the other
            except SlidingWindowRefused as exc:  # the eager path is exact for it: run that
                print(f"specviz: {exc}", file=sys.stderr)
                backend = None
            if len(eager) == len(models):
                backend, eager = None, {}
            for m in models:
                if m.name in eager and m.name not in _told_eager:
                    _told_eager.add(m.name)
                    label = f"{m.name} ({m.variant})" if m.variant else m.name
                    print(
                        f"specviz: {label} runs eager beside the compiled path: {eager[m.name]}",
                        file=sys.stderr,
                    )
        return dataclasses.replace(
            self,
            compile_backend=backend,
            aoti_build=backend == "aoti" and not auto,
            compile_auto=auto,
            eager_models=eager,
        )
