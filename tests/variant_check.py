"""Every offline draft variant on a tiny pair, in a process of its own (tests/test_variants.py
starts it under each CPU capability it can emulate):

python -m tests.variant_check build ITEM ...
    builds the packages of each ITEM ("target": the tiny fp32 target's TARGET_WIDTHS; a
    variant of specviz.backend.draft_choice.VARIANTS: that draft's DRAFT_WIDTHS) with the set-up
    step's own code (specviz.backend.packages.prepare) into the store under $SPECVIZ_CACHE,
    first building specviz's kernel library there where this capability takes it (AVX2,
    AVX-512).
    Prints one JSON object: per item, the widths built, the widths refused with the reason
    recorded, the lines prepare said, and the CPU ISA each package's code was generated for.

python -m tests.variant_check kernels
    builds specviz's kernel library into $SPECVIZ_CACHE where this capability takes it
    (AVX2, AVX-512), once, before the builds that use it start (two at once would both compile it).

python -m tests.variant_check check VARIANT ...
    in a fresh process, per variant: greedy speculative and greedy autoregressive output on
    the eager path, then on the packages in the store (the path "auto" takes on a CPU),
    counting how many calls after each prefill ran a package; what the compiled path says
    about a variant that has no packages; and, once, whether the target's 1-position and
    (GAMMA + 1)-position packages give the same logits from the same cache state. Prints one
    JSON object.

The capability comes from the environment (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA), the
store from SPECVIZ_CACHE: this module sets neither.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
import zipfile
from typing import Any

import torch

# The tiniest target on which every variant's layers run their own kernels: the int4
# kernel takes input channels in groups of 32 and output rows in sixteens (its layers pad
# to them; 64, 128 and 32 need no padding), the int8 words form takes input channels in
# fours. At transformers' initial scale (0.02) its greedy output is one token repeated; at
# 0.2 it varies, and the int4 and bf16 drafts have some of their drafts rejected.
VOCAB, HIDDEN, INTERMEDIATE, INIT, SHARPNESS = 32, 64, 128, 0.2, 4.0
GAMMA = 2
TARGET_WIDTHS = (1, GAMMA + 1)
DRAFT_WIDTHS = (1, 2)
PROMPT = "1 2 3"
TOKENS = 24
# What the compiled path prints when a call does not run a package.
EAGER_LINES = ("unusable", "runs eager", "run eager", "no compiled package", "no ahead-of-time")


def target_model() -> torch.nn.Module:
    from tests.tiny import tiny_model

    return tiny_model(
        VOCAB,
        0,
        SHARPNESS,
        layers=1,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        initializer_range=INIT,
    )


def pair_with(target: torch.nn.Module, variant: str) -> Any:
    """The tiny target and its draft of this variant (specviz.backend.draft_choice.build)."""
    from specviz.backend import draft_choice
    from specviz.pair import LoadedModel, ModelPair
    from tests.tiny import TinyTokenizer

    cpu = torch.device("cpu")
    draft = draft_choice.build(target, variant)
    return ModelPair(
        name=f"tiny-{variant}",
        target=LoadedModel("tiny-target", target, cpu, "float32", VOCAB, 0.0, "test"),
        # the target's copy, as the offline draft is: it takes the target's prompt
        draft=LoadedModel(f"tiny-{variant}", draft, cpu, variant, VOCAB, 0.0, "derived"),
        tokenizer=TinyTokenizer(VOCAB, None),
        eos_ids=frozenset(),
        context_len=128,
    )


def length() -> int:
    """The static cache's length of a run of PROMPT (as the engine sizes it)."""
    from specviz.backend import cache_len

    return cache_len(len(PROMPT.split()) + TOKENS + GAMMA + 2)


def _code(path: Any) -> dict[str, Any]:
    """What a package's generated code is for: the CPU ISA AOTInductor generated its kernels
    for (its metadata), and which of specviz's ops (specviz.backend.kernels) its wrapper calls."""
    out: dict[str, Any] = {"isa": "", "ops": []}
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if name.endswith("kernel_metadata.json"):
                out["isa"] = str(json.loads(z.read(name)).get("AOTI_CPU_ISA", ""))
            elif name.endswith("wrapper.cpp"):
                code = z.read(name).decode(errors="replace")
                out["ops"] = [op for op in ("int8_linear", "linear") if f"specviz.{op}" in code]
    return out


