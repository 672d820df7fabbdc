"""The benchmark's report: the Markdown tables the terminal shows, the Plotly figures, and
the files written by --out (CSV, JSON, HTML, PNG where kaleido can render).

The table and the figures show the ratios by their (a)..(f) labels; the files carry their
keys (specviz.bench.ratios).
"""

from __future__ import annotations

import importlib.util
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markupsafe import Markup

from specviz import outfiles
from specviz.bench.options import SAMPLE_TEMPERATURE, SAMPLE_TOP_P
from specviz.bench.ratios import (
    ADAPTIVE_GAIN,
    AR_PARITY,
    ASSISTED_PARITY,
    AT_BEST_GAMMA,
    COMPILED_AR_GAIN,
    COMPILED_ASSISTED_PARITY,
    COMPILED_PATH_SPEEDUP,
    COMPILED_SPEC_GAIN,
    COMPILED_SPEEDUP,
    COMPILED_TRACE_COST,
    COMPILED_TRACE_OVERHEAD,
    DEFAULT_SCHEDULE_PARITY,
    LOOKUP_PARITY,
    OVERHEADS,
    ROUND_TOKENS_VS_THEORY,
    SPEEDUP,
    TRACE_COST,
    TRACE_OVERHEAD,
)
from specviz.bench.running import BenchResult
from specviz.views.palette import SERIES
from specviz.views.templating import render


@dataclass(frozen=True)
class RatioRow:
    """How the report shows one ratio."""

    tag: str  # its short tag, in the figure
    label: str  # its row label, in the table
    target: str = ""


ROWS = {  # in the table's order
    AR_PARITY: RatioRow("a", "(a) transformers AR / specviz AR", ">= 1.0"),
    ASSISTED_PARITY: RatioRow(
        "b", "(b) transformers assisted / specviz spec, constant gamma", ">= 1.0"
    ),
    DEFAULT_SCHEDULE_PARITY: RatioRow(
        "b-dynamic",
        "(b) transformers assisted, default schedule / best specviz schedule",
        ">= 1.0",
    ),
    LOOKUP_PARITY: RatioRow("b-ngram", "(b) transformers prompt lookup / specviz n-gram drafter"),
    SPEEDUP: RatioRow("c", "(c) speedup: specviz AR / specviz spec"),
    TRACE_COST: RatioRow(
        "d", "(d) trace cost: full - minimal time outside the model calls, over the run", "<= 5 %"
    ),
    TRACE_OVERHEAD: RatioRow("d-wall", "(d) full trace over minimal trace, wall time"),
    ROUND_TOKENS_VS_THEORY: RatioRow(
        "e", "(e) tokens per round: measured / Leviathan", "within 5 %"
    ),
    ADAPTIVE_GAIN: RatioRow("adaptive", "adaptive gamma: best constant gamma / adaptive"),
    COMPILED_SPEC_GAIN: RatioRow("g", "(g) eager spec / compiled spec", ">= 1.15"),
    COMPILED_AR_GAIN: RatioRow("g-ar", "(g) eager AR / compiled AR"),
    COMPILED_ASSISTED_PARITY: RatioRow(
        "g-b", "(g) transformers assisted / compiled spec, constant gamma", ">= 1.0"
    ),
    COMPILED_SPEEDUP: RatioRow("g-c", "(g) speedup: eager AR / compiled spec", ">= 1.7 (chat)"),
    COMPILED_PATH_SPEEDUP: RatioRow("g-cc", "(g) speedup on the compiled path: compiled AR / spec"),
    COMPILED_TRACE_COST: RatioRow(
        "g-d", "(g) compiled: trace cost (as (d)), over the run", "<= 5 %"
    ),
    COMPILED_TRACE_OVERHEAD: RatioRow(
        "g-d-wall", "(g) compiled: full trace over minimal trace, wall time"
    ),
}
ITEM_LABELS = {key: row.label for key, row in ROWS.items()}
ITEM_ORDER = list(ROWS)


# --- Markdown ------------------------------------------------------------------------------


def format_report(result: BenchResult) -> str:
    """Everything the terminal shows: machine, ratio table, contenders, loads."""
    m = result.machine
    o = result.options
    flags = ", ".join(m.get("cpu_flags") or []) or "none of note"
    head = (
        f"{m['pair']} pair on {m['device']} ({m['cpu']}, {m['cores']} cores, "
        f"{m.get('torch_threads')} torch threads; CPU flags: {flags}; torch "
        f"{m['torch']}, transformers {m['transformers']}); draft {m.get('draft')}; "
        f"{o['max_new_tokens']} new "
        f"tokens, {o['reps']} repetitions, medians; load average {m['loadavg_start']} at "
        f"the start, {m.get('loadavg_end')} at the end; {result.elapsed_s:.0f} s in all"
    )
    return "\n\n".join(
        [
            head,
            format_table(result),
            _agreement_line(result),
            calls_line(result.rows),
            format_contenders(result),
            format_loads(result),
        ]
    )


