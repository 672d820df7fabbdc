"""A recorded lesson: the seven steps of specviz.lesson carried out once and kept, so that a
link (``?lesson=ID``) plays them again for anyone with no model call.

What a step keeps: its title and sentences, its statement (the HTML the step said, computed
from its own numbers when it was recorded), the run it showed (an index into the lesson's
runs: step 3 usually shows step 2's run), the decision it opened (step 3's rejection), the
round it dealt (step 7), the views it drew that no trace holds (the sweep's and the checks'
charts as Plotly JSON, their tables as HTML the app rendered), and when it was measured. The
lesson keeps the machine that measured every speed figure (CPU model, threads, cores) and
when it was recorded; a run's own trace says where it ran and what else the machine ran
meanwhile, which its figures quote where recorded.

Plain data: JSON in, JSON out, every field checked on the way in (a ValueError with one line
for anything else). The store is specviz.sharestore's; no gradio, no torch.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from specviz.trace import Trace

FORMAT = 1
KIND = "lesson"
PARAM = "lesson"  # the query parameter of a recorded lesson's link
# What a step did, as its action's kind (specviz.lesson): a Run, opening a decision (step 3's
# rejection), the sweep, the distribution checks, a round dealt to play.
KINDS = ("run", "decision", "sweep", "check", "play")
# The views a step may keep beside its run: a chart (Plotly JSON) or HTML the app rendered.
FIGURES = ("sweep_plot", "check_plot")
HTML_VIEWS = ("sweep_table", "check_summary")
MAX_STEPS = 16  # a stored lesson with more steps is refused (a corrupt or foreign file)


def now() -> str:
    """This moment in UTC, to the minute: "2026-12-06 14:03 UTC"."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True)
class Machine:
    """Where the lesson's figures were measured: the CPU's model name (or the GPU's), the
    threads the models computed on, in words ("2 threads of 2 cores"), the platform."""

    cpu: str
    threads: str
    system: str = ""

    @classmethod
    def of(cls, cpu: str, threads: str) -> Machine:
        """This machine's platform, with the CPU and threads the caller read."""
        return cls(cpu, threads, platform.platform(terse=True))

    def words(self) -> str:
        """One line: "Intel(R) Xeon(R) CPU @ 2.20GHz, 2 threads of 2 cores"."""
        return f"{self.cpu}, {self.threads}" if self.threads else self.cpu

    def to_dict(self) -> dict[str, Any]:
        return {"cpu": self.cpu, "threads": self.threads, "system": self.system}

    @classmethod
    def from_dict(cls, d: Any) -> Machine:
        d = _mapping(d, "machine")
        return cls(
            _text(d.get("cpu"), "machine cpu"),
            _text(d.get("threads"), "machine threads"),
            _text(d.get("system", ""), "machine system"),
        )


def run_machine(trace: Trace | None) -> str:
    """Where a run was measured, as its trace recorded it (specviz.threads.Load): the CPU,
    its threads, and how busy the rest of the machine was; "" where not recorded."""
    m = trace.machine if trace is not None else {}
    if not m.get("cpu"):
        return ""
    words = f"{m['cpu']}, {m.get('threads') or '? threads'}"
    others = m.get("others_cores")
    if isinstance(others, (int, float)):
        words += f", the rest of the machine using {others:.2f} cores"
    return words


@dataclass(frozen=True)
class RecordedRun:
    """One run a step showed: its speculative trace, its baseline, when it was measured."""

    spec: Trace | None
    ar: Trace | None
    measured_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec.to_dict() if self.spec is not None else None,
            "ar": self.ar.to_dict() if self.ar is not None else None,
            "measured_at": self.measured_at,
        }

    @classmethod
    def from_dict(cls, d: Any) -> RecordedRun:
        d = _mapping(d, "run")
        spec = Trace.from_dict(d["spec"]) if d.get("spec") else None
        ar = Trace.from_dict(d["ar"]) if d.get("ar") else None
        if spec is None and ar is None:
            raise ValueError("a recorded run holds no trace")
        return cls(spec, ar, _text(d.get("measured_at"), "measured_at"))


