"""The contenders: named ways of generating, on the specviz side and the transformers side.

Fairness. Both sides get the same prompt tokens (the chat template applied once by
specviz), the same max_new_tokens and the same warp (temperature, top-p, top-k off).
Both ignore EOS, so every run produces exactly max_new_tokens tokens (a chat model's EOS
would otherwise end runs at different lengths). ms/token is the wall time of the whole
call, prefill included, over the new tokens, with a device sync before every clock read.

transformers (5.x) reads the assistant's schedule from ``assistant_model.generation_config``
(``num_assistant_tokens``, ``num_assistant_tokens_schedule``,
``assistant_confidence_threshold``); the same names passed to ``generate()`` do not reach
the candidate generator. The constant-gamma contender therefore sets them on the draft's
generation config, and restores it afterwards.

A contender's name says its side, kind and gamma (``contender_name``); the runner and the
ratios find contenders by it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from specviz.bench.options import SAMPLE_TEMPERATURE, SAMPLE_TOP_P, BenchOptions, reference_gamma
from specviz.clock import clock
from specviz.config import Settings
from specviz.drafters import gives_features
from specviz.engine import generate
from specviz.pair import ModelPair
from specviz.trace import Trace

ADAPTIVE_START = 4
NGRAM_SIZE = 3  # specviz's ngram_size and transformers' max_matching_ngram_size
# transformers' default assistant schedule (the GenerationConfig defaults of 5.23): up to
# 20 drafts a round, the round ending after a draft whose probability under the draft is
# below 0.4. specviz's "confident" contender drafts the same way (gamma 20,
# --draft-confidence 0.4). With scikit-learn installed, transformers tunes that bar from
# its past rounds instead, and the two no longer mirror each other.
HF_DEFAULT_TOKENS, HF_DEFAULT_CONFIDENCE = 20, 0.4

NAMES = {  # (side, kind): name, with the contender's gamma for {g}
    ("specviz", "ar"): "specviz AR",
    ("transformers", "ar"): "transformers AR",
    ("specviz", "spec"): "specviz spec g={g}",
    ("transformers", "assisted"): "transformers assisted g={g}",
    ("specviz", "minimal"): "specviz spec g={g} minimal trace",
    ("specviz", "adaptive"): "specviz adaptive from g={g}",
    ("specviz", "ngram"): "specviz ngram g={g}",
    ("specviz", "eagle"): "specviz eagle head g={g}",
    ("specviz", "confident"): "specviz confident g={g}",
    ("transformers", "default"): "transformers assisted default",
    ("transformers", "lookup"): "transformers prompt lookup g={g}",
}
# The compiled path's contenders: the eager ones' names with " compiled".
NAMES.update(
    {
        ("specviz", f"{k}-compiled"): f"{NAMES['specviz', k]} compiled"
        for k in ("ar", "spec", "minimal", "eagle")
    }
)


def contender_name(side: str, kind: str, gamma: int | None = None) -> str:
    """The name a contender runs under, in the rows and the report."""
    return NAMES[(side, kind)].format(g=gamma)


@dataclass
class Sample:
    """One timed run of one contender."""

    tokens: list[int]
    wall_s: float
    target_calls: int  # target forwards, the prompt's prefill included
    trace: Trace | None = None  # specviz runs only

    @property
    def ms_per_token(self) -> float:
        return self.wall_s * 1e3 / max(1, len(self.tokens))


@dataclass(frozen=True)
class Contender:
    """A named way of generating: which side, which gamma, and how to run it."""

    name: str
    side: str  # "specviz" | "transformers"
    kind: str  # "ar" | "spec" | "ngram" | "assisted" | "default" | "lookup" | "minimal" | ...
    gamma: int | None
    run: Callable[[list[int], str, int, int], Sample]  # (ids, prompt, seed, tokens)


# --- the line-up ---------------------------------------------------------------------------


def all_contenders(pair: ModelPair, mode: str, opts: BenchOptions) -> list[Contender]:
    """Every contender of one mode, in their base order (the order repetitions rotate)."""
    sv, g_ref = pair.without_eos(), reference_gamma(opts.gammas)
    out = [_specviz(sv, mode, "ar", None, method="ar")]
    if opts.hf:
        out.append(_transformers(pair, mode, "ar", None))
    for g in opts.gammas:
        out += _constant_gamma(pair, sv, mode, g, opts.hf, minimal=g == g_ref)
    out += _specviz_variants(sv, mode, g_ref)
    if opts.hf:
        out += _transformers_variants(pair, mode, g_ref)
    if opts.compile:
        out += _compiled_variants(sv.with_compile(opts.compile), mode, opts.gammas, g_ref)
    return out


def _constant_gamma(
    pair: ModelPair, sv: ModelPair, mode: str, g: int, hf: bool, minimal: bool
) -> list[Contender]:
    """specviz speculative at gamma g (and right after it, where minimal, the same with the
    minimal trace: the two runs of the trace overhead stay neighbours in every repetition),
    and transformers assisted at the same constant gamma."""
    out = [_specviz(sv, mode, "spec", g, gamma=g)]
    if minimal:
        out.append(_specviz(sv, mode, "minimal", g, gamma=g, trace_level="minimal"))
    if hf and pair.draft is not None:
        out.append(_transformers(pair, mode, "assisted", g, assistant=constant_schedule(g)))
    return out


def _specviz_variants(sv: ModelPair, mode: str, g_ref: int) -> list[Contender]:
    """Adaptive gamma, the n-gram drafter, and transformers' default schedule drafted by
    specviz (HF_DEFAULT_TOKENS, HF_DEFAULT_CONFIDENCE)."""
    a, g = ADAPTIVE_START, HF_DEFAULT_TOKENS
    out = [
        _specviz(sv, mode, "adaptive", a, gamma=a, adaptive_gamma=True),
        _specviz(sv, mode, "ngram", g_ref, drafter="ngram", gamma=g_ref, ngram_size=NGRAM_SIZE),
        _specviz(sv, mode, "confident", g, gamma=g, draft_confidence=HF_DEFAULT_CONFIDENCE),
    ]
    if has_head(sv):  # an EAGLE head trained for this target (python -m specviz train-head)
        out.append(_specviz(sv, mode, "eagle", g_ref, drafter="eagle", gamma=g_ref))
    return out


def has_head(pair: ModelPair) -> bool:
    """Whether the EAGLE drafter can run on this pair: a head attached or cached here."""
    from specviz.drafters.head import head_for

    try:
        head_for(pair)
    except ValueError:
        return False
    return True


def _compiled_variants(
    cp: ModelPair, mode: str, gammas: tuple[int, ...], g_ref: int
) -> list[Contender]:
    """The compiled path (specviz.backend): AR, speculative at each gamma, and the minimal
    trace right after its full-trace neighbour."""
    out = [_specviz(cp, mode, "ar-compiled", None, method="ar")]
    for g in gammas:
        out.append(_specviz(cp, mode, "spec-compiled", g, gamma=g))
        if g == g_ref:
            out.append(_specviz(cp, mode, "minimal-compiled", g, gamma=g, trace_level="minimal"))
    if gives_features(cp.compile_backend) and has_head(cp):  # a package gives them
        out.append(_specviz(cp, mode, "eagle-compiled", g_ref, drafter="eagle", gamma=g_ref))
    return out


def _transformers_variants(pair: ModelPair, mode: str, g_ref: int) -> list[Contender]:
    """transformers' default assistant schedule (with a draft) and its prompt lookup."""
    out = []
    if pair.draft is not None:
        out.append(_transformers(pair, mode, "default", None, assistant={}))
    lookup = {"prompt_lookup_num_tokens": g_ref, "max_matching_ngram_size": NGRAM_SIZE}
    out.append(_transformers(pair, mode, "lookup", g_ref, **lookup))
    return out