def build(items: list[str]) -> dict[str, Any]:
    from specviz.backend import draft_choice, kernels, packages

    said: list[str] = []
    if kernels.wanted():  # as the set-up step does before it compiles packages
        kernels.build(report=said.append)
    out: dict[str, Any] = {
        "capability": packages.capability(),
        "kernels": kernels.tag(),
        "kernel_lines": said,
    }
    target, n = target_model(), length()
    for item in items:
        t0 = time.perf_counter()
        role = "target" if item == "target" else "draft"
        model = target if role == "target" else draft_choice.build(target, item)
        widths = TARGET_WIDTHS if role == "target" else DRAFT_WIDTHS
        lines: list[str] = []
        took = packages.prepare({role: model}, {role: widths}, n, report=lines.append)
        out[item] = {
            "built": sorted(int(k.partition("/")[2]) for k in took),
            "refused": {
                str(w): why for w in widths if (why := packages.failed(model, w, n)) is not None
            },
            "lines": lines,
            "code": {
                str(w): _code(p)
                for w in widths
                if (p := packages.path_of(packages.key(model, w, n))).exists()
            },
            "seconds": round(time.perf_counter() - t0, 1),
        }
    return out


def build_kernels(_items: list[str]) -> dict[str, Any]:
    from specviz.backend import kernels

    said: list[str] = []
    path = kernels.build(report=said.append)
    out = {"wanted": kernels.wanted(), "library": str(path or ""), "lines": said}
    if kernels.ready():
        out["ops"] = kernel_products()
    return out


def kernel_products() -> dict[str, Any]:
    """This capability's library, its ops on random products at every row count a decode
    call takes (1 to STREAMED_ROWS) and odd sizes: the largest error against float64
    (relative to the largest output), and whether every row equals the row alone, bit
    for bit (a verification's products for a position do not depend on the positions fed
    beside it)."""
    from specviz.backend import kernels

    g = torch.Generator().manual_seed(0)
    worst = {"linear": 0.0, "int8_linear": 0.0}
    alone = {"linear": True, "int8_linear": True}

    def record(name: str, x: torch.Tensor, weights: torch.Tensor, *args: torch.Tensor) -> None:
        op = getattr(torch.ops.specviz, name)
        got = op(x, *args)
        want = x.double() @ weights.T
        worst[name] = max(worst[name], float((got.double() - want).abs().max() / want.abs().max()))
        alone[name] &= torch.equal(got, torch.cat([op(row, *args) for row in x.split(1)]))

    for rows in range(1, kernels.STREAMED_ROWS + 1):
        for k, n in ((576, 103), (66, 7), (1536, 16), (8, 1)):
            x = torch.randn(rows, k, generator=g)
            w = torch.randn(n, k, generator=g)
            q = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
            scale = torch.rand(n, generator=g) + 0.5
            record("linear", x, w.double(), w)
            record("int8_linear", x, q.double() * scale[:, None], q, scale)
    return {"worst_relative_error": worst, "rows_alone": alone}


class _Tee(io.TextIOBase):
    """sys.stderr, also kept: what one variant's runs said."""

    def __init__(self, real: Any) -> None:
        self.real, self.kept = real, io.StringIO()

    def write(self, s: str) -> int:
        self.kept.write(s)
        return self.real.write(s)

    def flush(self) -> None:
        self.real.flush()


def _run(pair: Any, method: str) -> Any:
    from specviz.config import Settings
    from specviz.engine import Run

    run = Run(
        pair, PROMPT, Settings(greedy=True, gamma=GAMMA, max_new_tokens=TOKENS, method=method)
    )
    for _ in run:
        pass
    return run


def _calls(run: Any) -> dict[str, Any]:
    """Per model: its calls after the prefill, and how many of them ran a package (the
    compiled path's forwards count them; a call too wide for every package, or a model
    without packages, runs eager and is not counted). A draft that took the target's keys
    and values of the prompt made no prefill: every call of it counts."""
    from specviz.backend import packages
    from specviz.backend.static_lm import StaticLM
    from specviz.drafters.model import TargetCopyDrafter

    out = {}
    pair = run.pair
    took = isinstance(run.drafter, TargetCopyDrafter) and run.trace.rounds[0].stop == "prompt"
    for role, lm, widths in (
        ("target", run.target_lm, run._verify_widths()),
        ("draft", getattr(run.drafter, "lm", None), DRAFT_WIDTHS),
    ):
        if lm is None:
            continue
        model = pair.target if role == "target" else pair.draft
        fw = packages.packaged(model, widths, length()) if isinstance(lm, StaticLM) else None
        out[role] = {
            "static": isinstance(lm, StaticLM),
            "after_prefill": lm.calls - (role == "target" or not took),
            "took_prompt": role == "draft" and took,
            "packaged": fw.calls if fw is not None else 0,
            "eager": fw.eager_calls if fw is not None else None,
        }
    return out


