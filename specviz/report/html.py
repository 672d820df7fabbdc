"""report.html: one self-contained file (plotly.js inline, no network) with the report's
tables and figures, the costliest decisions with their p/q bars and links to their traces,
and every prompt's run. All text from prompts and tokens is HTML-escaped."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from markupsafe import Markup

from specviz import metrics
from specviz.report import figures
from specviz.report.records import Record
from specviz.report.stats import DEFINITIONS, OVERALL, trace_file
from specviz.views.markup import esc
from specviz.views.palette import show_whitespace
from specviz.views.templating import render

OPEN_TRACE = (
    "Each link opens a run's JSON trace. To inspect it decision by decision, start the app "
    "(<code>./scripts/run.sh</code> or <code>python app.py</code>), open the <b>Data</b> "
    "tab and drop the file onto <b>import a JSON trace</b>: it replays with no model, and "
    "a click on a token opens its decision."
)

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px;
       color: #1f2328; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; font-size: 0.9em; }
th, td { border: 1px solid #d0d7de; padding: 0.25em 0.55em; text-align: right; }
th { background: #f6f8fa; } td.l, th.l { text-align: left; }
code, .tok { font-family: ui-monospace, monospace; background: #f6f8fa; padding: 0 0.2em; }
.costly { border-top: 1px solid #d0d7de; padding-top: 0.6em; margin-top: 0.6em; }
.none { color: #57606a; } .grid { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }
dt { font-weight: 600; } dd { margin: 0 0 0.4em 1.2em; }
"""


def _num(x: Any, fmt: str = ".3f", suffix: str = "") -> str:
    return "–" if x is None else f"{x:{fmt}}{suffix}"


def _fig(fig: go.Figure) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, config={"responsive": True})


def _tok(text: str) -> str:
    return f"<span class='tok'>{esc(show_whitespace(text))}</span>"


def _interval(r: dict[str, Any], fmt: str = "+.3f") -> str:
    if r.get("mean") is None:
        return "<span class='none'>no prompts</span>"
    text = f"{r['mean']:{fmt}} [{r['lo']:{fmt}}, {r['hi']:{fmt}}]"
    if r["verdict"] == "no measured difference":
        return f"{text}: <b>no measured difference</b>"
    return f"{text}: {esc(r['verdict'])}"


def overview_table(report: dict[str, Any]) -> str:
    det, tim = report["deterministic"], report["timing"]
    head = (
        "<tr><th class='l'>category</th><th>prompts</th><th>new tokens</th><th>acceptance "
        "[95% Wilson, drafts independent] [95% bootstrap over prompts]</th><th>{m}</th>"
        "<th>tokens / call</th><th>speedup</th><th>predicted</th>"
        "<th>c</th><th>best gamma</th></tr>"
    )
    rows = []
    names = [*det["categories"], OVERALL]
    measure = det[OVERALL]["measure"]
    for name in names:
        d = det["categories"].get(name) if name != OVERALL else det[OVERALL]
        t = tim["categories"].get(name) if name != OVERALL else tim[OVERALL]
        lo, hi = d["acceptance_interval"]
        boot = d.get("acceptance_interval_prompts")  # absent from a report written before it
        by_prompt = "" if not boot else f" [{boot[0]:.3f}, {boot[1]:.3f}]"
        rows.append(
            f"<tr><td class='l'>{'<b>overall</b>' if name == OVERALL else esc(name)}</td>"
            f"<td>{d['prompts']}</td><td>{d['new_tokens']}</td>"
            f"<td>{_num(d['acceptance'])} [{lo:.3f}, {hi:.3f}]{by_prompt}</td>"
            f"<td>{_num(d['expected_acceptance'])}</td><td>{_num(d['tokens_per_call'], '.2f')}</td>"
            f"<td>{_num(t['speedup'], '.2f', 'x')}</td>"
            f"<td>{_num(t['predicted_speedup'], '.2f', 'x')}</td><td>{_num(t['c'], '.2f')}</td>"
            f"<td>{_num(t['best_gamma'], 'd')}</td></tr>"
        )
    return f"<table>{head.format(m=esc(measure))}{''.join(rows)}</table>"


def costliest_html(report: dict[str, Any]) -> str:
    entries = report["deterministic"]["costliest"]
    if not entries:
        return "<p class='none'>No rejected draft had p(x) &gt; 0 (greedy runs never do).</p>"
    parts = []
    for n, e in enumerate(entries, start=1):
        replaced = (
            f"replaced by {_tok(e['replaced_by'])} ({esc(e['replaced_status'])})"
            if e["replaced_by"] is not None
            else "no token added"
        )
        rej = e["rejection_prob"]
        u = "" if e["u"] is None else f", u = {e['u']:.4f}"
        parts.append(
            f"<div class='costly' id='costly-{n}'><b>{n}.</b> {_tok(e['token'])} "
            f"({esc(e['kind'])}) in <a href='#run-{e['index']}'>{esc(e['id'])}</a> "
            f"({esc(e['category'])}), round {e['round']}, draft position "
            f"{e['draft_position']}, output position {e['output_position']}: "
            f"p(x) = {e['p']:.4f} given away, q(x) = {e['q']:.4f}, accept probability "
            f"{e['accept_prob']:.4f}{u}; "
            f"P(reject here) = {_num(rej, '.4f')}; {replaced}. After "
            f"{_tok(e.get('context', ''))}. Trace: <a href='{esc(e['trace'])}'>"
            f"{esc(e['trace'])}</a>{_fig(figures.decision_figure(e))}</div>"
        )
    return "".join(parts)