def constant_schedule(g: int) -> dict[str, Any]:
    """Draft generation-config fields that make transformers draft exactly g tokens a round."""
    return {
        "num_assistant_tokens": g,
        "num_assistant_tokens_schedule": "constant",
        "assistant_confidence_threshold": 0.0,
    }


def _specviz(pair: ModelPair, mode: str, kind: str, g: int | None, **changes: Any) -> Contender:
    run = specviz_run(pair, mode, **changes)
    return Contender(contender_name("specviz", kind, g), "specviz", kind, g, run)


def _transformers(
    pair: ModelPair, mode: str, kind: str, g: int | None, **hf_changes: Any
) -> Contender:
    run = hf_run(pair, mode, **hf_changes)
    return Contender(contender_name("transformers", kind, g), "transformers", kind, g, run)


# --- the specviz side ----------------------------------------------------------------------


def mode_settings(mode: str, tokens: int, seed: int) -> Settings:
    """The sampling settings both sides use in one mode; specviz drafts with the draft
    model, as transformers' assisted generation does (the other drafters are contenders of
    their own)."""
    if mode == "greedy":
        return Settings(greedy=True, max_new_tokens=tokens, seed=seed, drafter="model")
    return Settings(
        temperature=SAMPLE_TEMPERATURE,
        top_p=SAMPLE_TOP_P,
        max_new_tokens=tokens,
        seed=seed,
        drafter="model",
    )