def _fmt(item: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value * 100:+.1f} %" if item in OVERHEADS else f"{value:.2f}"


def format_table(result: BenchResult) -> str:
    """The ratio table as Markdown: one row per item (and gamma), one column per mode."""
    modes = result.options["modes"]
    cells: dict[tuple[str, Any], dict[str, str]] = {}
    roofs: dict[tuple[str, Any], dict[str, str]] = {}
    for s in result.summary:
        cell = _fmt(s["item"], s["value"])
        if s["prompts"] > 1:
            cell += f" ({_fmt(s['item'], s['min'])} to {_fmt(s['item'], s['max'])})"
        cells.setdefault((s["item"], s["gamma"]), {})[s["mode"]] = cell
        if s.get("roofline") is not None:
            roofs.setdefault((s["item"], s["gamma"]), {})[s["mode"]] = f"{s['roofline']:.2f}"
    head = ["ratio", "gamma", *[_mode_title(m) for m in modes], "target"]
    head += ["roofline's prediction"]
    rows = []
    keys = sorted(cells, key=lambda k: (ITEM_ORDER.index(k[0]), k[1] or 0))
    for item, g in keys:
        vals = [cells[(item, g)].get(m, "n/a") for m in modes]
        gamma = "best" if item in AT_BEST_GAMMA else ("" if g is None else str(g))
        roof = " / ".join(roofs.get((item, g), {}).get(m, "") for m in modes).strip(" /")
        rows.append([ROWS[item].label, gamma, *vals, ROWS[item].target, roof])
    return outfiles.markdown_table(head, rows)


def _mode_title(mode: str) -> str:
    if mode == "greedy":
        return "greedy"
    return f"T={SAMPLE_TEMPERATURE}, top-p={SAMPLE_TOP_P}"


def contender_frame(result: BenchResult) -> Any:
    """Median ms/token and tokens per target call of each contender per prompt and mode."""
    import pandas as pd

    df = pd.DataFrame([{k: value for k, value in r.items() if k != "tokens"} for r in result.rows])
    if df.empty:
        return df
    agg = {"ms_per_token": "median", "tokens_per_forward": "median", "new_tokens": "median"}
    for col in ("acceptance_rate", "alpha_overlap", "mean_gamma", "same_as_ar"):
        if col in df:
            agg[col] = "mean" if col != "same_as_ar" else "min"
    return df.groupby(["mode", "prompt", "contender"], sort=False).agg(agg).reset_index()


def format_contenders(result: BenchResult) -> str:
    """ms/token per contender, the median per prompt averaged over the prompts."""
    df = contender_frame(result)
    if df.empty:
        return ""
    t = df.groupby(["contender", "mode"], sort=False)["ms_per_token"].mean().unstack("mode")
    modes = [m for m in result.options["modes"] if m in t.columns]
    head = ["contender", *(f"ms/token {_mode_title(m)}" for m in modes)]
    rows = ([name, *(f"{row[m]:.1f}" for m in modes)] for name, row in t.iterrows())
    return outfiles.markdown_table(head, rows)


def format_loads(result: BenchResult) -> str:
    """(f) as a few lines."""
    d = result.loads
    parts = []
    if "cold_process_load_s" in d:
        parts.append(
            f"cold load (GGUF conversion into an empty cache, fresh process): "
            f"{d['cold_process_load_s']:.1f} s, peak RSS {d['cold_peak_rss_mib']:.0f} MiB"
        )
    if "warm_process_load_s" in d:
        parts.append(
            f"warm load (converted cache, fresh process): {d['warm_process_load_s']:.1f} s "
            f"(target {d['warm_target_load_s']:.1f} s, draft derivation "
            f"{d['warm_draft_load_s']:.1f} s), peak RSS {d['warm_peak_rss_mib']:.0f} MiB"
        )
    if "compile" in d:
        parts.append(_compile_line(d["compile"]))
    if "first_token_after_restart" in d:
        parts.append(_first_token_line(d["first_token_after_restart"]))
    roof = result.machine.get("roofline")
    if roof:
        draft = roof["draft_floor_ms"]
        parts.append(
            f"roofline: memory bandwidth {roof['bandwidth_gb_s']:.1f} GB/s; a target step reads "
            f"{roof['target_bytes'] / 1e6:.0f} MB (floor {roof['target_floor_ms']:.1f} ms)"
            + ("" if draft is None else f", a draft step {roof['draft_bytes'] / 1e6:.0f} MB "
               f"(floor {draft:.1f} ms)")
        )  # fmt: skip
    parts.append(f"peak RSS of the whole benchmark process: {d['peak_rss_mib']:.0f} MiB")
    if "cuda_peak_allocated_mib" in d:
        parts.append(f"peak CUDA memory allocated: {d['cuda_peak_allocated_mib']:.0f} MiB")
    return "\n".join(f"- {p}" for p in parts)


