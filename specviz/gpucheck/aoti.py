"""The GPU check's ahead-of-time stage: a decode step exported, packaged, loaded and run
with AOTInductor, as ZeroGPU runs the app's compiled path (specviz.backend.aoti,
specviz.ui.zerogpu), but with torch's own calls and no ``spaces``:

- export: ``torch.export`` of specviz.backend.aoti.AotiStep (the target's one-token call on a
  static cache given as tensors);
- package: ``torch._inductor.aoti_compile_and_package`` into a .pt2 file;
- load: ``torch._inductor.aoti_load_package`` (what a fresh process does);
- run: the loaded forward as the compiled path's compiler (specviz.backend.aoti.AotiForwards behind
  specviz.backend.StaticLM), its step time against the eager step, and its logits against
  the eager model's on the same cache.

It runs on CUDA only: on a CPU-only machine the stage is skipped with one line (packaging
even the tiny networks takes minutes on a few cores). :func:`aoti_skip` decides, from the
plan alone, so a CPU test covers the decision.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from specviz.backend.aoti import AotiForwards, AotiStep, export_step, state_of
from specviz.clock import clock
from specviz.gpucheck.measure import forward_ms, lm_ms
from specviz.gpucheck.plan import Plan, prompt_ids

CPU_SKIP = (
    "skipped: AOTInductor's stage runs on CUDA only (on a CPU-only machine packaging "
    "even the tiny networks takes minutes)"
)


def aoti_skip(plan: Plan, elapsed_s: float = 0.0) -> str | None:
    """Why the stage does not run under this plan (one line), or None when it runs."""
    if plan.device.type != "cuda":
        return CPU_SKIP
    if plan.compile == "off":
        return "skipped: --compile off"
    inductor = getattr(torch, "_inductor", None)
    if not all(hasattr(inductor, f) for f in ("aoti_compile_and_package", "aoti_load_package")):
        return f"skipped: torch {torch.__version__} has no aoti_compile_and_package"
    if elapsed_s > plan.budget_s:
        return f"skipped: out of time (budget {plan.budget_s:.0f} s)"
    return None


def cache_length(plan: Plan) -> int:
    """The static cache's positions: the prompt and a few steps, as a power of two."""
    n = 256
    while n < plan.prompt_tokens + 16:
        n *= 2
    return n


def aoti_stage(
    model: torch.nn.Module, plan: Plan, t_start: float, out_dir: Path | None = None
) -> dict:
    """Export, package, load and run the target's one-token step; a dict for the report
    ({"skipped": line} where aoti_skip says so)."""
    from specviz.backend import StaticLM

    skip = aoti_skip(plan, time.perf_counter() - t_start)
    if skip is not None:
        return {"skipped": skip}
    length = cache_length(plan)
    res: dict[str, Any] = {"model": "target", "width": 1, "cache": length}
    step = AotiStep(model, 1, length)
    t0 = clock(plan.device)
    exported = export_step(step, step.example_args(plan.device))
    res["export_s"] = clock(plan.device) - t0
    folder = Path(out_dir or tempfile.mkdtemp(prefix="specviz-aoti-"))
    t0 = clock(plan.device)
    path = torch._inductor.aoti_compile_and_package(
        exported, package_path=str(folder / "target-step.pt2")
    )
    res["package_s"] = clock(plan.device) - t0
    res["package_mb"] = Path(path).stat().st_size / 1e6
    t0 = clock(plan.device)
    loaded = torch._inductor.aoti_load_package(path)
    res["load_s"] = clock(plan.device) - t0
    vocab = model.config.vocab_size
    ids = prompt_ids(plan, vocab)
    forwards = AotiForwards()
    forwards.add(model, 1, length, loaded)
    lm = StaticLM(model, "target", vocab, forwards, (1,), length - 1)
    try:
        with torch.inference_mode():
            res["aoti_ms"] = lm_ms(lm, plan, ids)
            # the same next token through the loaded forward and the eager model
            lm.rollback(ids)
            got = lm.logits(ids + [1])[0].float()
            cache = lm.cache
            lm.rollback(ids)  # back to the prompt: the eager call writes the same place
            x = torch.tensor([[1]], device=plan.device)
            want = model(input_ids=x, past_key_values=cache, use_cache=True).logits[0, -1]
    finally:
        lm.close()
    res["compiled_calls"] = forwards.calls
    res["eager_ms"] = forward_ms(model, plan, ids, 1)
    res["speedup"] = res["eager_ms"] / res["aoti_ms"]
    res["max_abs_logit_diff"] = float((got - want.float()).abs().max())
    res["argmax_equal"] = bool(int(got.argmax()) == int(want.argmax()))
    res["state_tensors"] = len(state_of(cache))
    return res
