"""Model pairs: the registry, loading (offline GGUF or hub ids), caching, compatibility.

The offline default pair needs no network: its models come from specviz.backend.offline (the
converted GGUF target) and specviz.backend.draft_choice (the cheaper copy of it that measures best
on this machine, as the draft). Hub ids load through transformers, with trust_remote_code
off, straight onto their device (or spread by a device map).

The loaded model and the pair themselves are specviz.pair. Models load once per process and
are shared read-only by every request; each request keeps its own KV caches and generator
(see specviz.engine).

The app loads with ``guarded``: every hub model not yet loaded is sized from the hub's
metadata before anything of it downloads, and refused above the server's budget
(specviz.hub). A process keeps at most SPECVIZ_MAX_PAIRS hub pairs (and their models within
the budget): loading one more releases the least recently used first, with the models no
kept pair shares. The offline pair is pinned. Releasing only drops this module's references:
a run in flight holds its pair, whose models live until it ends.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specviz import hub
from specviz.backend import kernels
from specviz.backend.offline import (
    OFFLINE_DRAFT,
    OFFLINE_IDS,
    OFFLINE_TARGET,
    cpu_has_16bit,
    prepare_offline,
    take_conversion_seconds,
)
from specviz.config.deployment import max_pairs
from specviz.pair import LoadedModel, ModelPair, token_width
from specviz.paths import cache_root

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PairSpec:
    """A named draft -> target pair."""

    name: str
    draft: str
    target: str
    note: str


PAIRS: dict[str, PairSpec] = {
    "default": PairSpec(
        "default",
        OFFLINE_DRAFT,
        OFFLINE_TARGET,
        "offline: SmolLM2-135M-Instruct (GGUF Q4_1, fp32) drafted by a cheaper copy of itself",
    ),
    "smollm2": PairSpec(
        "smollm2",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "HuggingFaceTB/SmolLM2-1.7B-Instruct",
        "hub: SmolLM2 135M -> 1.7B",
    ),
    "qwen2.5": PairSpec(
        "qwen2.5",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "Qwen/Qwen2.5-7B-Instruct",
        "hub: Qwen2.5 0.5B -> 7B",
    ),
    "llama3": PairSpec(
        "llama3",
        "meta-llama/Llama-3.2-1B-Instruct",
        "meta-llama/Llama-3.1-8B-Instruct",
        "hub: Llama 3.2 1B -> Llama 3.1 8B (gated on the hub)",
    ),
}

# A hub id: "name" or "owner/name", letters, digits, '.', '_', '-'; no paths, no URLs.
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")


def check_model_id(model_id: str) -> str:
    """Return a hub or offline model id unchanged, or raise ValueError for anything else."""
    if not isinstance(model_id, str) or not model_id.strip():
        raise ValueError("model id is empty")
    model_id = model_id.strip()
    if model_id in OFFLINE_IDS:
        return model_id
    if model_id.startswith("offline:"):
        raise ValueError(f"unknown offline model {model_id!r}; known: {', '.join(OFFLINE_IDS)}")
    if not _HUB_ID.match(model_id) or ".." in model_id:
        raise ValueError(
            f"refused model id {model_id!r}: expected a hub id like 'owner/name' "
            "(paths and URLs are not accepted)"
        )
    return model_id


# --- devices and dtypes ----------------------------------------------------------------

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str = "auto") -> torch.device:
    """'auto' picks CUDA when present, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda; got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda was asked for, but no CUDA device is available")
    return torch.device(device)


# accelerate's placement strategies that SPECVIZ_DEVICE_MAP may name.
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def device_map_setting() -> str | None:
    """SPECVIZ_DEVICE_MAP, read when a pair loads: None places a hub target whole on the
    device; 'auto' (or another of DEVICE_MAPS) lets accelerate spread its layers over the
    GPUs present, then CPU memory, for a target that does not fit one GPU."""
    raw = os.environ.get("SPECVIZ_DEVICE_MAP", "").strip()
    if not raw:
        return None
    if raw not in DEVICE_MAPS:
        raise ValueError(
            f"environment variable SPECVIZ_DEVICE_MAP must be one of {', '.join(DEVICE_MAPS)} "
            f"(or unset), got {raw!r}"
        )
    return raw