def _first_token_line(f: dict[str, Any]) -> str:
    if "error" in f:
        return f"first token after a restart: failed ({f['error']})"
    floor = f.get("floor_ms")
    return (
        f"first token after a restart ({f['compiled']} path, fresh process, caches filled): "
        f"{f['first_token_s']:.1f} s, of which loading {f['load_s']:.1f} s"
        + ("" if floor is None else f"; the roofline's floor for it: {floor:.1f} ms")
    )


def _compile_line(entry: dict[str, Any]) -> str:
    if entry.get("backend") == "aoti":  # packages built before the run (or in its warm-up)
        return (
            "compiled ahead of time (aoti): packages loaded from the specviz cache, nothing "
            "compiled at run time (a missing shape is built in the warm-up, on stderr)"
        )
    restart = entry.get("restart_s")
    again = "not measured" if restart is None else f"{restart:.1f} s"
    if "restart_error" in entry:
        again = f"failed ({entry['restart_error']})"
    empty = " (its compile cache was empty)" if entry.get("cache_was_empty") else ""
    return (
        f"compiling ({entry['backend']}, {entry['shapes']} shapes): "
        f"{entry['first_s']:.1f} s in this process{empty}; "
        f"a restarted process with the compile cache: {again}"
    )


def _agreement_line(result: BenchResult) -> str:
    """Greedy: did every run of every contender reproduce the autoregressive output?"""
    greedy = [r for r in result.rows if r["mode"] == "greedy"]
    if not greedy:
        return "greedy outputs: not measured"
    differ = sorted({r["contender"] for r in greedy if not r.get("same_as_ar", True)})
    if not differ:
        return f"greedy outputs: all {len(greedy)} runs identical to the autoregressive output"
    return "greedy outputs differ from the autoregressive output for: " + ", ".join(differ)


# The (b) ratios' pairs of contenders, by their types: specviz's, transformers', and a label
# ("{g}" is the gamma of specviz's contender, which transformers' shares where it has one).
CALL_PAIRS = (
    ("spec", "assisted", "gamma {g}"),
    ("confident", "default", "default schedule, specviz confident g={g}"),
    ("ngram", "lookup", "n-gram g={g}"),
)


def calls_line(rows: list[dict[str, Any]]) -> str:
    """Greedy: each (b) pair's target calls per prompt, specviz / transformers (medians over
    the repetitions). Where they are equal, the ratio compares two engines doing the same
    work, and can differ from 1 only by what lies outside the model calls, and by noise."""
    greedy = [r for r in rows if r["mode"] == "greedy"]
    prompts = list(dict.fromkeys(r["prompt"] for r in greedy))
    calls: dict[tuple[str, str, Any, str], list[int]] = {}
    for r in greedy:
        calls.setdefault((r["side"], r["type"], r["gamma"], r["prompt"]), []).append(
            r["target_forwards"]
        )
    parts = []
    for ours, theirs, label in CALL_PAIRS:
        gammas = sorted({k[2] for k in calls if k[:2] == ("specviz", ours)})
        for g in gammas:
            their_g = None if theirs == "default" else g
            pairs = [
                (
                    calls.get(("specviz", ours, g, p)),
                    calls.get(("transformers", theirs, their_g, p)),
                )
                for p in prompts
            ]
            cells = [f"{_calls(a)}/{_calls(b)}" if a and b else "n/a" for a, b in pairs]
            if any(a and b for a, b in pairs):
                parts.append(f"{label.format(g=_calls([g]))}: {', '.join(cells)}")
    if not parts:
        return "greedy target calls: no pair of contenders to compare"
    return (
        f"greedy target calls, specviz/transformers per prompt ({', '.join(prompts)}): "
        + "; ".join(parts)
    )


def _calls(values: list[Any]) -> str:
    m = statistics.median(values)
    return str(int(m)) if float(m).is_integer() else f"{m:.1f}"


# --- figures -------------------------------------------------------------------------------


