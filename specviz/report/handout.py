"""A handout: one self-contained HTML file of a run or of a recorded lesson, to hand out or
print to PDF. Everything is inside it (its CSS, plotly.js, every figure's data), so it
opens with no network: the coloured tokens, every tested draft's decision (p, q,
min(1, p/q) against the draw u, and what was emitted), the speed figures with when and on
which machine they were measured, the rule and Leviathan's formulas at the run's own alpha,
gamma and c (computed by specviz.metrics). A recorded lesson's handout has each step's
sentences and statement, its run, its sweep chart and its check charts.

Token texts are escaped (specviz.views); the sentences and statements of a recorded lesson
are the HTML the app wrote when it recorded them. No gradio, no model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly.io
from markupsafe import Markup

from specviz import metrics
from specviz.costs import speed_story
from specviz.lesson_record import RecordedLesson, RecordedStep
from specviz.trace import Round, Trace, round_number
from specviz.views import figures, markup
from specviz.views.templating import esc, render

ASSETS = Path(__file__).resolve().parents[2] / "assets"
CSS = """
body { font-family: system-ui, sans-serif; margin: 1.2em auto; max-width: 1100px;
       color: #1f2328; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; border-bottom: 1px solid #d0d7de;
     padding-bottom: 0.2em; margin-top: 1.6em; }