def cpu_has_bf16() -> bool:
    """Whether this CPU runs bf16 matrix products natively (AVX512-BF16 or AMX)."""
    return cpu_has_16bit("bf16")


def resolve_dtype(dtype: str, device: torch.device, offline: bool) -> torch.dtype:
    """'auto': bf16 on CUDA and on CPUs with bf16 support, else fp32.

    The offline pair's target stays fp32 on the CPU: its draft is already a low-precision
    copy, and fp32 is where greedy speculative output must equal greedy decoding exactly.
    """
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16
        return torch.float32 if offline or not cpu_has_bf16() else torch.bfloat16
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be auto, {', '.join(DTYPES)}; got {dtype!r}")
    return DTYPES[dtype]


_lock = threading.Lock()
_models: dict[tuple[str, ...], LoadedModel] = {}
_tokenizers: dict[str, Any] = {}
_pairs: dict[tuple[str, ...], ModelPair] = {}


def _load_offline_target(device: torch.device, dtype: torch.dtype) -> LoadedModel:
    from transformers import AutoModelForCausalLM

    t0 = time.perf_counter()
    d = prepare_offline()
    try:
        model = AutoModelForCausalLM.from_pretrained(d, dtype=dtype)
    except Exception as exc:  # a corrupt cache: convert again, once
        log.warning("cached offline weights unreadable (%s); converting again", exc)
        d = prepare_offline(force=True)
        model = AutoModelForCausalLM.from_pretrained(d, dtype=dtype)
    model = model.to(device).eval()
    # A cold start converts the GGUF (possibly while loading the tokenizer, just before).
    converted = take_conversion_seconds()
    source = "converted from GGUF" if converted else "cache"
    # The conversion's seconds count as loading: the clock started that much earlier.
    return _loaded(OFFLINE_TARGET, model, device, dtype, t0 - converted, source)


def _load_offline_draft(device: torch.device) -> LoadedModel:
    """The fp32 target's cheaper copy that measures best on this machine (see
    specviz.backend.draft_choice); measured once per machine, then read from the cache."""
    from specviz.backend import draft_choice

    t0 = time.perf_counter()
    base = _get_model(OFFLINE_TARGET, device, torch.float32)
    tokenizer = _get_tokenizer(OFFLINE_TARGET)
    model, choice = draft_choice.offline_draft(base.model, tokenizer, device)
    return LoadedModel(
        OFFLINE_DRAFT,
        model,
        device,
        draft_choice.describe_variant(choice.variant),
        base.vocab_size,
        time.perf_counter() - t0,
        "derived",
        choice=choice,
    )


def _load_hub(
    model_id: str, device: torch.device, dtype: torch.dtype, spread: str | None = None
) -> LoadedModel:
    """Weights go straight to the device (or, with spread, where accelerate places them);
    they never pass whole through CPU memory on their way to a GPU."""
    from transformers import AutoModelForCausalLM

    t0 = time.perf_counter()
    try:
        model = AutoModelForCausalLM.from_pretrained(
            model_id, dtype=dtype, device_map=spread or str(device), trust_remote_code=False
        )
    except Exception as exc:
        raise ValueError(f"could not load model {model_id!r}: {_first_line(exc)}") from None
    return _loaded(model_id, model.eval(), device, dtype, t0, "hub")


def _loaded(
    name: str,
    model: torch.nn.Module,
    device: torch.device,
    dtype: torch.dtype,
    t0: float,
    source: str,
) -> LoadedModel:
    """A model loaded in one dtype since perf_counter t0, its token width measured."""
    elapsed = time.perf_counter() - t0
    return LoadedModel(
        name, model, device, str(dtype).removeprefix("torch."), token_width(model), elapsed, source
    )


def _get_model(
    model_id: str, device: torch.device, dtype: torch.dtype, spread: str | None = None
) -> LoadedModel:
    """Load once per (id, device, dtype, spread); callers hold _lock."""
    key = (model_id, str(device), str(dtype), spread or "")
    if model_id == OFFLINE_DRAFT:  # a forced variant is another model
        from specviz.backend.draft_choice import requested

        key = (*key, requested())
    if key not in _models:
        if model_id == OFFLINE_TARGET:
            _models[key] = _load_offline_target(device, dtype)
        elif model_id == OFFLINE_DRAFT:
            _models[key] = _load_offline_draft(device)
        else:
            _models[key] = _load_hub(model_id, device, dtype, spread)
    return _models[key]