@dataclass(frozen=True)
class RecordedStep:
    """One step as it was carried out."""

    title: str
    card: str  # the step's sentences (HTML written by specviz.lesson)
    said: str  # its statement (HTML from specviz.lesson_statements)
    kind: str  # one of KINDS
    measured_at: str
    run: int | None = None  # index into RecordedLesson.runs: the run the step showed
    focus: tuple[int, int] | None = None  # the decision it opened: (round index, position)
    deal: int | None = None  # the round index it dealt to play
    drawn: dict[str, str] = field(default_factory=dict)  # FIGURES as JSON, HTML_VIEWS as HTML

    @property
    def walked(self) -> bool:
        """Whether Step walks this step's rounds (a Run step with speculative rounds)."""
        return self.kind == "run" and self.run is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "card": self.card,
            "said": self.said,
            "kind": self.kind,
            "measured_at": self.measured_at,
            "run": self.run,
            "focus": list(self.focus) if self.focus is not None else None,
            "deal": self.deal,
            "drawn": dict(self.drawn),
        }

    @classmethod
    def from_dict(cls, d: Any, runs: int) -> RecordedStep:
        d = _mapping(d, "step")
        kind = _text(d.get("kind"), "step kind")
        if kind not in KINDS:
            raise ValueError(f"a step of kind {kind[:20]!r}")
        run = d.get("run")
        if run is not None and not 0 <= _int(run, "step run") < runs:
            raise ValueError(f"a step shows run {run}, of {runs}")
        focus = d.get("focus")
        if focus is not None:
            if not isinstance(focus, list) or len(focus) != 2:
                raise ValueError("a step's focus is not (round, position)")
            focus = (_int(focus[0], "focus round"), _int(focus[1], "focus position"))
        deal = d.get("deal")
        drawn = _mapping(d.get("drawn", {}), "drawn")
        kept = {}
        for name, value in drawn.items():
            if name not in FIGURES + HTML_VIEWS:
                raise ValueError(f"a step keeps an unknown view {str(name)[:20]!r}")
            kept[name] = _text(value, name)
        return cls(
            _text(d.get("title"), "title"),
            _text(d.get("card"), "card"),
            _text(d.get("said"), "said"),
            kind,
            _text(d.get("measured_at"), "measured_at"),
            None if run is None else int(run),
            focus,
            None if deal is None else _int(deal, "step deal"),
            kept,
        )


@dataclass(frozen=True)
class RecordedLesson:
    """The seven steps carried out on one pair and prompt, on one machine."""

    steps: list[RecordedStep]
    runs: list[RecordedRun]
    machine: Machine
    recorded_at: str
    pair: str
    prompt: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "kind": KIND,
            "steps": [s.to_dict() for s in self.steps],
            "runs": [r.to_dict() for r in self.runs],
            "machine": self.machine.to_dict(),
            "recorded_at": self.recorded_at,
            "pair": self.pair,
            "prompt": self.prompt,
        }

    @classmethod
    def from_dict(cls, body: Any) -> RecordedLesson:
        """A stored lesson, every field checked; ValueError with one line otherwise."""
        try:
            return cls._parse(body)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"not a recorded lesson: {line}") from None

    @classmethod
    def _parse(cls, body: Any) -> RecordedLesson:
        body = _mapping(body, "lesson")
        if body.get("kind") != KIND:
            raise ValueError("it is not a lesson (a shared run's link is ?run=)")
        if body.get("format") != FORMAT:
            raise ValueError(f"format {body.get('format')!r}, this server reads {FORMAT}")
        runs = [RecordedRun.from_dict(r) for r in _list(body.get("runs"), "runs")]
        steps = _list(body.get("steps"), "steps")
        if not 0 < len(steps) <= MAX_STEPS:
            raise ValueError(f"{len(steps)} steps")
        return cls(
            [RecordedStep.from_dict(s, len(runs)) for s in steps],
            runs,
            Machine.from_dict(body.get("machine")),
            _text(body.get("recorded_at"), "recorded_at"),
            _text(body.get("pair"), "pair"),
            _text(body.get("prompt"), "prompt"),
        )

    def run_of(self, step: RecordedStep) -> RecordedRun | None:
        return self.runs[step.run] if step.run is not None else None

    def measured(self, at: str, run: RecordedRun | None = None) -> str:
        """The words every speed figure carries: "measured <when> on <machine>", the machine
        as the run's traces recorded it where they did."""
        where = ""
        if run is not None:
            where = run_machine(run.ar) or run_machine(run.spec)
        return f"measured {at} on {where or self.machine.words()}"


def _mapping(x: Any, what: str) -> dict[str, Any]:
    if not isinstance(x, dict):
        raise ValueError(f"{what} is not a mapping")
    return x


def _list(x: Any, what: str) -> list[Any]:
    if not isinstance(x, list):
        raise ValueError(f"{what} is not a list")
    return x


def _text(x: Any, what: str) -> str:
    if not isinstance(x, str):
        raise ValueError(f"{what} is not text")
    return x


def _int(x: Any, what: str) -> int:
    if not isinstance(x, int) or isinstance(x, bool):
        raise ValueError(f"{what} is not a whole number")
    return x
