"""Where a round's time goes: draft, verify and the rest, per round and over the run, from a
trace's timings alone (no model call, no gradio import).

A round's wall time runs from the end of the previous round (the start of the generation
for the first round) to its own end: the difference of consecutive ``Round.t_s``. Its
``draft_ms`` and ``verify_ms`` are measured inside it; the rest is the wall time minus both,
clamped at 0: drawing, the verification's decision, rolling the caches back and recording the
round (and, in Step mode, the pause until the next press). The run's totals are measured
against its wall time, ``stats.wall_s`` (start to last token; while a run is still going,
the last round's ``t_s``).

:func:`breakdown_spec` is a plain plotly JSON spec, cheap enough to rebuild every round of a
live run; :func:`breakdown_figure` is the same as a figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from specviz.trace import Trace, round_number
from specviz.views.figures import LEGEND
from specviz.views.palette import COLORS, GRID, ZERO_LINE
from specviz.views.style import figure

PARTS = ("draft", "verify", "rest")
COLOR = {"draft": COLORS["q"], "verify": COLORS["p"], "rest": COLORS["rest"]}  # draft: q's
NAMES = {
    "draft": "draft (proposing)",
    "verify": "verify (one target call)",
    "rest": "the rest (drawing, the decision, bookkeeping)",
}


@dataclass(frozen=True)
class RoundTime:
    """One round's time in ms, split three ways; number counts rounds from 1."""

    number: int
    draft_ms: float
    verify_ms: float
    rest_ms: float

    @property
    def parts(self) -> dict[str, float]:
        return {"draft": self.draft_ms, "verify": self.verify_ms, "rest": self.rest_ms}


def round_times(trace: Trace) -> list[RoundTime]:
    """Each round's draft, verify and rest ms (the rest clamped at 0)."""
    out, previous = [], 0.0
    for r in trace.rounds:
        wall = (r.t_s - previous) * 1e3
        rest = max(0.0, wall - r.draft_ms - r.verify_ms)
        out.append(RoundTime(round_number(r.index), r.draft_ms, r.verify_ms, rest))
        previous = r.t_s
    return out


def wall_ms(trace: Trace) -> float:
    """The run's wall time in ms: stats.wall_s once it has ended, else the last round's t_s."""
    if trace.stats.wall_s > 0:
        return trace.stats.wall_s * 1e3
    return trace.rounds[-1].t_s * 1e3 if trace.rounds else 0.0


def totals(trace: Trace) -> dict[str, tuple[float, float]]:
    """The run's draft, verify and rest: (ms, share of the wall time); the rest is the wall
    time minus draft and verify, clamped at 0."""
    wall = wall_ms(trace)
    draft = sum(r.draft_ms for r in trace.rounds)
    verify = sum(r.verify_ms for r in trace.rounds)
    ms = {"draft": draft, "verify": verify, "rest": max(0.0, wall - draft - verify)}
    return {k: (value, value / wall if wall > 0 else 0.0) for k, value in ms.items()}


def totals_rows(trace: Trace) -> list[tuple[str, str]]:
    """The totals as (label, "ms · share") rows, and the wall time."""
    rows = [(NAMES[k], f"{ms:.0f} ms · {share:.0%}") for k, (ms, share) in totals(trace).items()]
    return rows + [("wall time", f"{wall_ms(trace):.0f} ms")]


def _title(trace: Trace) -> str:
    if not trace.rounds:
        return "where a round's time goes: no speculative rounds"
    shares = " · ".join(f"{k} {share:.0%}" for k, (_, share) in totals(trace).items())
    return f"where a round's time goes ({shares} of {wall_ms(trace) / 1e3:.2f} s)"