def compare_html(report: dict[str, Any]) -> str:
    cmp, tcmp = report["deterministic"].get("compare"), report["timing"].get("compare")
    if not cmp:
        return ""
    who = esc(report["deterministic"].get("compare_with") or "")
    rows = []
    for name in [*cmp["categories"], OVERALL]:
        d = cmp[OVERALL] if name == OVERALL else cmp["categories"][name]
        t = tcmp[OVERALL] if name == OVERALL else tcmp["categories"][name]
        b, bt = d["b"], t["b"]
        rows.append(
            f"<tr><td class='l'>{'<b>overall</b>' if name == OVERALL else esc(name)}</td>"
            f"<td>{_num(b['acceptance'])}</td><td>{_num(b['tokens_per_call'], '.2f')}</td>"
            f"<td>{_num(bt['speedup'], '.2f', 'x')}</td>"
            f"<td class='l'>{_interval(d['paired']['acceptance'])}</td>"
            f"<td class='l'>{_interval(d['paired']['tokens_per_call'], '+.2f')}</td>"
            f"<td class='l'>{_interval(t['paired_speedup'], '+.2f')}</td></tr>"
        )
    return (
        f"<h2>A against B = {who}</h2><p>Same prompts and seeds. Paired differences B - A: "
        f"{esc(DEFINITIONS['paired difference'])}.</p><table><tr><th class='l'>category</th>"
        "<th>B acceptance</th><th>B tokens / call</th><th>B speedup</th>"
        "<th class='l'>acceptance B - A</th><th class='l'>tokens / call B - A</th>"
        "<th class='l'>speedup B - A</th></tr>" + "".join(rows) + "</table>"
    )


def runs_html(records: list[Record]) -> str:
    rows = []
    for r in records:
        s, p = r.spec, r.prompt
        short = p.text if len(p.text) <= 90 else p.text[:87] + "..."
        links = " ".join(
            f"<a href='{trace_file(p.index, w)}'>{w}</a>"
            for w, t in (("spec", r.spec), ("ar", r.ar), ("compare", r.compare))
            if t is not None
        )
        rows.append(
            f"<tr id='run-{p.index}'><td>{p.index}</td><td class='l'>{esc(p.id)}</td>"
            f"<td class='l'>{esc(p.category)}</td><td class='l'>{esc(short)}</td>"
            f"<td>{r.seed}</td><td>{len(s.token_ids)}</td>"
            f"<td>{_num(metrics.acceptance_rate(s))}</td>"
            f"<td>{_num(metrics.tokens_per_call(s), '.2f')}</td>"
            f"<td>{_num(metrics.speedup(r.ar, s), '.2f', 'x')}</td><td>{r.wall_s:.1f}</td>"
            f"<td class='l'>{links}</td></tr>"
        )
    return (
        "<table><tr><th>#</th><th class='l'>id</th><th class='l'>category</th>"
        "<th class='l'>prompt</th><th>seed</th><th>tokens</th><th>acceptance</th>"
        "<th>tokens / call</th><th>speedup</th><th>s</th><th class='l'>traces</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def page(report: dict[str, Any], records: list[Record]) -> str:
    """The whole page."""
    from plotly.offline import get_plotlyjs

    det, about = report["deterministic"], report["about"]
    figs = figures.all_figures(report)
    models = about.get("models") or {}
    model_rows = "".join(
        f"<tr><td class='l'>{esc(k)}</td><td class='l'>{esc(value)}</td></tr>"
        for k, value in models.items()
    )
    settings = det.get("settings") or {}
    shown = ", ".join(
        f"{k} {value}"
        for k, value in settings.items()
        if k in ("gamma", "temperature", "top_p", "top_k", "max_new_tokens", "seed", "drafter")
    )
    prompts = det.get("prompts") or {}
    defs = "".join(f"<dt>{esc(k)}</dt><dd>{esc(value)}</dd>" for k, value in DEFINITIONS.items())
    done, total = det["prompts_done"], prompts.get("count", det["prompts_done"])
    partial = (
        f"<p><b>Partial report: {done} of {total} prompts.</b> Run the same command again "
        "to finish it.</p>"
        if done < total and about.get("shard") in (None, "0/1")
        else ""
    )
    return str(
        render(
            "report_page.html.j2",
            css=Markup(CSS),
            plotly_js=Markup(get_plotlyjs()),
            done=done,
            source=about.get("source") or "",
            verification=det.get("verification") or "",
            shown=shown,
            partial=Markup(partial),
            model_rows=Markup(model_rows),
            overview=Markup(overview_table(report)),
            fig_acceptance=Markup(_fig(figs["acceptance"])),
            fig_speedup=Markup(_fig(figs["speedup"])),
            fig_conditional=Markup(_fig(figs["conditional"])),
            fig_histogram=Markup(_fig(figs["histogram"])),
            fig_kinds=Markup(_fig(figs["kinds"])),
            compare=Markup(compare_html(report)),
            fig_compare=Markup(_fig(figs["compare"]) if "compare" in figs else ""),
            n_costliest=len(det["costliest"]),
            cost_definition=DEFINITIONS["cost"],
            open_trace=Markup(OPEN_TRACE),
            costliest=Markup(costliest_html(report)),
            runs=Markup(runs_html(records)),
            definitions=Markup(defs),
        )
    )
