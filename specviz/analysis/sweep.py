"""The measured sweep: speculative against autoregressive decoding over gamma and temperature.

For every temperature, each repetition runs one autoregressive baseline and one
speculative run per gamma, all with the same seed, interleaved on one thread
(specviz.engine.interleave: always the run with the fewest tokens goes next, each on its own
clock), so that every gamma meets the same load as the baseline, stretch by stretch, on a
shared machine; the runs' order on a tie rotates from one repetition to the next. One
process, one warm-up before the first timed run. Both methods ignore EOS, as the benchmark
does, so every run produces exactly max_new_tokens tokens and the speeds compare like with
like.

One row per (gamma, temperature) cell, every figure measured from that cell's traces:

- alpha: mean overlap sum_x min(p, q) over the verified drafts of all its speculative runs;
- match_alpha: the same for sum_x p(x) q(x), exact match's expected acceptance;
- c: median over repetitions of specviz.metrics.cost_ratio (draft step / target step);
- tokens_per_call: new tokens / target calls, pooled over its speculative runs;
- measured_speedup: the baselines' seconds over the speculative runs' for the same tokens,
  pooled over the repetitions, and measured_low, measured_high the middle 90 % of its
  bootstrap over their stretches (specviz.metrics.pooled_speedup);
- expected_speedup: Leviathan's (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)) at the
  measured alpha (match_alpha when the settings verify by exact match) and c;
- predicted_speedup: the refined prediction (specviz.costs) at the cell's alpha (or
  match_alpha), from the step, verify and overhead costs measured once before the first
  cell (None when the plan skips that measurement).

The formula over the whole sweep (a chart's curve, the lesson's sentence) is read at
:func:`formula_point`, one computation for every reader.

``sweep`` yields a :class:`SweepEvent` for every run once its repetition's runs are done
(progress for the app; stop by no longer iterating); ``run_sweep`` collects the rows and
takes a progress callback and a stop flag. The models are only touched when a sweep runs:
importing this module loads no torch.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specviz import metrics
from specviz.config import DEFAULT_PROMPT, Settings
from specviz.trace import Trace, verified
from specviz.verify import verification_for

if TYPE_CHECKING:
    from specviz.costs import StepCosts
    from specviz.pair import ModelPair

# A round's measured cost (round_costs), in the baseline's ms per token after its first
ROUND_KEYS = (
    "steady_speedup",
    "steady_tokens_per_call",
    "round_steps",
    "draft_steps",
    "verify_steps",
    "other_steps",
    "first_share",
    "first_share_ar",
)
ROW_KEYS = (
    "gamma",
    "temperature",
    "alpha",
    "match_alpha",
    "c",
    "tokens_per_call",
    "measured_speedup",
    "measured_low",
    "measured_high",
    "expected_speedup",
    "predicted_speedup",
    *ROUND_KEYS,
)
MAX_VALUES = 16  # gammas or temperatures in one sweep
MAX_REPS = 50


@dataclass(frozen=True)
class SweepPlan:
    """What to measure: the cells, repetitions, prompt and every other setting."""

    gammas: tuple[int, ...]
    temperatures: tuple[float, ...]
    settings: Settings = field(default_factory=Settings)  # gamma/temperature overridden
    reps: int = 3
    prompt: str = DEFAULT_PROMPT
    raw: bool = False
    # Measure the step, verify and overhead costs first, for the refined prediction.
    costs: bool = True

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise a one-line ValueError on a plan the sweep cannot run."""
        _values("gammas", self.gammas)
        _values("temperatures", self.temperatures)
        for g in self.gammas:
            self.settings.with_(gamma=g)  # Settings checks the range
        for t in self.temperatures:
            self.settings.with_(temperature=t)
        if self.settings.adaptive_gamma:
            raise ValueError("the sweep measures constant gammas: turn adaptive gamma off")
        if self.settings.greedy and len(self.temperatures) > 1:
            raise ValueError("greedy decoding has no temperature: give one temperature or none")
        if isinstance(self.reps, bool) or not isinstance(self.reps, int):
            raise ValueError(f"reps must be an integer, got {self.reps!r}")
        if not 1 <= self.reps <= MAX_REPS:
            raise ValueError(f"reps must be in 1..{MAX_REPS}, got {self.reps}")
        if not self.prompt.strip():
            raise ValueError("prompt is empty")

    def cells(self) -> list[Settings]:
        """One speculative Settings per (gamma, temperature), temperatures outermost; the
        full trace, since alpha is read from its overlaps."""
        s = self.settings.with_(method="spec", trace_level="full")
        return [s.with_(gamma=g, temperature=t) for t in self.temperatures for g in self.gammas]

    @property
    def total_runs(self) -> int:
        """Runs in all: per temperature and repetition, one baseline and one per gamma."""
        return (len(self.gammas) + 1) * len(self.temperatures) * self.reps