def _get_tokenizer(model_id: str) -> Any:
    """Load once per id (both offline models share one tokenizer); callers hold _lock."""
    key = "offline" if model_id in OFFLINE_IDS else model_id
    if key not in _tokenizers:
        from transformers import AutoTokenizer

        if key == "offline":
            _tokenizers[key] = AutoTokenizer.from_pretrained(prepare_offline())
        else:
            try:
                _tokenizers[key] = AutoTokenizer.from_pretrained(model_id, trust_remote_code=False)
            except Exception as exc:
                raise ValueError(
                    f"could not load the tokenizer of {model_id!r}: {_first_line(exc)}"
                ) from None
    return _tokenizers[key]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_tokenizers(draft_tok: Any, target_tok: Any, draft_id: str, target_id: str) -> None:
    """Draft and target must map the same strings to the same ids.

    Embedding sizes may be padded differently (151936 vs 152064): the comparison is over the
    tokenizers' vocabularies, not the models' output widths.
    """
    if draft_tok is target_tok:
        return
    dv, tv = draft_tok.get_vocab(), target_tok.get_vocab()
    if dv != tv:
        only = len(set(dv.items()) ^ set(tv.items()))
        raise ValueError(
            f"tokenizer mismatch: draft {draft_id!r} ({len(dv)} tokens) and target "
            f"{target_id!r} ({len(tv)} tokens) differ on {only} token-id entries; "
            "speculative decoding needs one shared tokenizer"
        )


def _eos_ids(model: torch.nn.Module, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, (list, tuple)):
        ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)


def resolve_pair(pair: str | None, draft: str | None, target: str | None) -> PairSpec:
    """A PairSpec from a registry name, or from explicit ids (a custom pair)."""
    if draft or target:
        if pair not in (None, "", "custom"):
            raise ValueError("give either a pair name or --draft/--target ids, not both")
        if not (draft and target):
            raise ValueError("a custom pair needs both a draft id and a target id")
        return PairSpec("custom", check_model_id(draft), check_model_id(target), "custom ids")
    name = pair or "default"
    if name not in PAIRS:
        raise ValueError(f"unknown pair {name!r}; known pairs: {', '.join(PAIRS)}")
    return PAIRS[name]


def load_pair(
    pair: str | None = None,
    *,
    draft: str | None = None,
    target: str | None = None,
    dtype: str = "auto",
    device: str = "auto",
    guarded: bool = False,
) -> ModelPair:
    """Load (once per process) a named pair or a custom draft/target pair of model ids.

    guarded (the app's loads): the hub models not yet loaded are sized first and refused
    above the server's budget (specviz.hub.check_fits), before any file downloads; the
    least recently used hub pairs are released first to make room (SPECVIZ_MAX_PAIRS)."""
    spec, key, dev, dt, spread = _resolve(pair, draft, target, dtype, device)
    with _lock:
        if key in _pairs:
            _pairs[key] = _pairs.pop(key)  # the most recently used goes last
            return _pairs[key]
        limit = hub.budget(dev, spread is not None) if guarded else None
        needed = [m for m in _hub_ids(spec) if not _model_loaded(m, dev, dt)]
        incoming = sum(hub.check_fits(needed, limit).values()) if limit is not None else 0
        if not _pinned(key):
            _make_room(limit, incoming, spare=_hub_ids(spec))
        if dev.type == "cpu":
            kernels.ready()  # registers the top-p op that specviz.sampling's cut looks for
        target_tok = _get_tokenizer(spec.target)
        draft_tok = _get_tokenizer(spec.draft)
        check_tokenizers(draft_tok, target_tok, spec.draft, spec.target)
        t = _get_model(spec.target, dev, dt, spread)
        d = _get_model(spec.draft, dev, dt)
        _pairs[key] = ModelPair(
            name=spec.name,
            target=t,
            draft=d,
            tokenizer=target_tok,
            eos_ids=_eos_ids(t.model, target_tok),
            context_len=int(getattr(t.model.config, "max_position_embeddings", 0) or 2048),
        )
        return _pairs[key]