def check_variant(variant: str) -> dict[str, Any]:
    pair = pair_with(target_model(), variant)  # a target of its own: its own call counts
    res: dict[str, Any] = {}
    ar = _run(pair, "ar").trace
    res["eager_ar"] = ar.token_ids
    res["min_gap"] = min(ar.logit_gaps)  # the target's nearest tie along the output
    spec = _run(pair, "spec")
    res["eager_spec"] = spec.trace.token_ids
    res["statuses"] = sorted({d.status for r in spec.trace.rounds for d in r.drafted})
    try:
        pair.with_compile("aoti")
        res["named_aoti"] = ""
    except ValueError as exc:  # what the compiled path says when it is named
        res["named_aoti"] = str(exc)
    auto = pair.with_compile("auto")
    res["auto_backend"] = auto.compile_backend
    if auto.compile_backend == "aoti":
        for method in ("spec", "ar"):
            run = _run(auto, method)
            res[f"packaged_{method}"] = run.trace.token_ids
            res[f"calls_{method}"] = _calls(run)
    return res


def identity(target: torch.nn.Module, trials: int = 8) -> dict[str, Any]:
    """The target's 1-position and (GAMMA + 1)-position packages from the same cache state
    (an eager prefill of a random prompt, as a run's), fed the same GAMMA + 1 tokens: the
    wide call's first row against the narrow call's, and its later rows against narrow calls
    made one token at a time (each on the keys the narrow calls wrote). Bitwise."""
    from transformers import StaticCache

    from specviz.backend import packages
    from specviz.backend.aoti import state_of

    n, k = length(), GAMMA + 1
    one, wide = packages.load(target, 1, n), packages.load(target, k, n)
    if one is None or wide is None:
        return {"error": "a package of the target is missing"}
    g = torch.Generator().manual_seed(0)
    first, later, eager = [], [], []
    with torch.inference_mode():
        for t in range(trials):
            prompt = torch.randint(0, VOCAB, (1, 3 + t), generator=g)
            toks = torch.randint(0, VOCAB, (1, k), generator=g)
            cache = StaticCache(config=target.config, max_cache_len=n)
            target(input_ids=prompt, past_key_values=cache, use_cache=True)
            a = [x.clone() for x in state_of(cache)]
            b = [x.clone() for x in state_of(cache)]
            got = wide(toks, *a)
            got = (got[0] if isinstance(got, (list, tuple)) else got).clone()
            for j in range(k):
                row = one(toks[:, j : j + 1], *b)
                row = (row[0] if isinstance(row, (list, tuple)) else row)[0].clone()
                (first if j == 0 else later).append((got[j] - row).abs())
            # the same two calls on the eager model, for comparison
            c1, ck = (StaticCache(config=target.config, max_cache_len=n) for _ in range(2))
            for c in (c1, ck):
                target(input_ids=prompt, past_key_values=c, use_cache=True)
            kw = {"use_cache": True}
            wide_e = target(input_ids=toks, past_key_values=ck, logits_to_keep=k, **kw).logits
            one_e = target(input_ids=toks[:, :1], past_key_values=c1, **kw).logits
            eager.append((wide_e[0, 0] - one_e[0, -1]).abs())
    first_d, later_d, eager_d = torch.stack(first), torch.stack(later), torch.stack(eager)
    return {
        "eager_first_row_max_abs": float(eager_d.max()),
        "eager_first_row_differing": float((eager_d > 0).float().mean()),
        "first_row_max_abs": float(first_d.max()),
        "first_row_differing": float((first_d > 0).float().mean()),
        "later_rows_max_abs": float(later_d.max()),
        "later_rows_differing": float((later_d > 0).float().mean()),
    }


def check(variants: list[str]) -> dict[str, Any]:
    from specviz.backend import kernels, packages
    from specviz.backend.offline import cpu_has_16bit

    out: dict[str, Any] = {
        "capability": packages.capability(),
        "kernels": kernels.tag(),
        "onednn_bf16": cpu_has_16bit("bf16"),
        "identity": identity(target_model()),
    }
    for variant in variants:
        tee = _Tee(sys.stderr)
        with contextlib.redirect_stderr(tee):
            res = check_variant(variant)
        res["said"] = [line for line in tee.kept.getvalue().splitlines() if line.strip()]
        out[variant] = res
    return out


def main(argv: list[str]) -> int:
    command, items = argv[0], argv[1:]
    t0 = time.perf_counter()
    out = {"build": build, "kernels": build_kernels, "check": check}[command](items)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