def _values(name: str, values: tuple[Any, ...]) -> None:
    if not values:
        raise ValueError(f"{name} is empty: give at least one value")
    if len(values) > MAX_VALUES:
        raise ValueError(f"{name} has {len(values)} values; at most {MAX_VALUES}")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} repeats a value: {', '.join(map(str, values))}")


@dataclass
class SweepEvent:
    """One finished run: where the sweep stands, and the cell's row once it is complete."""

    done: int  # runs finished, warm-up excluded
    total: int
    gamma: int  # 0 for the baseline, which every gamma of its repetition is compared with
    temperature: float
    rep: int
    method: str  # "spec" | "ar"
    trace: Trace
    row: dict[str, float] | None = None  # set on the cell's last run
    costs: StepCosts | None = None  # measured before the first cell (plan.costs)


@dataclass
class SweepResult:
    """The rows measured so far (all of them unless stopped) and what produced them."""

    plan: SweepPlan
    rows: list[dict[str, float]] = field(default_factory=list)
    models: dict[str, Any] = field(default_factory=dict)
    stopped: bool = False
    costs: StepCosts | None = None

    def to_dict(self) -> dict[str, Any]:
        settings = self.plan.settings.to_dict()
        for k in ("gamma", "temperature", "method", "adaptive_gamma"):
            settings.pop(k)
        return {
            "rows": self.rows,
            "gammas": list(self.plan.gammas),
            "temperatures": list(self.plan.temperatures),
            "reps": self.plan.reps,
            "prompt": self.plan.prompt,
            "settings": settings,
            "models": self.models,
            "eos_ignored": True,
            "stopped": self.stopped,
            "costs": self.costs.to_dict() if self.costs is not None else None,
            "definitions": {
                k: metrics.DEFINITIONS[k] for k in ("alpha", "sum p q", "c", "speedup")
            },
        }


# --- running -------------------------------------------------------------------------------


def sweep(pair: ModelPair, plan: SweepPlan) -> Iterator[SweepEvent]:
    """Warm up once, then per temperature and repetition the baseline and every gamma's
    run interleaved; one event per finished run."""
    from specviz.costs import measure_costs
    from specviz.drafters import resolve as resolve_drafter
    from specviz.engine import Run, interleave, warm_up

    sv = pair.without_eos()
    cells = plan.cells()
    warm_up(sv, plan.prompt, cells[-1], raw=plan.raw)
    costs = None
    drafter = resolve_drafter(plan.settings, pair).drafter  # "auto": what it picks here
    if plan.costs and drafter == "model" and pair.draft is not None:
        costs = measure_costs(sv, cells[0], plan.gammas, plan.prompt)
    done = 0
    for t in plan.temperatures:
        row_cells = [s for s in cells if s.temperature == t]
        spec: dict[int, list[Trace]] = {s.gamma: [] for s in row_cells}
        ar: list[Trace] = []
        for rep in range(plan.reps):
            seed = plan.settings.seed + rep
            base = Run(sv, plan.prompt, row_cells[0].with_(method="ar", seed=seed), plan.raw)
            runs = [base] + [Run(sv, plan.prompt, s.with_(seed=seed), plan.raw) for s in row_cells]
            turn = rep % len(runs)  # who goes first on a tie rotates
            for _ in interleave(runs[turn:] + runs[:turn]):
                pass
            ar.append(base.trace)
            for s, run in zip(row_cells, runs[1:], strict=True):
                spec[s.gamma].append(run.trace)
            last = rep == plan.reps - 1
            for s, run in zip([None, *row_cells], runs, strict=True):
                done += 1
                row = cell_row(s, spec[s.gamma], ar, costs) if s is not None and last else None
                yield SweepEvent(
                    done,
                    plan.total_runs,
                    s.gamma if s is not None else 0,
                    t,
                    rep,
                    run.settings.method,
                    run.trace,
                    row,
                    costs,
                )