def needs_hub_load(
    pair: str | None = None,
    *,
    draft: str | None = None,
    target: str | None = None,
    dtype: str = "auto",
    device: str = "auto",
) -> bool:
    """Whether load_pair would load a hub model for this pair (it is not kept, and one of
    its models is a hub id): what the app lets one visitor at a time do (hub.LOADS)."""
    spec, key, dev, dt, _ = _resolve(pair, draft, target, dtype, device)
    with _lock:
        return key not in _pairs and any(not _model_loaded(m, dev, dt) for m in _hub_ids(spec))


def _resolve(
    pair: str | None, draft: str | None, target: str | None, dtype: str, device: str
) -> tuple[PairSpec, tuple[str, ...], torch.device, torch.dtype, str | None]:
    """The pair's spec, its cache key, device, dtype and device map (None: whole)."""
    spec = resolve_pair(pair, draft, target)
    dev = resolve_device(device)
    offline = spec.target in OFFLINE_IDS
    dt = resolve_dtype(dtype, dev, offline)
    spread = device_map_setting()  # a hub target's only: a draft fits on one device
    if offline:
        spread = None  # the offline target has 135M parameters: it fits anywhere
    variant = ""
    if OFFLINE_DRAFT in (spec.draft, spec.target):
        from specviz.backend.draft_choice import requested

        variant = requested()  # a bad SPECVIZ_OFFLINE_DRAFT fails here, before any load
    key = (spec.name, spec.draft, spec.target, str(dev), str(dt), spread or "", variant)
    return spec, key, dev, dt, spread


def _hub_ids(spec: PairSpec) -> list[str]:
    return [m for m in dict.fromkeys((spec.target, spec.draft)) if m not in OFFLINE_IDS]