.about, .sv-measured { color: #57606a; font-size: 0.9em; }
table.decisions { border-collapse: collapse; font-size: 0.85em; margin: 0.4em 0 1em; }
table.decisions th, table.decisions td { border: 1px solid #d0d7de; padding: 0.15em 0.45em;
  text-align: right; }
table.decisions th { background: #f6f8fa; } table.decisions td.l { text-align: left; }
.rule { background: #f6f8fa; border-left: 3px solid #6f42c1; padding: 0.4em 0.9em; }
.rule code, .formula { font-family: ui-monospace, monospace; }
.said { background: #f6f8fa; padding: 0.3em 0.7em; margin: 0.4em 0; }
.sv-tok { cursor: default; }
.figure { break-inside: avoid; }
pre { white-space: pre-wrap; font-size: 0.85em; }
@media print { body { max-width: none; margin: 0; } h2 { break-after: avoid; }
  table.decisions { font-size: 0.75em; } }
"""
RULE = (
    "<p><b>One round</b> (Leviathan et al. 2022, Algorithm 1; Chen et al. 2023): the draft "
    "proposes gamma tokens x<sub>1</sub> … x<sub>gamma</sub>, each drawn from its "
    "distribution q; one target call gives p at every position. For each draft in turn, "
    "draw u uniform on [0, 1) and keep x<sub>i</sub> if u &lt; p(x<sub>i</sub>) / "
    "q(x<sub>i</sub>): it is kept with probability min(1, p/q). At the first rejection, "
    "emit a token drawn from the residual norm(max(0, p − q)) and discard the later drafts; "
    "when every draft is kept, emit a bonus token drawn from p. So one target call emits "
    "between 1 and gamma + 1 tokens, and the text is distributed exactly as the target's "
    "own sampling.</p>"
)


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "–" if x is None else f"{x:{fmt}}"


def figure_html(fig: Any) -> str:
    """A Plotly figure as a div and its script (plotly.js itself is in the page's head)."""
    return (
        "<div class='figure'>"
        + fig.to_html(full_html=False, include_plotlyjs=False, config={"responsive": True})
        + "</div>"
    )


def titled(fig: Any, words: str) -> Any:
    """The figure with a second title line (escaped): when and where it was measured."""
    title = fig.layout.title.text or ""
    note = f"<sup>{esc(words)}</sup>"
    fig.update_layout(title={"text": f"{title}<br>{note}" if title else note})
    return fig


def formulas_html(spec: Trace, ar: Trace | None) -> str:
    """The rule, and Leviathan's expected tokens per target call and walltime improvement at
    this run's alpha, gamma and c (specviz.metrics), beside what the run measured."""
    gamma = spec.settings.gamma
    alpha = metrics.alpha(spec)
    a = alpha if alpha is not None else metrics.acceptance_rate(spec)
    which = "alpha" if alpha is not None else "the acceptance rate"
    lines = [
        "<p class='formula'>E[tokens per target call] = (1 − alpha<sup>gamma+1</sup>) / "
        "(1 − alpha)&nbsp;&nbsp;(gamma + 1 when alpha = 1)</p>",
        "<p class='formula'>expected walltime improvement = (1 − alpha<sup>gamma+1</sup>) / "
        "((1 − alpha)(gamma·c + 1)), c = one draft step / one target step</p>",
        f"<p>This run: gamma {gamma}, {which} {a:.3f}: "
        f"<b>{metrics.expected_tokens_per_round(a, gamma):.2f}</b> tokens per target call "
        f"expected, <b>{metrics.tokens_per_call(spec):.2f}</b> measured.",
    ]
    if ar is not None and ar.token_ids and spec.rounds:
        c = metrics.cost_ratio(spec, ar)
        lines[-1] += (
            f" With c = {c:.3f} measured, the formula expects a "
            f"<b>{metrics.expected_speedup(a, gamma, c):.2f}x</b> walltime improvement; "
            f"the run measured <b>{metrics.speedup(ar, spec):.2f}x</b>."
        )
    lines[-1] += "</p>"
    return f"<div class='rule'>{RULE}{''.join(lines)}</div>"


def decisions_html(trace: Trace, rounds: list[Round] | None = None) -> str:
    """Every tested draft of the rounds (default: all): round, position, token, p and q
    to three significant figures, min(1, p/q), u, its verdict, and what the round emitted
    after it."""
    head = (
        "<tr><th>round</th><th>position</th><th class='l'>draft x</th><th>p(x)</th>"
        "<th>q(x)</th><th>min(1, p/q)</th><th>u</th><th class='l'>verdict</th>"
        "<th class='l'>then emitted</th></tr>"
    )
    rows = []
    for rnd in rounds if rounds is not None else trace.rounds:
        for pos, d in enumerate(rnd.drafted, start=1):
            if d.status == "discarded":
                continue
            added = ""
            last = pos == len(rnd.drafted) or rnd.drafted[pos].status == "discarded"
            if (d.status == "rejected" or last) and rnd.added is not None:
                word = markup.status_word(rnd.added.status, rnd.added.text)
                added = f"{word} ({esc(rnd.added.status)})"
            rows.append(
                f"<tr><td>{round_number(rnd.index)}</td><td>{pos}</td>"
                f"<td class='l'>{markup.status_word(d.status, d.text)}</td>"
                f"<td>{_num(d.p)}</td><td>{_num(d.q)}</td><td>{_num(d.accept_prob)}</td>"
                f"<td>{_num(d.u)}</td><td class='l'>{esc(d.status)}</td>"
                f"<td class='l'>{added}</td></tr>"
            )
    if not rows:
        return "<p class='about'>No draft was tested (an autoregressive run).</p>"
    return f"<table class='decisions'>{head}{''.join(rows)}</table>"


def run_html(spec: Trace | None, ar: Trace | None, measured: str, decisions: bool = True) -> str:
    """One run: its settings, its coloured tokens, its speed line and speed figure (each
    with `measured`), and its decisions."""
    main = spec or ar
    if main is None:
        return ""
    models = ", ".join(
        f"{role} {name}" for role, name in main.models.items() if role in ("target", "draft")
    )
    parts = [
        f"<p class='about'>{esc(markup.sampling_text(main.settings))}, gamma "
        f"{main.settings.gamma}, seed {main.settings.seed}; {esc(models)}</p>",
        markup.trace_tokens_html(main),
    ]
    if spec is not None and spec.rounds:
        parts.append(markup.speedline_html(speed_story(spec, ar)))
    if ar is not None and ar.token_ids:
        parts.append(f"<div class='sv-measured'>{esc(measured)}</div>")
        parts.append(figure_html(titled(figures.speedup_figure(spec, ar), measured)))
    if decisions and spec is not None:
        parts.append(decisions_html(spec))
    return "".join(parts)


def run_handout(spec: Trace | None, ar: Trace | None, measured: str, title: str = "") -> str:
    """The handout of one run (`measured`: when and on which machine it was measured)."""
    main = spec or ar
    if main is None:
        raise ValueError("nothing to hand out yet: press Run first")
    body = ""
    if spec is not None and spec.rounds:
        body += formulas_html(spec, ar)
    body += run_html(spec, ar, measured)
    return page(title or "A run of speculative decoding", main.prompt, measured, body)


def step_html(lesson: RecordedLesson, number: int, step: RecordedStep) -> str:
    """One step of a recorded lesson: its sentences, its statement, and what it showed."""
    run = lesson.run_of(step)
    measured = lesson.measured(step.measured_at, run)
    parts = [
        f"<h2>Step {number}: {esc(step.title)}</h2>",
        f"<div>{step.card}</div>",
        f"<div class='said'>{step.said}</div>",
    ]
    if run is not None and step.kind == "run":
        parts.append(run_html(run.spec, run.ar, measured))
    elif run is not None and run.spec is not None:
        chosen = step.focus[0] if step.focus is not None else step.deal
        rounds = [r for r in run.spec.rounds if r.index == chosen]
        parts.append(run_html(run.spec, run.ar, measured, False))
        if rounds:
            parts.append(f"<p>Round {round_number(rounds[0].index)}, decision by decision:</p>")
            parts.append(decisions_html(run.spec, rounds))
    for name, value in step.drawn.items():
        if name.endswith("_plot"):
            fig = plotly.io.from_json(value)
            if step.kind == "sweep":
                fig = titled(fig, measured)
            parts.append(figure_html(fig))
        else:
            parts.append(value)
    if step.kind == "sweep":
        parts.append(f"<div class='sv-measured'>{esc(measured)}</div>")
    return "".join(parts)


def lesson_handout(lesson: RecordedLesson, lesson_id: str) -> str:
    """The handout of a recorded lesson: the rule and formulas at step 1's run, then every
    step."""
    first = next((r for r in lesson.runs if r.spec is not None and r.spec.rounds), None)
    body = formulas_html(first.spec, first.ar) if first is not None and first.spec else ""
    body += "".join(step_html(lesson, i, s) for i, s in enumerate(lesson.steps, start=1))
    about = (
        f"recorded lesson {lesson_id}, recorded {lesson.recorded_at} on "
        f"{lesson.machine.words()}; pair {lesson.pair}"
    )
    return page("Speculative decoding: the lesson", lesson.prompt, about, body)


def page(title: str, prompt: str, about: str, body: str) -> str:
    """The whole file: the page's own CSS and the app's token colours, plotly.js inline."""
    from plotly.offline import get_plotlyjs

    css = markup.css_variables() + (ASSETS / "specviz.css").read_text(encoding="utf-8") + CSS
    return str(
        render(
            "handout.html.j2",
            title=title,
            prompt=prompt,
            about=about,
            css=Markup(css),
            plotly_js=Markup(get_plotlyjs()),
            legend=Markup(markup.legend_html()),
            body=Markup(body),
        )
    )