def breakdown_spec(trace: Trace) -> dict[str, Any]:
    """A stacked bar per round of draft, verify and rest ms, as a plain plotly JSON spec."""
    times = round_times(trace)
    x = [t.number for t in times]
    data = [
        {
            "type": "bar",
            "name": NAMES[part],
            "x": x,
            "y": [t.parts[part] for t in times],
            "marker": {"color": COLOR[part]},
            "hovertemplate": f"round %{{x}}: {part} %{{y:.1f}} ms<extra></extra>",
        }
        for part in PARTS
    ]
    grid = {"gridcolor": GRID, "zerolinecolor": ZERO_LINE}
    layout = {
        "title": {"text": _title(trace)},
        "barmode": "stack",
        "height": 330,
        "margin": {"l": 50, "r": 20, "t": 50, "b": 40},
        "legend": {**LEGEND, "traceorder": "normal"},
        "plot_bgcolor": "white",
        "xaxis": {"title": {"text": "round"}, **grid},
        "yaxis": {"title": {"text": "ms"}, **grid},
    }
    return {"data": data, "layout": layout}


def breakdown_figure(trace: Trace) -> go.Figure:
    """Draft, verify and rest ms per round, stacked, with the run's shares in the title."""
    return figure(breakdown_spec(trace))


# --- the roofline: each call against the memory's floor -----------------------------------


def mean_call_ms(trace: Trace) -> tuple[float | None, float | None, int]:
    """(mean verify call ms, mean draft call ms, mean context of the verify calls) over the
    run's rounds; a round makes one target call and one draft call per drafted token (per
    depth in a tree). None where the run made no such call."""
    rounds = trace.rounds
    if not rounds:
        return None, None, 0
    verify = sum(r.verify_ms for r in rounds) / len(rounds)
    calls = sum(len(r.tree) if r.tree else len(r.drafted) for r in rounds)
    draft = sum(r.draft_ms for r in rounds) / calls if calls else None
    context = len(trace.prompt_ids) + sum(r.start for r in rounds) // len(rounds)
    return verify, draft, context


def roofline_rows(
    trace: Trace,
    gb_s: float,
    target: tuple[int, int] | None,
    draft: tuple[int, int] | None,
) -> list[tuple[str, str]]:
    """The Speed tab's roofline: the memory's bandwidth, and for the target's verify calls
    and the draft's steps their floor (bytes read / bandwidth) and measured / floor.
    target and draft: (weight bytes, KV bytes per position), None when not known."""
    verify, step, context = mean_call_ms(trace)
    rows = [("memory bandwidth (measured once)", f"{gb_s:.1f} GB/s")]
    for label, ms, sizes in (
        ("target's verify call", verify, target),
        ("draft's step", step, draft),
    ):
        if ms is None or sizes is None:
            continue
        nbytes = sizes[0] + sizes[1] * context
        floor = nbytes / (gb_s * 1e9) * 1e3
        rows.append(
            (
                f"{label}: floor (reads {_size(nbytes)})",
                f"{floor:.1f} ms · measured {ms:.1f} ms = {ms / floor:.2f}x the floor",
            )
        )
    return rows


def _size(nbytes: int) -> str:
    """Bytes as MB (kB below 1 MB)."""
    return f"{nbytes / 1e6:.0f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.1f} kB"


def roofline_device(trace: Trace) -> str | None:
    """The device whose bandwidth the trace's roofline rows read: its target's, when this
    process has loaded that model (specviz.costs remembers it); else None."""
    from specviz import costs

    target = costs.remembered(str(trace.models.get("target", "")))
    return None if target is None or not trace.rounds else target[0]


def trace_roofline_rows(trace: Trace, measure: bool = False) -> list[tuple[str, str]]:
    """roofline_rows for a trace whose models this process has loaded (specviz.costs
    remembers their bytes per step), at the bandwidth of their device: measured on the
    first call with measure (about a second, once per process; a finished run's frame asks
    for it), else only if already known. [] when either is missing."""
    from specviz import costs

    target = costs.remembered(str(trace.models.get("target", "")))
    if target is None or not trace.rounds:
        return []
    device = target[0]
    bw = costs.known_bandwidth(device)
    from specviz.config import on_zero_gpu

    # On ZeroGPU this process has no GPU of its own: the start-up call measures it there.
    if bw is None and measure and not (device == "cuda" and on_zero_gpu()):
        try:
            bw = costs.bandwidth(device)
        except (RuntimeError, ValueError):  # no such device in this process (ZeroGPU)
            return []
    if bw is None:
        return []
    draft = costs.remembered(str(trace.models.get("draft", "")))
    return roofline_rows(trace, bw.gb_s, target[1:], draft[1:] if draft else None)
