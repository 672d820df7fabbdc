"""The backend: what makes the models' calls fast on the machine at hand, behind the pair
(ModelPair.open_cache is its one door; the algorithm's modules import nothing from here).

- ``kernels`` and ``csrc/``: specviz's C++ ops (the int8 and float32 products of a decode
  call's few rows, the top-p cut, which it registers for specviz.sampling);
- ``fusion``: a Llama layer's products that read one input, stacked into one;
- ``offline``: the offline pair's conversion from GGUF and its int8 and int4 drafts;
- ``aoti``, ``packages``: decode calls compiled ahead of time and kept on disk;
- ``estimates``, ``compiler``, ``policy``, ``static_lm`` (gathered here): the compiled path;
- ``draft_choice``, ``prepare_worker``: the offline draft chosen by measurement, and the
  set-up step's second process.

The compiled path: a static KV cache and forwards compiled for a few fixed shapes.

``StaticLM`` is ``CachedLM``'s drop-in on this path (same ``logits``, ``rollback``,
``tokens``, ``calls``). Its cache is transformers' ``StaticCache``: key and value tensors of
a fixed length, written in place at the cache's position. Rolling back moves that position
(one ``fill_`` per layer) and copies nothing; what lies beyond it is overwritten by the next
call and never read before that, because every query attends only to keys at or before its
own position (the causal mask).

Shapes. A call that feeds m new tokens is padded on the right to the smallest of its
``widths`` that holds m (the draft: 1 and 2; the target: 1 and gamma + 1), so that a run has
two or three shapes per model and none changes from round to round. The padding positions
come after every real one, so the causal mask hides them from the real queries; their rows
of logits are dropped and the position moves back past them. The cache length is a power of
two of at least 256 positions. The prompt's first call (the prefill) runs eagerly on the
same cache, as transformers recommends.

Caches are handed back when a run finishes and reused by the next run of the same model and
length, so that their buffers keep one address (CUDA graphs replay on fixed addresses).

What a compiled call costs beyond its arithmetic, and what removes it (docs/compiled.md):

- dynamo's guards: checked on every call, nearly all on the model's weights and modules. Only
  the guards on the call's own tensors are kept (``_input_guards``); each model has a
  forward of its own, so no model can run another's graph;
- attention: SDPA is one opaque call per layer; the compiled forwards run a twin of the
  model (its own modules, the same weight tensors) with transformers' eager attention,
  which inductor fuses with its neighbours. The prefill keeps the model's SDPA;
- the weights' layout: on the CPU, inductor compiles with freezing, so each linear layer
  runs on weights packed once for the GEMM kernels. Each compiled shape holds its packed
  copy of the fp32 weights (the int8 draft's are used as they are);
- the GEMM kernels: on the CPU, inductor also autotunes each linear layer between ATen's
  kernel and its own C++ GEMM template for the layer's exact shape, which makes each
  shape's compilation longer.

Compilation happens once per process, model, width and cache length (``Compiler``), under
a lock, and is reported on stderr ("compiling ..., about N s"; the estimate is the last
time recorded for that shape, kept beside torch's compile cache). Inductor's caches live
under the specviz cache directory unless TORCHINDUCTOR_CACHE_DIR says otherwise, so a
restarted process reuses the generated code and compiles in a fraction of the first time.

Refused: models whose cache has sliding-window (or chunked) layers. transformers'
``StaticSlidingWindowLayer`` keeps only the window's last positions and rolls them over, so
no move of the position can restore what a rollback needs; those models run eager, with one
line on stderr (``check_compilable`` and ``SlidingWindowRefused`` in policy.py).

Exactness. The rule, the warps and the draws are the eager path's own code; only the
forward differs. Greedy speculative output equals greedy autoregressive output on this path
as on the eager one. Compiled logits may differ from eager logits in the last bits (fused
kernels sum in another order), so compiled and eager greedy outputs agree only as far as no
argmax is that close to a tie.
"""

from specviz.backend.compiler import Compiler, compile_cache_dir, compiler_for
from specviz.backend.policy import (
    BACKENDS,
    MIN_CACHE_LEN,
    SlidingWindowRefused,
    auto_backend,
    cache_len,
    check_compilable,
    sliding_window,
)
from specviz.backend.static_lm import StaticLM, acquire_cache, release_cache

__all__ = [
    "BACKENDS",
    "MIN_CACHE_LEN",
    "Compiler",
    "SlidingWindowRefused",
    "StaticLM",
    "acquire_cache",
    "auto_backend",
    "cache_len",
    "check_compilable",
    "compile_cache_dir",
    "compiler_for",
    "release_cache",
    "sliding_window",
]
