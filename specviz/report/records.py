"""One finished prompt of a report: its prompt, seed and traces, as one line of runs.jsonl.

A record holds the speculative trace and its autoregressive baseline (same prompt,
settings and seed, same process), and with --compare-with the second drafter's trace on the
same prompt and seed (its own baseline only where its target differs: another pair).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from specviz.report.prompts import Prompt
from specviz.trace import Trace


@dataclass
class Record:
    prompt: Prompt
    seed: int
    spec: Trace
    ar: Trace
    compare: Trace | None = None  # the second drafter's (or pair's) speculative trace
    compare_ar: Trace | None = None  # its baseline, where its target is another model
    wall_s: float = 0.0  # the prompt's whole time: every run of it, warm-up excluded

    @property
    def compare_baseline(self) -> Trace:
        return self.compare_ar if self.compare_ar is not None else self.ar

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.prompt.index,
            "prompt": self.prompt.to_dict(),
            "seed": self.seed,
            "wall_s": self.wall_s,
            "spec": self.spec.to_dict(),
            "ar": self.ar.to_dict(),
            "compare": None if self.compare is None else self.compare.to_dict(),
            "compare_ar": None if self.compare_ar is None else self.compare_ar.to_dict(),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Record:
        p = d["prompt"]
        prompt = Prompt(
            int(p["index"]), str(p["id"]), str(p["category"]), str(p["text"]), int(p["line"])
        )

        def trace(key: str) -> Trace | None:
            return None if d.get(key) is None else Trace.from_dict(d[key])

        spec, ar = trace("spec"), trace("ar")
        if spec is None or ar is None:
            raise ValueError("a record needs its speculative trace and its baseline")
        return cls(
            prompt,
            int(d["seed"]),
            spec,
            ar,
            trace("compare"),
            trace("compare_ar"),
            float(d.get("wall_s", 0.0)),
        )


def read_records(text: str, where: str = "runs.jsonl") -> list[Record]:
    """The records of a runs.jsonl text, by prompt index. A last line cut short (the process
    was killed while writing it) is dropped: that prompt runs again on resume."""
    lines = text.split("\n")
    out: dict[int, Record] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = Record.from_dict(json.loads(line))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            if n == len(lines):  # no newline after it: a line whose writing was cut short
                break
            raise ValueError(f"{where} line {n}: not a report record ({exc})") from None
        out[rec.prompt.index] = rec
    return [out[i] for i in sorted(out)]