def run_sweep(
    pair: ModelPair,
    plan: SweepPlan,
    progress: Callable[[SweepEvent], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> SweepResult:
    """Run the whole sweep; ``stop()`` returning True ends it after the current run."""
    result = SweepResult(plan, models=pair.describe())
    for event in sweep(pair, plan):
        result.costs = event.costs
        if event.row is not None:
            result.rows.append(event.row)
        if progress is not None:
            progress(event)
        if stop is not None and stop() and event.done < event.total:
            result.stopped = True
            break
    return result


# --- one cell's row ------------------------------------------------------------------------


def pooled_alpha(spec: list[Trace], key: str = "overlap") -> float:
    """Mean overlap (key "overlap") or sum_x p q (key "match_prob") over the verified drafts
    of all the traces."""
    values = [getattr(d, key) for t in spec for d in verified(t)]
    return sum(values) / len(values) if values else 0.0


def pooled_tokens_per_call(spec: list[Trace]) -> float:
    """New tokens / target calls over all the speculative traces."""
    calls = sum(len(t.rounds) for t in spec)
    return sum(len(t.token_ids) for t in spec) / calls if calls else 0.0


def cell_row(
    s: Settings, spec: list[Trace], ar: list[Trace], costs: StepCosts | None = None
) -> dict[str, Any]:
    """The row of the cell with settings s from its speculative and AR traces, paired by
    repetition (the baseline of each repetition, shared by its gammas), and the refined
    prediction from costs (None without)."""
    alpha, match = pooled_alpha(spec), pooled_alpha(spec, "match_prob")
    expected = match if verification_for(s).measure[1] == "match_alpha" else alpha
    pairs = list(zip(ar, spec, strict=True))
    c = statistics.median(metrics.cost_ratio(sp, a) for a, sp in pairs)
    measured = metrics.pooled_speedup(pairs)
    value, low, high = (
        (measured.value, measured.low, measured.high) if measured is not None else (0.0,) * 3
    )
    return {
        "gamma": s.gamma,
        "temperature": 0.0 if s.is_greedy else float(s.temperature),
        "alpha": alpha,
        "match_alpha": match,
        "c": c,
        "tokens_per_call": pooled_tokens_per_call(spec),
        "measured_speedup": value,
        "measured_low": low,
        "measured_high": high,
        "expected_speedup": metrics.expected_speedup(expected, s.gamma, c),
        "predicted_speedup": costs.predicted(expected, s.gamma) if costs is not None else None,
        **round_costs(pairs),
    }


def round_costs(pairs: list[tuple[Trace, Trace]]) -> dict[str, float | None]:
    """Where the speculative runs' time went, pooled over (baseline, speculative) pairs,
    over the stretches both runs made (metrics.pooled_speedup's), in target steps: the
    baseline's ms per token after its first stretch (which also reads the prompt).

    - steady_speedup: the rounds after the first, the baseline's seconds for their tokens
      over theirs; it equals steady_tokens_per_call / round_steps;
    - steady_tokens_per_call: those rounds' tokens per round;
    - round_steps: ms per such round, and its parts: draft_steps (the draft's calls),
      verify_steps (the target's verify call and the decision) and other_steps (the rest
      of the round: warping, cache crops, bookkeeping);
    - first_share, first_share_ar: the first stretch's share of the speculative run's time
      and of the baseline's.

    Every value None where the runs made no round after the first."""
    none: dict[str, float | None] = dict.fromkeys(ROUND_KEYS)
    spec_s = ar_s = first_s = first_a = later_spec = later_ar = 0.0
    draft = verify = 0.0
    rounds = tokens = 0
    for ar, spec in pairs:
        ds, da, n = metrics.stretches(ar, spec)
        if not ds:
            continue
        spec_s, ar_s = spec_s + sum(ds), ar_s + sum(da)
        first_s, first_a = first_s + ds[0], first_a + da[0]
        later_spec, later_ar = later_spec + sum(ds[1:]), later_ar + sum(da[1:])
        shared = spec.rounds[1 : len(ds)]
        draft += sum(r.draft_ms for r in shared) / 1e3
        verify += sum(r.verify_ms for r in shared) / 1e3
        rounds += len(shared)
        tokens += n - int(spec.timeline[0][1])
    if not rounds or tokens <= 0 or later_spec <= 0 or later_ar <= 0:
        return none
    step = later_ar / tokens  # the baseline's seconds per token after its first stretch
    return {
        "steady_speedup": later_ar / later_spec,
        "steady_tokens_per_call": tokens / rounds,
        "round_steps": later_spec / rounds / step,
        "draft_steps": draft / rounds / step,
        "verify_steps": verify / rounds / step,
        "other_steps": (later_spec - draft - verify) / rounds / step,
        "first_share": first_s / spec_s,
        "first_share_ar": first_a / ar_s,
    }


# --- the formula over the sweep -------------------------------------------------------------


@dataclass(frozen=True)
class FormulaPoint:
    """The acceptance and c at which the sweep's readers draw and state Leviathan's formula:
    the medians over the cells, of the acceptance the verification's own measure names."""

    name: str  # "alpha", or "sum p q" under exact match
    accept: float
    c: float

    @property
    def best_gamma(self) -> int:
        return metrics.best_gamma(self.accept, self.c)

    def expected(self, gamma: int) -> float:
        return metrics.expected_speedup(self.accept, gamma, self.c)


def acceptance_key(verification: str) -> tuple[str, str]:
    """The acceptance a sweep's formula reads under this verification: its name and its
    row key ("alpha", or "sum p q" from match_alpha under exact match)."""
    measure = verification_for(Settings(verification=verification)).measure[1]
    return ("sum p q", "match_alpha") if measure == "match_alpha" else ("alpha", "alpha")


def formula_point(rows: list[dict[str, Any]], verification: str = "rejection") -> FormulaPoint:
    """The medians of the rows' acceptance (as acceptance_key names it) and c."""
    if not rows:
        raise ValueError("the sweep measured no cell")
    name, key = acceptance_key(verification)
    accept = statistics.median(r[key] for r in rows)
    return FormulaPoint(name, accept, statistics.median(r["c"] for r in rows))


# --- output --------------------------------------------------------------------------------


def format_table(rows: list[dict[str, float]]) -> str:
    """The rows as a plain-text table, one line per cell: the cell's figures, then a round
    after the first in target steps, its verify call, and the first round's share of the
    speculative time (analysis.sweep.round_costs; "-" where not recorded)."""
    head = ("gamma", "temp", "alpha", "sum pq", "c", "tok/call", "measured", "spread")
    # a round after the first in target steps, its verify call, and the first round's share
    tail = ("expected", "refined", "round", "verify", "1st")
    lines = ["  ".join(f"{h:>{9 if h == 'spread' else 8}}" for h in (*head, *tail))]
    for r in rows:
        spread = f"{r['measured_low']:.2f}-{r['measured_high']:.2f}"
        cells = (
            f"{r['gamma']:>8d}",
            f"{r['temperature']:>8.2f}",
            f"{r['alpha']:>8.3f}",
            f"{r['match_alpha']:>8.3f}",
            f"{r['c']:>8.3f}",
            f"{r['tokens_per_call']:>8.2f}",
            f"{r['measured_speedup']:>7.2f}x",
            f"{spread:>9}",
            f"{r['expected_speedup']:>7.2f}x",
            _times(r.get("predicted_speedup")),
            _steps(r.get("round_steps")),
            _steps(r.get("verify_steps")),
            f"{100 * r['first_share']:>7.0f}%" if r.get("first_share") is not None else f"{'-':>8}",
        )
        lines.append("  ".join(cells))
    return "\n".join(lines)


def _steps(x: float | None) -> str:
    return f"{x:>8.2f}" if x is not None else f"{'-':>8}"


def _times(x: float | None) -> str:
    return f"{x:>7.2f}x" if x is not None else f"{'-':>8}"


def csv_text(rows: list[dict[str, float]]) -> str:
    """The rows as CSV, the columns in ROW_KEYS order."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=ROW_KEYS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
