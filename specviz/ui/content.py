"""What the page says before anything runs: the presets and the help text.

No handlers and no model code: plain values that the layout and the tabs display.
"""

from __future__ import annotations

from typing import Any

from specviz import metrics
from specviz.config import DEFAULT_PROMPT
from specviz.ui.state import DEFAULTS

_ARTICLE = (
    "The city council voted on Tuesday to turn the old railway yard into a public park. "
    "The site has been empty for twenty years. Residents collected more than 4,000 "
    "signatures asking for green space, and the plan includes a playground, a community "
    "garden and a cycle path linking two neighbourhoods. Work is expected to start next "
    "spring and to cost about 3 million pounds, paid partly by a national grant."
)


_CODE = '''def running_max(values: list[int]) -> list[int]:
    """Return a list whose i-th item is the largest of values[0..i].

    >>> running_max([1, 3, 2, 5, 4])
    [1, 3, 3, 5, 5]
    """
'''


_EDIT = (
    "The colour of the sky depends on the scattering of sunlight. Short wavelengths "
    "scatter more than long ones, so the sky looks blue at noon and red at sunset. "
    "The colour of the sea follows the colour of the sky."
)


PRESETS: dict[str, dict[str, Any]] = {
    "chat": {
        "prompt": DEFAULT_PROMPT,
        "drafter": DEFAULTS.drafter,
        "gamma": DEFAULTS.gamma,
        "temperature": DEFAULTS.temperature,
        "top_p": DEFAULTS.top_p,
        "top_k": DEFAULTS.top_k,
        "greedy": DEFAULTS.greedy,
        "own_draft_temperature": False,
    },
    # Chen et al. sampled XSum with nucleus p = 0.8.
    "XSum-style summary": {
        "prompt": f"Summarise this article in one sentence.\n\n{_ARTICLE}",
        "drafter": "model",
        "gamma": 4,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 0,
        "greedy": False,
        "own_draft_temperature": False,
    },
    # Chen et al.'s HumanEval setting: temperature 0.8, nucleus p = 0.95.
    "HumanEval-style code completion": {
        "prompt": f"Complete this Python function. Reply with code only.\n\n{_CODE}",
        "drafter": "model",
        "gamma": 4,
        "temperature": 0.8,
        "top_p": 0.95,
        "top_k": 0,
        "greedy": False,
        "own_draft_temperature": False,
    },
    "copy-and-edit (n-gram drafter)": {
        "prompt": "Repeat this text exactly, but write 'color' instead of 'colour':\n\n" + _EDIT,
        "drafter": "ngram",
        "gamma": 8,
        "temperature": 0.0,
        "top_p": 1.0,
        "top_k": 0,
        "greedy": True,
        "own_draft_temperature": False,
    },
}


PRESET_FIELDS = (
    "prompt",
    "drafter",
    "gamma",
    "temperature",
    "top_p",
    "top_k",
    "greedy",
    "own_draft_temperature",
)


HOW_TO_READ = (
    """
**p** is the target model's distribution, **q** the draft's (Leviathan et al. 2022;
Chen et al. 2023). Each round the draft proposes gamma tokens; one target call scores them
all; draft *x* is accepted when a uniform draw *u* < min(1, p(x)/q(x)). At the first
rejection the target draws from the residual norm(max(0, p − q)); after a full accept it
draws a bonus token from p. Every round adds between 1 and gamma + 1 tokens.

- **Under a lossless verification the output distribution is unchanged.** With the
  rejection rule or exact match, whatever q is (try a draft temperature far from the
  target's), the text is distributed exactly as sampling from p; a poor draft only costs
  speed. Typical acceptance and top-k match are lossy and the deliberately wrong rules are
  wrong: beside a run that used one, the page says so and gives each decision's TV(out, p).
- **Bit-identical text is a narrower claim.** In greedy mode the two methods should agree
  token for token, and they do in fp32 here; in bf16 the different computation graphs give
  different numerics and a near-tie can flip, after which the texts differ (Chen et al.
  say as much). The greedy check shows where.
- **More arithmetic, not less.** Speculative decoding does extra work (draft steps and
  rejected tokens). It wins because decoding at batch size 1 is limited by memory
  bandwidth, so one target call over gamma + 1 positions costs about as much as one over a
  single position.
- **Latency at batch size 1.** Both papers measure the time per token of one request, and
  so does this page. The speedup is measured here: speculative and autoregressive decoding
  of the same prompt, settings and seed, in turn round by round on one thread after a
  warm-up (so both meet the same load), over the same number of tokens.
  The projection tab is a formula, not a measurement.

**Definitions.** """
    + "; ".join(f"*{k}* = {value}" for k, value in metrics.DEFINITIONS.items())
    + "."
)


def apply_preset(name: str) -> list[Any]:
    """Control values for a preset, in PRESET_FIELDS order."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return [PRESETS[name][f] for f in PRESET_FIELDS]
