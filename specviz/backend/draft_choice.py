"""The offline pair's draft, chosen by measurement on the machine it runs on.

The offline target is SmolLM2-135M in fp32; its draft is a cheaper copy of the same network.
Which copy is cheaper depends on the CPU: int8 weights with bf16 activations take a third of
a target step where the CPU multiplies bf16 natively, and more than a whole step where int8
weights meet fp32 activations. A CPU flag does not tell which: a measurement does.

Candidates (VARIANTS): int8 per-channel weights with bf16, fp16 or fp32 activations, plain
bf16 and fp16 copies, and two with kernels that run on any x86 CPU: dynamic int8 (int8
weights and activations, torch.ao's quantize_dynamic through FBGEMM or oneDNN; eager only)
and int4 weights in groups of 32 with bf16 or fp32 activations
(torch._weight_int4pack_mm_for_cpu). Each one's q is what it computes, so a lossless
verification stays exact whichever is chosen. For each, after a warm-up, the median
one-token step and
two-token call (a round after a full accept opens with one) on TIMING_CONTEXT cached
positions, and alpha (mean sum_x min(p(x), q(x)) over a fixed text, both distributions
warped as the default settings warp them); beside them the target's one-token step and its
verify call at each width 2..9. All these calls are timed together, repetition by
repetition, so that other work on the machine while the choice is measured slows every
model alike rather than the one being timed. The choice is the candidate whose refined
prediction (specviz.costs, specviz.metrics.refined_speedup, without the engine's overhead,
which all candidates share) is largest at the gamma an untouched run uses: not the fastest
step.

The record is kept in the specviz cache, keyed by CPU model and flags, thread count, torch
version and device: a record from another machine is never used, a stale or corrupt one is
measured again. SPECVIZ_OFFLINE_DRAFT=auto or one of VARIANTS forces a variant (its c and
alpha are still measured, once). The compiled path compiles the variant chosen here; it
measures no choice of its own.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from specviz import metrics
from specviz.backend import kernels
from specviz.backend.offline import (
    DRAFT_LAYOUT,
    cache_root,
    cpu_has_16bit,
    quantize_dynamic_int8,
    quantize_w4,
    quantize_w8,
    refine_copy,
)
from specviz.threads import cpu_info

log = logging.getLogger(__name__)

ENV = "SPECVIZ_OFFLINE_DRAFT"
VARIANTS = ("w8-bf16", "w8-fp16", "w8-fp32", "bf16", "fp16", "dyn8", "w4-bf16", "w4-fp32")
HEAD = "eagle"  # the head's candidate: the drafter of that name (specviz.drafters.head)
GAMMAS = range(1, 9)  # the gammas a choice is judged at (verify widths 2..9 are measured)
RECORD_FORMAT = 3
# How many candidates, the best by their eager prediction, are compiled ahead of time and
# measured on that path where it runs (a CPU with packages on): ranked by what will run.
SHORTLIST = 3
# A choice predicting less than this is not kept (see offline_draft).
MIN_KEPT_PREDICTION = 1.0
# Steps are timed on this many cached positions: a prompt and a reply of a few sentences.
TIMING_CONTEXT = 128
# CPU flags that decide which kernels run fast; they and the CPU model key a record.
FLAGS = (
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
)
# alpha is measured on this text (about 64 positions), the same on every machine.
ALPHA_TEXT = (
    "The sky looks blue because sunlight is scattered by the molecules of the air. Shorter "
    "wavelengths are scattered far more than longer ones, so blue light reaches our eyes from "
    "every direction of the sky, while the sun itself looks slightly yellow. At sunset the "
    "light crosses much more air, and the reds and oranges remain."
)


def judged_at() -> dict[str, Any]:
    """The settings a choice is judged at: an untouched page's and the command line's
    (specviz.config.Settings' defaults). They key the record, so that a changed default
    measures the choice again."""
    from specviz.config import Settings

    s = Settings()
    w, dw = s.target_warp(), s.draft_warp()
    return {
        "gamma": s.gamma,
        "warp": [w.temperature, w.top_k, w.top_p],
        "draft_warp": [dw.temperature, dw.top_k, dw.top_p],
    }


def judge_gamma() -> int:
    """The gamma a choice is judged at (judged_at's)."""
    return int(judged_at()["gamma"])


def requested() -> str:
    """SPECVIZ_OFFLINE_DRAFT: 'auto' (the default) or one of VARIANTS; else ValueError."""
    raw = os.environ.get(ENV, "").strip() or "auto"
    if raw != "auto" and raw not in VARIANTS:
        raise ValueError(
            f"environment variable {ENV} must be auto or one of {', '.join(VARIANTS)}, got {raw!r}"
        )
    return raw


def build(base: torch.nn.Module, variant: str) -> torch.nn.Module:
    """The draft network of a variant, built from the fp32 target (the target is untouched)."""
    kind, _, act = variant.partition("-")
    if kind == "dyn8":
        return quantize_dynamic_int8(base)
    if kind in ("w8", "w4"):
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[act]
        return (quantize_w8 if kind == "w8" else quantize_w4)(base, dtype)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[kind]
    copied = copy.deepcopy(base).to(dtype).eval()
    on_cpu = next(base.parameters()).device.type == "cpu"
    if not on_cpu:
        return refine_copy(copied)
    # Without 16-bit arithmetic a 16-bit product is emulated: the copy widens its many-row
    # products (offline.WideningLinear).
    return refine_copy(copied, widen=not cpu_has_16bit(kind))


def describe_variant(variant: str) -> str:
    """What a variant is, for the models table: 'int8 weights / bfloat16', 'bfloat16 copy'."""
    names = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
    kind, _, act = variant.partition("-")
    if kind == "dyn8":
        return "dynamic int8 (weights and activations; FBGEMM or oneDNN)"
    if kind in ("w8", "w4"):
        return f"{kind[1]}-bit int weights / {names[act]}".replace("8-bit int", "int8").replace(
            "4-bit int", "int4"
        )
    return f"{names[kind]} copy"


def machine_key(device: torch.device) -> dict[str, Any]:
    """What a measurement depends on: CPU model and flags, the kernels torch dispatches to,
    threads, torch, device."""
    model, flags = cpu_info()
    key: dict[str, Any] = {
        "cpu": model,
        "flags": [f for f in FLAGS if f in flags],
        # the kernels torch dispatches to ("AVX512", "AVX2", ...; ATEN_CPU_CAPABILITY)
        "capability": kernels.capability(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": device.type,
        "judged_at": judged_at(),
        "layout": DRAFT_LAYOUT,  # how the variants' layers are built (specviz.backend.offline)
    }
    if device.type == "cuda":
        key["gpu"] = torch.cuda.get_device_name(device)
    else:  # specviz's kernels ("" where ATen's and inductor's code runs) and what a
        # package's generated code is (a choice decided on the packages measured them)
        key["kernels"] = kernels.tag()
        from specviz.backend.packages import FORMAT

        key["packages"] = FORMAT
    return key


def _key_id(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Candidate:
    """One variant's measurements and its prediction at its best gamma."""

    variant: str
    step_ms: float  # one token
    step2_ms: float  # two tokens: the first call of a round after a full accept
    c: float
    c2: float
    alpha: float | None  # None: not measured, since c >= 1 (it cannot win at any alpha)
    predicted: float  # at judge_gamma(); at alpha 1 when alpha is None (an upper bound)
    gamma: int  # the best gamma in GAMMAS by the same prediction
    predicted_best: float
    # On the path that runs, where packages are on (None: not measured there): the
    # draft's packaged step and two-token call, and the prediction from them against the
    # target's packaged step and verification; or why it has no packages (it runs eager
    # beside the packaged target, and its prediction is its eager step against that).
    packaged_step_ms: float | None = None
    packaged_step2_ms: float | None = None
    packaged_predicted: float | None = None
    packaged_why: str | None = None

    @property
    def ranked(self) -> float:
        """The prediction the choice compares: on the path that runs where measured there."""
        return self.predicted if self.packaged_predicted is None else self.packaged_predicted


@dataclass
class DraftChoice:
    """The chosen variant, every candidate measured, and where the numbers came from."""

    variant: str
    forced: bool
    candidates: list[Candidate]
    target_step_ms: float
    verify_steps: dict[int, float]  # width -> target steps
    machine: dict[str, Any]
    measured_s: float
    made: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S"))
    # "eager": the candidates' eager calls decided; "packaged": the shortlist's calls
    # compiled ahead of time (the path a CPU runs) decided (rank_packaged)
    decided_by: str = "eager"
    packaged_target_ms: float | None = None  # the target's packaged step
    packaged_verify_steps: float | None = None  # its packaged verification, in steps
    # The EAGLE head cached for this target (specviz.drafters.head), measured beside the
    # target on the path that runs (measure_head; None: no head was cached when the choice
    # was made), and the digest of the head file it measured
    head: Candidate | None = None
    head_id: str | None = None

    @property
    def chosen(self) -> Candidate:
        return next(cand for cand in self.candidates if cand.variant == self.variant)

    @property
    def drafter(self) -> str:
        """The drafter the measurement picks for a run on this pair: "eagle" where the
        head's prediction on the path that runs beats the chosen draft's, else "model"."""
        if self.head is not None and self.head.ranked > self.chosen.ranked:
            return HEAD
        return "model"

    def summary(self) -> str:
        """'w8-bf16 chosen by measurement: c 0.33, alpha 0.960' (or 'forced by ...'), and
        where a head was measured, its prediction beside the draft's."""
        cand = self.chosen
        how = f"forced by {ENV}" if self.forced else "chosen by measurement"
        if self.decided_by == "packaged" and not self.forced:
            how += " of the compiled path"
        line = f"{self.variant} {how}: c {self.c:.2f}, alpha {metrics.alpha_text(cand.alpha)}"
        return line if self.head is None else f"{line}; {self.head_summary()}"

    def head_summary(self) -> str:
        """The head's prediction against the draft's, and which the measurement picks."""
        head, g = self.head, judge_gamma()
        assert head is not None
        said = (
            f"EAGLE head: c {head.c:.2f}, one-step alpha {metrics.alpha_text(head.alpha)}, "
            f"predicted {head.ranked:.2f}x at gamma {g} against the draft's "
            f"{self.chosen.ranked:.2f}x"
        )
        if self.drafter == HEAD:
            return f"{said}: the head is picked (a run's default drafter, auto, drafts with it)"
        return f"{said}: the draft model is picked"

    @property
    def c(self) -> float:
        """The chosen draft's c on the path that decided: its packaged step over the
        target's packaged step where the compiled path decided and it has packages, else
        its eager c."""
        cand = self.chosen
        if self.decided_by == "packaged" and cand.packaged_step_ms and self.packaged_target_ms:
            return cand.packaged_step_ms / self.packaged_target_ms
        return cand.c

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verify_steps"] = {str(w): s for w, s in self.verify_steps.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DraftChoice:
        """Inverse of to_dict; raises (KeyError, TypeError, ValueError) on a bad record."""
        choice = cls(
            variant=str(d["variant"]),
            forced=bool(d["forced"]),
            candidates=[Candidate(**cand) for cand in d["candidates"]],
            target_step_ms=float(d["target_step_ms"]),
            verify_steps={int(w): float(s) for w, s in d["verify_steps"].items()},
            machine=dict(d["machine"]),
            measured_s=float(d["measured_s"]),
            made=str(d.get("made", "")),
            decided_by=str(d.get("decided_by", "eager")),
            packaged_target_ms=d.get("packaged_target_ms"),
            packaged_verify_steps=d.get("packaged_verify_steps"),
            head=Candidate(**d["head"]) if d.get("head") else None,
            head_id=d.get("head_id"),
        )
        if choice.head is not None and choice.head.variant != HEAD:
            raise ValueError("unknown head")
        if choice.variant not in VARIANTS or not choice.candidates:
            raise ValueError("unknown variant")
        choice.chosen  # noqa: B018 - raises StopIteration when the chosen one is missing
        return choice


def predict(alpha: float, gamma: int, c: float, c2: float, verify_steps: dict[int, float]) -> float:
    """The refined prediction (specviz.metrics.refined_speedup) without the engine's
    overhead, which every variant pays alike."""
    return metrics.refined_speedup(alpha, gamma, c, verify_steps[gamma + 1], c2=c2)


def candidate(
    variant: str,
    step_ms: float,
    step2_ms: float,
    alpha: float | None,
    target_ms: float,
    v: dict[int, float],
) -> Candidate:
    """A measured variant with its prediction at judge_gamma() and at its best gamma (at
    alpha 1, an upper bound, when alpha was not measured)."""
    c, c2 = step_ms / target_ms, step2_ms / target_ms
    a = 1.0 if alpha is None else alpha
    best = max(GAMMAS, key=lambda g: predict(a, g, c, c2, v))
    return Candidate(
        variant,
        step_ms,
        step2_ms,
        c,
        c2,
        alpha,
        predict(a, judge_gamma(), c, c2, v),
        best,
        predict(a, best, c, c2, v),
    )


def choose(candidates: list[Candidate]) -> Candidate:
    """The candidate with the largest prediction at judge_gamma(), on the path that runs
    where it was measured there (Candidate.ranked): what a visitor's untouched run gets (at
    a larger gamma a closer but dearer copy can rank first on paper)."""
    return max(candidates, key=lambda cand: cand.ranked)


# --- the record in the cache ----------------------------------------------------------


def record_path() -> Path:
    return cache_root() / "offline-draft.json"


def load_record(key: dict[str, Any]) -> DraftChoice | None:
    """This machine's record, or None when missing, stale, corrupt or from another machine."""
    try:
        data = json.loads(record_path().read_text())
        if data.get("format") != RECORD_FORMAT:
            return None
        entry = data["records"].get(_key_id(key))
        if entry is None:
            return None
        choice = DraftChoice.from_dict(entry)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, StopIteration) as exc:
        if record_path().exists():
            log.warning("offline draft record unreadable (%s): measuring again", exc)
        return None
    return choice if choice.machine == key else None


def save_record(choice: DraftChoice) -> None:
    """Add (or replace) this machine's record; written atomically."""
    path = record_path()
    try:
        data = json.loads(path.read_text())
        records = data["records"] if data.get("format") == RECORD_FORMAT else {}
        if not isinstance(records, dict):
            records = {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        records = {}
    records[_key_id(choice.machine)] = choice.to_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".offline-draft-", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump({"format": RECORD_FORMAT, "records": records}, f, indent=1)
    os.replace(tmp, path)


# --- measuring --------------------------------------------------------------------------


def measure(
    base: torch.nn.Module,
    tokenizer: Any,
    device: torch.device,
    variants: tuple[str, ...] = VARIANTS,
    forced: bool = False,
    reps: int = 7,
    say: Callable[[str], None] | None = None,
) -> tuple[DraftChoice, dict[str, torch.nn.Module]]:
    """Measure the variants against the target on this machine; returns the choice and the
    built networks (the caller keeps the chosen one)."""
    from specviz.config import Settings
    from specviz.costs import Timer, interleaved_medians, interleaved_times
    from specviz.lm import CachedLM
    from specviz.pair import token_width
    from specviz.sampling import warp

    say = say or log.info
    t0 = time.perf_counter()
    vocab = len(tokenizer)
    ids, context = _texts(tokenizer)
    w = Settings().target_warp()
    widths = list(range(1, max(GAMMAS) + 2))
    with torch.inference_mode():
        p = warp(_logits(base, ids, device, vocab), w)  # [n, V]
    # A first look on a short context, where a slow variant's prefill costs little: each
    # variant timed together with the target, and kept in steps of the target's (so one
    # copy is built at a time). A draft step as slow as a target step cannot win at any
    # alpha (E <= gamma + 1 <= gamma * c + v): such a variant keeps its first look, and its
    # alpha is only measured when it is forced. The look compares each one's fastest call
    # with the target's fastest, side by side: a burst of other work on a shared machine can
    # only slow a call, so the fastest is the one a burst did not reach (on a machine busy
    # with two compilers, medians of three put the w8-bf16 draft at 9.9 target steps, where
    # it measured 0.38 on the machine at rest: an AMD EPYC with AVX-512, 2 cores).
    short = Timer(CachedLM(base, vocab, device), ids[:8])
    built: dict[str, torch.nn.Module] = {}
    alphas: dict[str, float | None] = dict.fromkeys(variants)
    first: dict[str, dict[int, float]] = {}
    for name in variants:
        m = build(base, name).to(device)
        look = {
            "target": (short, [1]),
            name: (Timer(CachedLM(m, token_width(m), device), ids[:8]), [1, 2]),
        }
        t = interleaved_times(look, 5, warmup=1)
        first[name] = {n: min(ms) / min(t["target"][1]) for n, ms in t[name].items()}
        if forced or first[name][1] < 1.0:
            built[name] = m
            with torch.inference_mode():
                q = warp(_logits(m, ids, device, vocab), w)
            alphas[name] = float(torch.minimum(p, q).sum(-1).mean())
        del m, look  # a slow copy goes before the next one is built
    # The target's calls and every remaining variant's steps, timed together on the full
    # context (specviz.costs.interleaved_medians): c is a ratio of two of these, so work
    # that shares the cores for a while must not fall on one model only.
    plan = {"target": (Timer(CachedLM(base, vocab, device), context), widths)}
    for name, m in built.items():
        plan[name] = (Timer(CachedLM(m, token_width(m), device), context), [1, 2])
    timed = interleaved_medians(plan, reps, warmup=1)
    t_ms = timed.pop("target")
    v = {wd: t_ms[wd] / t_ms[1] for wd in widths}
    cands = []
    for name in variants:
        steps = timed.get(name)
        if steps is None:  # slow: its first look, in steps of the target's
            steps = {n: r * t_ms[1] for n, r in first[name].items()}
        cands.append(candidate(name, steps[1], steps[2], alphas[name], t_ms[1], v))
        say(
            f"offline draft {name}: step {steps[1]:.1f} ms, c {cands[-1].c:.2f}, "
            f"alpha {metrics.alpha_text(alphas[name])}"
        )
    best = choose(cands)
    choice = DraftChoice(
        variant=best.variant,
        forced=forced,
        candidates=cands,
        target_step_ms=t_ms[1],
        verify_steps=v,
        machine=machine_key(device),
        measured_s=time.perf_counter() - t0,
    )
    return choice, built


def shortlist(choice: DraftChoice) -> list[str]:
    """The SHORTLIST candidates with the best eager predictions, among those that can win
    (alpha measured: a draft step cheaper than the target's)."""
    able = [cand for cand in choice.candidates if cand.alpha is not None]
    return [cand.variant for cand in sorted(able, key=lambda c: -c.predicted)[:SHORTLIST]]


def rank_packaged(
    choice: DraftChoice,
    base: torch.nn.Module,
    tokenizer: Any,
    device: torch.device,
    length: int,
    compile_packages: Callable[[dict[str, torch.nn.Module], dict[str, tuple[int, ...]]], Any],
    reps: int = 7,
    say: Callable[[str], None] | None = None,
) -> DraftChoice:
    """The choice made again on the path a CPU runs: the shortlist's drafts and the target
    compiled ahead of time (compile_packages(models, widths) builds and keeps their
    packages, by role: "target" and each variant's name; specviz.backend.packages.prepare),
    then the target's packaged step and verification at judge_gamma() + 1 and each draft's
    packaged step and two-token call timed together, repetition by repetition
    (costs.interleaved_medians), and ranked by rerank. A draft whose packages could not be
    built runs eager beside the packaged target and is timed so. Where the target itself
    has no packages, the eager choice stands."""
    import dataclasses

    from specviz.backend.packages import failed
    from specviz.costs import Timer, interleaved_medians
    from specviz.lm import CachedLM
    from specviz.pair import token_width

    say = say or log.info
    t0 = time.perf_counter()
    g = judge_gamma()
    names = shortlist(choice)
    models = {"target": base} | {name: build(base, name).to(device) for name in names}
    widths = {"target": (1, g + 1)} | dict.fromkeys(names, (1, 2))
    compile_packages(models, widths)
    ids, context = _texts(tokenizer)

    def timer(role: str) -> tuple[Timer, str | None] | None:
        """The role's timer on its packages, or eager with why it has none (None for a
        target without packages)."""
        m = models[role]
        vocab = token_width(m) if role != "target" else len(tokenizer)
        on_packages = _packaged_timer(m, role, vocab, device, widths[role], length, context)
        if on_packages is not None:
            return on_packages, None
        if role == "target":
            return None
        why = next((r for w in widths[role] if (r := failed(m, w, length))), None)
        return Timer(CachedLM(m, vocab, device), context), why or "no package was built"

    made = {role: timer(role) for role in models}
    target = made["target"]
    if target is None:
        say("offline draft: the target has no compiled packages here; the eager choice stands")
        return choice
    plan = {role: (t[0], list(widths[role])) for role, t in made.items() if t is not None}
    timed = interleaved_medians(plan, reps, warmup=1)
    whys = {name: t[1] for name, t in made.items() if name != "target" and t is not None}
    for lm in (t[0].lm for t in made.values() if t is not None):
        if hasattr(lm, "close"):
            lm.close()
    ranked = rerank(choice, timed, whys, say)
    return dataclasses.replace(ranked, measured_s=choice.measured_s + time.perf_counter() - t0)


def rerank(
    choice: DraftChoice,
    timed: dict[str, dict[int, float]],
    whys: dict[str, str | None],
    say: Callable[[str], None] | None = None,
) -> DraftChoice:
    """The choice on the compiled path from what rank_packaged timed: timed["target"] its
    packaged step (width 1) and verification (judge_gamma() + 1) in ms, timed[name] each
    shortlisted draft's step and two-token call (packaged, or eager where whys[name] says
    why it has no packages). A candidate outside the shortlist is ranked by its eager calls
    against the packaged target. Returns the choice with decided_by "packaged"."""
    import dataclasses

    say = say or log.info
    g = judge_gamma()
    t_ms = timed["target"]
    v = t_ms[g + 1] / t_ms[1]
    out = []
    for cand in choice.candidates:
        if cand.alpha is None:  # a draft step dearer than the target's: it cannot win
            out.append(cand)
            continue
        if cand.variant in whys:
            steps, why = timed[cand.variant], whys[cand.variant]
        else:  # not shortlisted: its eager draft beside the packaged target
            steps, why = {1: cand.step_ms, 2: cand.step2_ms}, "not shortlisted, eager"
        c, c2 = steps[1] / t_ms[1], steps[2] / t_ms[1]
        pred = metrics.refined_speedup(cand.alpha, g, c, v, c2=c2)
        out.append(
            dataclasses.replace(
                cand,
                packaged_step_ms=None if why else steps[1],
                packaged_step2_ms=None if why else steps[2],
                packaged_predicted=pred,
                packaged_why=why,
            )
        )
        if cand.variant in whys:
            how = f"eager beside the packaged target: {why}" if why else "packaged"
            say(
                f"offline draft {cand.variant} on the compiled path: step {steps[1]:.1f} ms "
                f"({how}), c {c:.2f}, predicted {pred:.2f}x at gamma {g} "
                f"(eager {cand.predicted:.2f}x)"
            )
    best = choose(out)
    return dataclasses.replace(
        choice,
        variant=best.variant,
        candidates=out,
        decided_by="packaged",
        packaged_target_ms=t_ms[1],
        packaged_verify_steps=v,
    )


def head_alpha(
    base: torch.nn.Module, head: Any, ids: list[int], device: torch.device, vocab: int
) -> float:
    """The head's alpha on ids as the variants' is measured (mean sum_x min(p(x), q(x)),
    both warped as the default settings warp them), one step from the target's own
    features: at position i the head reads the target's feature at i - 1 and token i, and
    q is its distribution of token i + 1, p the target's. A chain's later drafts read the
    head's predicted features, so this is an upper bound on what they are accepted at."""
    from specviz.config import Settings
    from specviz.sampling import warp

    w = Settings().target_warp()
    x = torch.tensor([ids], dtype=torch.long, device=device)
    with torch.inference_mode():
        out = base(input_ids=x, output_hidden_states=True)
        p = warp(out.logits[0, 1:, :vocab].float(), w)  # [n - 1, V]: tokens 2..n
        features = out.hidden_states[-1].float()  # after the final norm: lm_head's input
        pred = head(features[:, :-1], x[:, 1:])  # [1, n - 1, H]
        q = warp(head.logits(pred)[0, :, :vocab], w)
    return float(torch.minimum(p, q).sum(-1).mean())


def measure_head(
    choice: DraftChoice,
    base: torch.nn.Module,
    tokenizer: Any,
    device: torch.device,
    head: Any,
    head_id: str,
    length: int | None = None,
    reps: int = 7,
    say: Callable[[str], None] | None = None,
) -> DraftChoice:
    """The choice with the EAGLE head measured beside it: its one-token and two-token draft
    calls (specviz.drafters.head.HeadLM, eager: the head has no packages) timed together
    with the target's step and verification at judge_gamma() + 1, repetition by repetition,
    on the path the target runs (its packages where the choice was made on them and
    `length` names their cache, else eager), its alpha one step from the target's features
    (head_alpha), and its refined prediction, which DraftChoice.drafter compares with the
    chosen draft's."""
    import dataclasses

    from specviz.costs import Timer, interleaved_medians
    from specviz.drafters.head import HeadLM
    from specviz.lm import CachedLM

    say = say or log.info
    t0 = time.perf_counter()
    g, vocab = judge_gamma(), len(tokenizer)
    ids, context = _texts(tokenizer)
    alpha = head_alpha(base, head, ids, device, vocab)
    target, on_packages = None, choice.decided_by == "packaged" and length is not None
    if on_packages:
        target = _packaged_timer(
            base, "target", vocab, device, (1, g + 1), int(length or 0), context
        )
        on_packages = target is not None
    if target is None:
        target = Timer(CachedLM(base, vocab, device), context)
    drafts = Timer(HeadLM(head, vocab), context)
    timed = interleaved_medians({"target": (target, [1, g + 1]), HEAD: (drafts, [1, 2])}, reps, 1)
    if hasattr(target.lm, "close"):
        target.lm.close()
    t_ms, h_ms = timed["target"], timed[HEAD]
    c, c2, v = h_ms[1] / t_ms[1], h_ms[2] / t_ms[1], t_ms[g + 1] / t_ms[1]
    pred = metrics.refined_speedup(alpha, g, c, v, c2=c2)
    cand = Candidate(
        HEAD,
        h_ms[1],
        h_ms[2],
        c,
        c2,
        alpha,
        pred,
        g,
        pred,
        packaged_predicted=pred if on_packages else None,
        packaged_why="the head runs eager beside the packaged target" if on_packages else None,
    )
    path = "the packaged target" if on_packages else "the eager target"
    say(
        f"EAGLE head beside {path}: step {h_ms[1]:.1f} ms against the target's "
        f"{t_ms[1]:.1f} ms (c {c:.2f}), one-step alpha {alpha:.3f}, predicted {pred:.2f}x "
        f"at gamma {g}"
    )
    measured = choice.measured_s + time.perf_counter() - t0
    return dataclasses.replace(choice, head=cand, head_id=head_id, measured_s=measured)


def _packaged_timer(
    model: torch.nn.Module,
    role: str,
    vocab: int,
    device: torch.device,
    widths: tuple[int, ...],
    length: int,
    context: list[int],
) -> Any:
    """A Timer on the model's packages at these widths and cache length, or None where they
    are not built."""
    from specviz.backend import StaticLM
    from specviz.backend.packages import packaged
    from specviz.costs import Timer
    from specviz.pair import LoadedModel

    fw = packaged(LoadedModel(role, model, device, "", vocab, 0.0, "derived"), widths, length)
    if fw is None:
        return None
    return Timer(StaticLM(model, role, vocab, fw, widths, length - 1, device), context)


def _texts(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The fixed text's token ids (alpha is measured on them) and the cached context a
    timing runs on: those ids repeated to TIMING_CONTEXT tokens."""
    ids = list(tokenizer(ALPHA_TEXT)["input_ids"])
    return ids, (ids * (TIMING_CONTEXT // max(1, len(ids)) + 1))[:TIMING_CONTEXT]


def _logits(model: torch.nn.Module, ids: list[int], device: torch.device, vocab: int) -> Any:
    x = torch.tensor([ids], dtype=torch.long, device=device)
    return model(input_ids=x).logits[0, :, :vocab].float()


# Choices this process made but did not keep (keep() says why), by machine key: the rest of
# the process runs what it chose, and the next process measures again.
_made_here: dict[str, DraftChoice] = {}


def keep(choice: DraftChoice) -> bool:
    """Save a choice as this machine's record, unless it predicts no speedup at all on the
    path that decided it (a machine busy with other work may have made it): then it holds
    for this process only. Returns whether it was saved."""
    if choice.chosen.ranked >= MIN_KEPT_PREDICTION:
        save_record(choice)
        _made_here.pop(_key_id(choice.machine), None)
        return True
    _made_here[_key_id(choice.machine)] = choice
    return False


def recorded(device: torch.device) -> DraftChoice | None:
    """The choice offline_draft would read for this machine without measuring (the
    record, with a forced variant applied), or None when it has to measure."""
    want = requested()
    key = machine_key(device)
    rec = load_record(key) or _made_here.get(_key_id(key))
    if rec is not None:
        rec = copy.deepcopy(rec)  # a forced variant below changes it
    if rec is not None and want != "auto":
        known = {cand.variant: cand for cand in rec.candidates}
        if want not in known or known[want].alpha is None:  # measure it whole
            return None
        rec.variant, rec.forced = want, True
    return rec


def offline_draft(
    base: torch.nn.Module,
    tokenizer: Any,
    device: torch.device,
    remeasure: bool = False,
    say: Callable[[str], None] | None = None,
) -> tuple[torch.nn.Module, DraftChoice]:
    """The draft network for this machine and its record: from the cache when this machine
    has a valid one (and it covers a forced variant), else measured now and saved."""
    want = requested()
    rec = None if remeasure else recorded(device)
    if rec is not None:
        return build(base, rec.variant).to(device), rec
    forced = want != "auto"
    choice, built = measure(
        base, tokenizer, device, (want,) if forced else VARIANTS, forced=forced, say=say
    )
    # A forced run measured one variant: no record of the choice. Nor is a choice kept that
    # predicts no speedup at all: a machine busy with other work may have made it, and the
    # next load measures again.
    if not forced:
        keep(choice)
    log.info("offline draft: %s (measured in %.1f s)", choice.summary(), choice.measured_s)
    model = built.get(choice.variant)
    return (model if model is not None else build(base, choice.variant).to(device)), choice
