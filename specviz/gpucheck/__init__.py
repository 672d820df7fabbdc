"""The GPU check: the quantities that decide speculative decoding's speed on one CUDA GPU,
measured on Llama networks with random weights at realistic sizes, about 1B drafting for
about 8B, in bf16 (``scripts/gpu_check.sh``; ``--tiny`` runs the same stages on the CPU with
tiny networks, for the tests).

It needs only torch and transformers: the networks are built from ``LlamaConfig`` (nothing
is downloaded) and only the engine's own modules are imported. It reports
- c: a draft decode step / a target decode step, both eager, as the engine runs them;
- the verify call: a target forward over m = k + 1 = 1..9 new positions / one over 1;
- a tree's verify call: one forward over a binary tree of up to 64 nodes with the tree
  attention mask, against the causal call over as many positions;
- engine overhead per round: specviz's speculative run against transformers' assisted
  generation on the same pair, with the draft's weights equal to the target's, greedy, so
  every draft is accepted and both make the same model calls; each is set against the cost
  of those calls alone;
- eager against compiled: one decode step with transformers' StaticCache, eager and under
  ``torch.compile(mode="reduce-overhead")`` (CUDA graphs);
- the speedup Leviathan et al.'s formula projects for alpha 0.6, 0.8 and 0.9 at the measured c.

Every timing is a median over repetitions after a warm-up, with CUDA synchronised before
every clock read (``specviz.engine.clock``).

Weights: random (transformers' initialisation, seeded), except the final norm's weight,
which is zeroed. Every logit is then exactly 0 and greedy decoding always picks token 0
(argmax returns the first maximum), so a draft equal to the target is accepted bit for bit in
bf16 too. A forward's cost does not depend on the values of its weights.
"""

from specviz.gpucheck.plan import SCHEMA
from specviz.gpucheck.report import format_table, main, run_check

__all__ = ["SCHEMA", "format_table", "main", "run_check"]
