"""Statements the README and docs make about the code, read from the code that decides
them: every SPECVIZ_OFFLINE_DRAFT value, and the greedy identity's real case counts."""

from __future__ import annotations

import re
from pathlib import Path

from specviz.backend.draft_choice import VARIANTS
from tests import test_engine

ROOT = Path(__file__).resolve().parent.parent


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_the_readme_and_docs_list_every_offline_draft_value() -> None:
    row = next(ln for ln in read("README.md").splitlines() if ln.startswith("| `SPECVIZ_OFFLINE"))
    listed = re.findall(r"`([a-z0-9-]+)`", row.split("|")[3])
    assert listed == list(VARIANTS), row
    usage = re.search(r"SPECVIZ_OFFLINE_DRAFT=auto\|(\S+)", read("docs/offline-pair.md"))
    assert usage and usage.group(1).split("|") == list(VARIANTS)


def test_exactness_says_how_many_prompts_each_greedy_case_runs() -> None:
    cases = test_engine.GREEDY_CASES
    per_case = {
        drafter: [test_engine.greedy_prompts(v, g, drafter) for v, g in cases]
        for drafter in ("model", "ngram")
    }
    (n,) = {len(prompts) for runs in per_case.values() for prompts in runs}
    text = " ".join(read("docs/exactness.md").split())
    said = (
        f"{test_engine.GREEDY_TOKENS} new tokens, both drafters, the rejection rule at gamma "
        f"1, 3 and 8 and exact match at gamma 3 (`tests/test_engine.py`): {2 * len(cases)} "
        f"cases, each running {n} of the {len(test_engine.PROMPTS)} prompts "
        f"({2 * len(cases) * n} comparisons)"
    )
    assert said in text
    assert [(v, g) for v, g in cases] == [
        ("rejection", 1),
        ("rejection", 3),
        ("rejection", 8),
        ("exact-match", 3),
    ]
    runs = [prompts for drafter in per_case.values() for prompts in drafter]
    for prompt in test_engine.PROMPTS:  # every prompt is checked by at least two cases
        assert sum(prompt in prompts for prompts in runs) >= 2, prompt
    assert f"at least two of the {2 * len(cases)} cases" in text
    copy = test_engine.PROMPTS[test_engine.COPY]
    assert all(copy in prompts for prompts in per_case["ngram"])