def specviz_run(pair: ModelPair, mode: str, **changes: Any) -> Callable[..., Sample]:
    """A specviz contender: generate() with the mode's settings plus changes."""

    def run(ids: list[int], prompt: str, seed: int, tokens: int) -> Sample:
        s = mode_settings(mode, tokens, seed).with_(**changes)
        counter = CallCounter(pair.target.model)  # counted as for transformers
        try:
            t0 = clock(pair.device)
            trace = generate(pair, prompt, s)
            wall = clock(pair.device) - t0
        finally:
            counter.close()
        return Sample(list(trace.token_ids), wall, counter.calls, trace)

    return run


class CallCounter:
    """Counts a model's forward calls (a hook; negligible next to a forward)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls = 0
        self._handle = model.register_forward_pre_hook(self._hook)

    def _hook(self, *_: Any) -> None:
        self.calls += 1

    def close(self) -> None:
        self._handle.remove()


# --- the transformers side -----------------------------------------------------------------


@contextlib.contextmanager
def assistant_config(model: torch.nn.Module, **values: Any) -> Iterator[None]:
    """Set fields of model.generation_config for the duration, then restore them."""
    gc = model.generation_config
    saved = {k: getattr(gc, k, None) for k in values}
    try:
        for k, value in values.items():
            setattr(gc, k, value)
        yield
    finally:
        for k, value in saved.items():
            setattr(gc, k, value)


def hf_kwargs(mode: str, tokens: int, pad_id: int) -> dict[str, Any]:
    """generate() arguments matching mode_settings: same warp, EOS ignored, fixed length.

    pad_id must be no token of the vocabulary. transformers (5.23) drops an all-ones
    attention mask, and its assistant's generate() then infers one from the pad id,
    masking every earlier token equal to it: with the EOS as pad, a chat prompt's
    end-of-turn tokens would vanish from the draft's context, and the draft would not
    compute what specviz's does."""
    kw: dict[str, Any] = {
        "max_new_tokens": tokens,
        "min_new_tokens": 0,
        "eos_token_id": None,
        "pad_token_id": pad_id,
    }
    if mode == "greedy":
        kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kw.update(do_sample=True, temperature=SAMPLE_TEMPERATURE, top_p=SAMPLE_TOP_P, top_k=0)
    return kw


def hf_run(
    pair: ModelPair, mode: str, assistant: dict[str, Any] | None = None, **extra: Any
) -> Callable[..., Sample]:
    """A transformers contender; assistant (if given) are draft generation-config fields."""
    target = pair.target.model
    pad = target.config.vocab_size  # no token: nothing is padded, or masked (hf_kwargs)

    @torch.inference_mode()
    def run(ids: list[int], prompt: str, seed: int, tokens: int) -> Sample:
        x = torch.tensor([ids], device=pair.device)  # [1, prompt]
        kw = hf_kwargs(mode, tokens, pad) | extra
        kw["attention_mask"] = torch.ones_like(x)
        ctx: Any = contextlib.nullcontext()
        if assistant is not None:
            assert pair.draft is not None
            kw["assistant_model"] = pair.draft.model
            ctx = assistant_config(pair.draft.model, eos_token_id=None, **assistant)
        torch.manual_seed(seed)
        counter = CallCounter(target)
        try:
            with ctx:
                t0 = clock(pair.device)
                out = target.generate(x, **kw)  # [1, prompt + tokens]
                wall = clock(pair.device) - t0
        finally:
            counter.close()
        new = out[0, len(ids) :].tolist()
        if len(new) != tokens:
            raise RuntimeError(f"transformers generated {len(new)} tokens, expected {tokens}")
        return Sample(new, wall, counter.calls)

    return run
