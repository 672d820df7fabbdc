"""Benchmarks: specviz side by side with transformers' generate() and assisted generation.

Everything runs in one process on one fixed prompt set (chat, summary, code from HumanEval,
copy-and-edit), greedy and at temperature 0.8 with top-p 0.95. Every reported figure is a
ratio of two contenders measured in the same process, medians over interleaved repetitions.

One module per concern; each imports only the ones above it:

- prompts: the fixed prompt set;
- options: what a run measures (modes, gammas, tokens, repetitions);
- contenders: the ways of generating on both sides, and how they are kept fair;
- lookup: the target calls of the two n-gram lookup rules, replayed from a greedy run;
- ratios: the ratios of one (prompt, mode), pooled over prompts;
- running: warm-up, interleaved repetitions, memory, load times, the machine;
- report: Markdown tables, Plotly figures, the files written by --out.
"""

from specviz.bench.contenders import (
    Contender,
    Sample,
    all_contenders,
    assistant_config,
    hf_run,
    specviz_run,
)
from specviz.bench.options import QUICK_GAMMAS, QUICK_TOKENS, BenchOptions
from specviz.bench.prompts import KINDS, BenchPrompt, prompt_set
from specviz.bench.ratios import COMPILED_ITEMS, tokens_per_round_ratio
from specviz.bench.report import ITEM_LABELS, bench_figures, format_report, write_outputs
from specviz.bench.running import BenchResult, run_bench, warm_up_contenders

__all__ = [
    "COMPILED_ITEMS",
    "ITEM_LABELS",
    "KINDS",
    "QUICK_GAMMAS",
    "QUICK_TOKENS",
    "BenchOptions",
    "BenchPrompt",
    "BenchResult",
    "Contender",
    "Sample",
    "all_contenders",
    "assistant_config",
    "bench_figures",
    "format_report",
    "hf_run",
    "prompt_set",
    "run_bench",
    "specviz_run",
    "tokens_per_round_ratio",
    "warm_up_contenders",
    "write_outputs",
]