def bench_figures(result: BenchResult) -> list[Any]:
    """Plotly figures: ms/token per contender and prompt, and the ratios per prompt; one
    colour per prompt in the first and per mode in the second, from the palette's SERIES."""
    return [_ms_per_token_figure(result), _ratios_figure(result)]


def _ms_per_token_figure(result: BenchResult) -> Any:
    """Grouped bars, one subplot per mode: median ms/token of each contender per prompt."""
    from specviz.views.figures import add_bar_group
    from specviz.views.style import grid

    df = contender_frame(result)
    modes = result.options["modes"]
    fig = grid(rows=len(modes), cols=1, subplot_titles=[_mode_title(m) for m in modes])
    for i, mode in enumerate(modes, start=1):
        sub = df[df["mode"] == mode]
        groups = [(prompt, sub[sub["prompt"] == prompt]) for prompt in sub["prompt"].unique()]
        add_bar_group(fig, i, [(p, s["contender"], s["ms_per_token"]) for p, s in groups])
        fig.axis("y", i, title={"text": "ms per token (median)"})
    title = {"text": "ms per token by contender"}
    return fig.figure(
        {"barmode": "group", "title": title, "height": 420 * len(modes), "colorway": SERIES}
    )


def _ratios_figure(result: BenchResult) -> Any:
    """One marker per prompt and ratio, one series per mode; 1 is parity."""
    import plotly.graph_objects as go

    from specviz.views.style import figure

    fig = figure()
    for mode in result.options["modes"]:
        rs = [r for r in result.ratios if r["mode"] == mode and r["value"] is not None]
        fig.add_trace(
            go.Scatter(
                x=[_ratio_label(r) for r in rs],
                y=[r["value"] + (1.0 if r["item"] in OVERHEADS else 0.0) for r in rs],
                mode="markers",
                name=_mode_title(mode),
                text=[r["prompt"] for r in rs],
                hovertemplate="%{x}<br>%{text}: %{y:.3f}<extra></extra>",
            )
        )
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_layout(
        title="Ratios per prompt (1 = parity; (d) shown as full/minimal)",
        yaxis_title="ratio",
        height=520,
        colorway=SERIES,
    )
    return fig


def _ratio_label(r: dict[str, Any]) -> str:
    g = "" if r["gamma"] is None else f" g={r['gamma']}"
    if r["item"] in AT_BEST_GAMMA:
        g = " best g"
    return f"({ROWS[r['item']].tag}){g}"


# --- files ---------------------------------------------------------------------------------


def write_outputs(result: BenchResult, out: Path) -> list[Path]:
    """CSV of every run and of the ratios, JSON, an HTML report, and PNGs where possible."""
    out.mkdir(parents=True, exist_ok=True)
    m = result.machine
    where = {"cpu": m["cpu"], "draft_variant": m.get("draft_variant")}
    runs = [{k: value for k, value in r.items() if k != "tokens"} | where for r in result.rows]
    paths = [
        outfiles.write_csv(out / "runs.csv", runs),
        outfiles.write_csv(out / "ratios.csv", result.ratios),
        outfiles.write_csv(out / "summary.csv", result.summary),
        outfiles.write_json(out / "bench.json", result.to_dict()),
    ]
    figs = bench_figures(result)
    body = "".join(
        f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs)
    )
    page = render("bench_report.html.j2", table=format_report(result), figures=Markup(body))
    paths.append(outfiles.write_text(out / "report.html", page))
    machine = [{"key": k, "value": _cell(value)} for k, value in m.items()]
    paths.append(outfiles.write_csv(out / "machine.csv", machine))
    paths += write_pngs(figs, out)
    return paths


def write_pngs(figs: list[Any], out: Path) -> list[Path]:
    """PNG copies of the figures where kaleido (and a Chrome for kaleido 1.x) can render:
    all of them, rendered in one browser session, or none (each is written beside its name
    and renamed into place once every one has rendered)."""
    if not figs or importlib.util.find_spec("kaleido") is None:
        return []
    import plotly.io as pio

    paths = [out / f"report-{i}.png" for i in range(1, len(figs) + 1)]
    parts = [p.with_name(f".{p.stem}.part.png") for p in paths]
    try:
        pio.write_images(figs, parts, width=1200, height=[fig.layout.height or 600 for fig in figs])
        for part, p in zip(parts, paths, strict=True):
            os.replace(part, p)
    except Exception:  # no usable Chrome: the HTML report stands alone
        return []
    finally:
        for part in parts:
            part.unlink(missing_ok=True)
    return paths


def _cell(value: Any) -> Any:
    """A machine field for a CSV cell: lists comma-joined."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value