def _model_loaded(model_id: str, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether a model of this id is kept on this device in this dtype (any placement)."""
    return any(k[:3] == (model_id, str(device), str(dtype)) for k in _models)


def _pinned(key: tuple[str, ...]) -> bool:
    """The offline pair is never released: it is the app's default, and costs no download."""
    return key[2] in OFFLINE_IDS


def _make_room(limit: hub.Budget | None, incoming: int, spare: list[str]) -> None:
    """Release the least recently used hub pairs until one more fits: fewer than
    SPECVIZ_MAX_PAIRS kept, and (with a budget) the kept hub weights plus incoming within it.
    The models of the ids in spare (the incoming pair's) stay. Callers hold _lock."""
    most = max_pairs()
    for key in [k for k in _pairs if not _pinned(k)]:  # least recently used first
        kept = sum(1 for k in _pairs if not _pinned(k))
        over = limit is not None and _hub_bytes() + incoming > limit.bytes
        if kept < most and not over:
            break
        _release(key, spare)


def _hub_bytes() -> int:
    """The bytes of the hub models kept (parameters and buffers, as loaded)."""
    return sum(
        sum(t.numel() * t.element_size() for t in (*m.model.parameters(), *m.model.buffers()))
        for k, m in _models.items()
        if k[0] not in OFFLINE_IDS
    )


def _release(key: tuple[str, ...], spare: list[str]) -> None:
    """Drop a pair, and the hub models and tokenizers that no kept pair uses and no id in
    spare names. Callers hold _lock."""
    gone = _pairs.pop(key)
    log.info("released pair %s (%s -> %s): least recently used", gone.name, key[1], key[2])
    used = {id(m) for p in _pairs.values() for m in (p.target, p.draft) if m is not None}
    for k, m in list(_models.items()):
        if k[0] not in OFFLINE_IDS and k[0] not in spare and id(m) not in used:
            del _models[k]
    names = {n for p in _pairs.values() for n in (p.target.name, p.draft and p.draft.name)}
    names |= set(spare)
    for name in [n for n in _tokenizers if n != "offline" and n not in names]:
        del _tokenizers[name]
    del gone
    gc.collect()  # a model's modules hold reference cycles
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def prepare_offline_pair(device: str = "auto", remeasure: bool = False, say: Any = None) -> Any:
    """The set-up step: convert the offline GGUF (once) and choose this machine's offline
    draft (measured once, or again with remeasure), with the EAGLE head cached for the
    offline target measured beside it (_with_head); returns the DraftChoice."""
    choice = _choose_draft(device, remeasure, say)
    return _with_head(choice, resolve_device(device), remeasure, say)


def _with_head(choice: Any, dev: torch.device, remeasure: bool, say: Any = None) -> Any:
    """The choice with the EAGLE head that `python -m specviz train-head` cached for the
    offline target measured beside its draft (specviz.backend.draft_choice.measure_head),
    once per head file (again with remeasure) and kept in its record; a head no longer
    cached leaves the record. A forced variant's choice is kept as it is. The target is
    loaded only where some head is cached and none is the file the record measured."""
    import dataclasses

    from specviz.backend import draft_choice
    from specviz.drafters.head import load_head
    from specviz.head_cache import HEAD_NAME, cached_head, file_digest

    if choice.forced:
        return choice
    cached = sorted((cache_root() / "heads").glob(f"*/{HEAD_NAME}"))
    if (
        not remeasure
        and choice.head is not None
        and any(file_digest(f) == choice.head_id for f in cached)
    ):
        return choice  # the head the record measured is still there: nothing to load
    path = None
    if cached:
        with _lock:
            base = _get_model(OFFLINE_TARGET, dev, torch.float32)
            tokenizer = _get_tokenizer(OFFLINE_TARGET)
        path = cached_head(base.model)
    if path is None:
        if choice.head is None:
            return choice
        choice = dataclasses.replace(choice, head=None, head_id=None)
        draft_choice.keep(choice)
        return choice
    head_id = file_digest(path)  # not the record's: that case returned above
    length = default_cache_len(tokenizer) if packages_on(dev) else None
    try:
        head = load_head(base.model, path)
    except Exception as exc:  # a damaged file (safetensors raises its own error type)
        line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        (say or log.warning)(
            f"specviz: the EAGLE head at {path} could not be read ({line}): not measured; "
            "`python -m specviz train-head` trains it again"
        )
        if choice.head is not None:  # measured on another file: it no longer says this one
            choice = dataclasses.replace(choice, head=None, head_id=None)
            draft_choice.keep(choice)
        return choice
    choice = draft_choice.measure_head(
        choice, base.model, tokenizer, dev, head, head_id, length, say=say
    )
    draft_choice.keep(choice)
    return choice


def _choose_draft(device: str, remeasure: bool, say: Any) -> Any:
    """The offline draft's choice (prepare_offline_pair without the head)."""
    from specviz.backend import draft_choice

    draft_choice.requested()  # a bad SPECVIZ_OFFLINE_DRAFT fails before any work
    dev = resolve_device(device)
    if dev.type == "cpu":  # before the choice: the int8 variants' steps depend on it
        kernels.build(report=say or (lambda _m: None))
    known = None if remeasure else draft_choice.recorded(dev)
    on_packages = packages_on(dev)
    if known is not None and (known.forced or known.decided_by == "packaged" or not on_packages):
        return known  # measured before on this machine, on the path it runs: nothing to load
    with _lock:
        base = _get_model(OFFLINE_TARGET, dev, torch.float32)
        tokenizer = _get_tokenizer(OFFLINE_TARGET)
    choice = known
    if choice is None:
        _, choice = draft_choice.offline_draft(
            base.model, tokenizer, dev, remeasure=remeasure, say=say
        )
    if choice.forced or not on_packages:
        return choice
    # On a CPU the draft runs compiled ahead of time: the shortlist is measured there, and
    # the choice is made on what will run (its packages are kept for the runs).
    length = default_cache_len(tokenizer)
    report = say or (lambda _m: None)

    def compile_packages(models: dict, widths: dict) -> dict[str, float]:
        from specviz.backend.packages import prepare

        return prepare(
            models,
            widths,
            length,
            report=report,
            elsewhere=(lambda todo: _WorkerBuild(dev, length, todo)) if _two_cores() else None,
            check=lambda built: _fresh_check(dev, length, built),
        )

    choice = draft_choice.rank_packaged(
        choice, base.model, tokenizer, dev, length, compile_packages, say=say
    )
    # Saved whatever it predicts, so that a second set-up rebuilds and measures nothing;
    # a prediction below 1 on the compiled path is said, with how to measure again.
    draft_choice.save_record(choice)
    if choice.chosen.ranked < draft_choice.MIN_KEPT_PREDICTION:
        report(
            f"specviz: the draft chosen, {choice.variant}, predicts {choice.chosen.ranked:.2f}x "
            "on the compiled path here (a machine busy with other work measures so too): "
            "`python -m specviz prepare --remeasure` measures again"
        )
    return choice


def packages_on(dev: torch.device) -> bool:
    """Whether the set-up step compiles the offline pair's calls ahead of time: on a CPU,
    unless SPECVIZ_AOTI is off."""
    off = os.environ.get("SPECVIZ_AOTI", "").lower() in ("0", "off", "no")
    return dev.type == "cpu" and not off


def default_cache_len(tokenizer: Any) -> int:
    """The static cache length of a default run (the default prompt, settings and gamma)."""
    from specviz.backend import cache_len
    from specviz.config import DEFAULT_PROMPT, Settings
    from specviz.pair import encode_prompt

    s = Settings()
    return cache_len(len(encode_prompt(tokenizer, DEFAULT_PROMPT)) + s.max_new_tokens + s.gamma + 2)


def _two_cores() -> bool:
    return (os.cpu_count() or 1) >= 2  # a second process builds half of the packages


def prepare_offline_packages(device: str = "auto", say: Any = None) -> dict[str, float] | None:
    """The set-up step's second half: on a CPU, compile the offline pair's calls of a
    default run ahead of time (specviz.backend.packages: the target's 1 and gamma + 1
    positions, the draft's 1 and 2, on the default run's cache), each once; later processes
    load them in milliseconds. SPECVIZ_AOTI=off skips it. Returns the seconds each build
    took ({} when every package was there), or None where nothing is built (a GPU, or off)."""
    from specviz.backend.packages import prepare
    from specviz.config import Settings

    dev = resolve_device(device)
    if not packages_on(dev):
        return None
    pair = load_pair(None, device=device)
    s = Settings()
    widths = {"target": (1, s.gamma + 1), "draft": (1, 2)}
    models = {"target": pair.target.model, "draft": pair.draft.model}
    length = default_cache_len(pair.tokenizer)
    return prepare(
        models,
        widths,
        length,
        report=say or (lambda _m: None),
        elsewhere=(lambda todo: _WorkerBuild(dev, length, todo)) if _two_cores() else None,
        check=lambda built: _fresh_check(dev, length, built),
    )


def _worker(device: torch.device, length: int, todo: list[tuple[str, int]], *flags: str) -> Any:
    """specviz.backend.prepare_worker started on these (role, width) pairs."""
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-m", "specviz.backend.prepare_worker", *flags, device.type]
        + [str(length)]
        + [f"{role}/{w}" for role, w in todo],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],  # where the specviz package is found
    )


def _last_json(proc: Any) -> dict[str, Any] | None:
    import json

    out, _ = proc.communicate()
    try:
        return dict(json.loads(out.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return None


class _WorkerBuild:
    """specviz.backend.prepare_worker building some packages in a second process; wait()
    gives the seconds of each it built ({} when it failed: the caller builds those)."""

    def __init__(self, device: torch.device, length: int, todo: list[tuple[str, int]]) -> None:
        self.proc = _worker(device, length, todo)

    def wait(self) -> dict[str, float]:
        return _last_json(self.proc) or {}


def _fresh_check(device: torch.device, length: int, built: list[tuple[str, int]]) -> dict:
    """Load and probe the packages just built in a fresh process (prepare_worker --check):
    by "role/width", "" for each one it used, else why not; when the process itself fails
    (a crash while loading), every package it was given is unproven, so none is kept."""
    proc = _worker(device, length, built, "--check")
    verdicts = _last_json(proc)
    if verdicts is None:
        why = f"the process that loads them ended with code {proc.returncode}"
        return {f"{role}/{w}": why for role, w in built}
    return {k: str(why) for k, why in verdicts.items()}
