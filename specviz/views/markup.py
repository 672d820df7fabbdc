"""HTML for the app: token spans, the per-round view, the legend, verdicts and small tables.

Colours (``COLORS``) come from specviz.views.palette; :func:`css_variables` hands them to the
page. The HTML comes from templates/markup.html.j2 (specviz.views.templating), which escapes
every value it is given (html.escape plus the characters that client-side templates treat
specially: :func:`esc`), so every piece of text that comes from a model, a user or a file is
escaped before it becomes part of a page. No gradio import.

Token spans carry data-status (accepted|rejected|resampled|bonus), data-round and data-pos
(the output position the token was proposed for; a rejected draft shares its position
with the resampled token that replaced it). data-round is the trace's 0-based round index;
every round number a person reads is round_number(index), counted from 1. With overlap
shading on, drafted tokens also carry data-overlap and a background that darkens as
sum_x min(p, q) falls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from markupsafe import Markup

from specviz.config import Settings
from specviz.metrics import first_mismatch, greedy_divergence
from specviz.trace import (
    TOKEN_STATUSES,
    Decision,
    Drafted,
    Round,
    Trace,
    has_overlaps,
    round_number,
)
from specviz.verify import verification_for
from specviz.verify.words import num as num
from specviz.verify.words import pair_fmt
from specviz.views.palette import COLORS
from specviz.views.templating import esc as esc
from specviz.views.templating import macro
from specviz.views.templating import visible_text as visible_text

if TYPE_CHECKING:
    from specviz.costs import SpeedStory

LEGEND: dict[str, str] = {
    "accepted": "draft token accepted: u < min(1, p/q) (exact match: the target sampled it)",
    "rejected": "draft token rejected (kept visible, struck through)",
    "resampled": "drawn by the target in place of the first draft not kept (the rejection "
    "rule: from the residual norm(max(0, p - q)); the Decision tab names each token's source)",
    "bonus": "drawn from p after all drafts were accepted, or in a round that drafted none",
}
MARKERS = {"resampled": "↻", "bonus": "+"}


def _html(name: str, *args: object, **kwargs: object) -> str:
    """The page's HTML from a macro of templates/markup.html.j2 (plain str, as callers join
    and concatenate it)."""
    return str(macro("markup.html.j2", name)(*args, **kwargs))


def css_variables() -> str:
    """The colours as CSS custom properties, for assets/specviz.css."""
    body = "".join(f"--sv-{name}: {color};" for name, color in COLORS.items())
    return f":root{{{body}}}"


# --- token view ------------------------------------------------------------------------


def token_span(
    text: str, status: str, round_index: int, pos: int, shade: float | None = None
) -> str:
    """One token as a focusable span with its status, round and output position.

    shade: None keeps the status colours; a number in [0, 1] is the position's overlap
    sum_x min(p, q), and the background darkens as it falls (the models disagree).
    """
    if status not in TOKEN_STATUSES:
        raise ValueError(f"unknown token status {status!r}")
    title = f"{status} · round {round_number(round_index)} · position {pos}"
    overlap = background = None
    if shade is not None:
        overlap, background, note = _shade(shade)
        title += f" · {note}"
    return _html(
        "token_span",
        text,
        status,
        round_index,
        pos,
        MARKERS.get(status),
        f"{title} · click to inspect",
        overlap,
        background,
    )


def _shade(overlap: float) -> tuple[str, str, str]:
    """One overlap as the span's data-overlap, its inline background, and the words for the
    token's title."""
    pct = round(8 + 62 * (1.0 - min(1.0, max(0.0, overlap))))
    color = COLORS["disagreement"]
    background = f"color-mix(in srgb, {color} {pct}%, white)"
    return f"{overlap:.3f}", background, f"overlap sum_x min(p, q) = {overlap:.2f}"


def round_spans(rnd: Round, shade_overlap: bool = False) -> str:
    """The token-view spans of one round: accepted, rejected, then the added token.

    shade_overlap shades each drafted token by its position's overlap sum_x min(p, q)
    (the added token keeps its status colour); only meaningful for a full trace (a minimal
    trace records no overlaps: see has_overlaps).
    """
    parts = []
    for i, d in enumerate(rnd.verified):
        shade = d.overlap if shade_overlap else None
        parts.append(token_span(d.text, d.status, rnd.index, rnd.start + i, shade))
    if rnd.added is not None:
        parts.append(
            token_span(rnd.added.text, rnd.added.status, rnd.index, rnd.start + rnd.n_accepted)
        )
    return "".join(parts)


def tokens_html(parts: list[str], prompt: str = "") -> str:
    """The token view from cached per-round span strings (HTML from this module)."""
    return _html("tokens", Markup("".join(parts)), prompt)


def trace_tokens_html(trace: Trace | None, shade_overlap: bool = False) -> str:
    """The whole token view of a trace (an AR trace has no statuses: plain escaped text).

    shade_overlap needs a trace with overlaps (has_overlaps); otherwise ValueError."""
    if trace is None:
        return tokens_html([])
    if shade_overlap and not has_overlaps(trace):
        raise ValueError("this trace recorded no overlaps (an AR run or a minimal trace)")
    if trace.method == "ar":
        return tokens_html([_html("ar_text", trace.text)], trace.prompt)
    return tokens_html([round_spans(r, shade_overlap) for r in trace.rounds], trace.prompt)


def overlap_legend_html() -> str:
    """The legend of the overlap shading: a ramp from agreement to disagreement."""
    steps = [(f"{x:.2f}", *_shade(x)[:2]) for x in (1.0, 0.75, 0.5, 0.25, 0.0)]
    note = (
        "shade: each drafted token's overlap sum_x min(p, q) at its position, darker where "
        "the draft and the target disagree (also among accepted tokens); added tokens keep their "
        "status colour"
    )
    return _html("overlap_legend", steps, note)


def legend_html() -> str:
    """The legend: swatch, name and meaning per status (the meaning in .sv-legend-desc,
    which the presentation mode leaves out)."""
    return _html("legend", [(s, MARKERS.get(s), LEGEND[s]) for s in TOKEN_STATUSES])


# --- per-round view --------------------------------------------------------------------


# Why a round stopped drafting, in words (trace.STOPS); "gamma" is the plain case, which the
# round table leaves unsaid.
STOP_WORDS = {
    "gamma": "it drafted all it was asked (gamma, or the tree's full depth)",
    "confidence": "the draft's probability of its last token fell below the confidence "
    "threshold, so it drafted no further",
    "eos": "the draft proposed the end of the sequence",
    "budget": "the token budget left no room for more",
    "lookup": "the n-gram drafter found no longer match",
    "nodes": "the dynamic tree spent its node budget",
    "prompt": "the target read the prompt first, and the draft, the target's own weights at a "
    "lower precision, took the target's keys and values of it instead of reading it",
}
STOP_TAGS = {
    "confidence": "unsure",
    "eos": "EOS drafted",
    "budget": "token budget",
    "lookup": "no match",
    "nodes": "node budget",
    "prompt": "prompt read",
}


def stop_sentence(rnd: Round, settings: Settings | None = None) -> str | None:
    """Where and why the round stopped drafting, in one sentence (None when the trace did
    not record it). Plain text; callers escape it."""
    if rnd.stop is None:
        return None
    if rnd.stop == "prompt":
        return f"No drafts in this round: {STOP_WORDS['prompt']}."
    k = len(rnd.nodes) if rnd.nodes is not None else len(rnd.drafted)
    what = f"{k} node{'s' if k != 1 else ''}" if rnd.nodes is not None else f"{k} of {rnd.gamma}"
    why = STOP_WORDS[rnd.stop]
    threshold = settings.draft_confidence if settings is not None else None
    if rnd.stop == "confidence" and threshold is not None:
        why = why.replace("threshold", f"threshold {threshold:g}")
    if rnd.stop == "confidence" and settings is not None and settings.is_greedy:
        # greedy q is one-hot (q = 1 on every draft): the stop reads the draft's own
        # softmax at temperature 1 instead (specviz.drafters.ModelDrafter.unsure)
        why = why.replace(
            "the draft's probability",
            "q is one-hot in greedy mode, so the stop reads the draft's softmax at "
            "temperature 1: its probability",
        )
    return f"Drafting stopped at {what}: {why}."


def round_row(rnd: Round) -> str:
    """One row: the round's number (from 1), drafts with verdicts, then the added token."""
    chips = [
        (d.text, d.status, rnd.start + i if d.status != "discarded" else None)
        for i, d in enumerate(rnd.drafted)
    ]
    stop = (STOP_TAGS[rnd.stop], STOP_WORDS[rnd.stop]) if rnd.stop in STOP_TAGS else None
    added = None
    if rnd.added is not None:
        added = (rnd.added.text, rnd.added.status, rnd.start + rnd.n_accepted)
    tree = None
    if rnd.nodes is not None:  # a tree round: accepted depth, nodes and trials
        depth = max((n.depth for n in rnd.nodes), default=0)
        tree = (rnd.n_accepted, depth, rnd.trials, len(rnd.nodes))
    return _html(
        "round_row",
        round_number(rnd.index),
        rnd.index,
        chips,
        stop,
        added,
        rnd.n_accepted,
        len(rnd.drafted),
        tree,
    )


def rounds_html(rows: list[str]) -> str:
    """The per-round table from cached rows (HTML from round_row)."""
    return _html("rounds", Markup("".join(rows)))


# --- verdicts --------------------------------------------------------------------------


_pair_fmt = pair_fmt  # the verifications' number formats (specviz.verify.words)


def match_verdict(d: Drafted) -> str:
    """An exact-match decision in one sentence: the target's own sample against the draft.
    Plain text (token texts quoted by repr); callers escape it."""
    return (
        f"exact match: the target sampled {d.target_text!r}; the draft proposed {d.text!r}: "
        f"{d.status}"
    )


def out_tv_sentence(d: Drafted, settings: Settings) -> str | None:
    """What this decision does to the target's distribution, from TV(out, p) and whether
    the verification is lossless; None when the trace did not measure it."""
    if d.out_tv is None:
        return None
    verification = verification_for(settings)
    if not verification.lossless:
        why = "a deliberately wrong rule" if verification.entry.wrong else "a lossy verification"
        return (
            f"this decision moves TV = {d.out_tv:.2f} of probability away from the target's ({why})"
        )
    return (
        f"this decision leaves the target's distribution unchanged (TV(out, p) = "
        f"{d.out_tv:.1g}, float error)"
    )


def verdict_html(dec: Decision) -> str:
    """The inspector's sentences for one decision, escaped."""
    lines = []
    head = f"round {round_number(dec.round.index)}, position {dec.pos}"
    verification = verification_for(dec.settings)
    if dec.drafted is not None:
        lines.append(f"draft {dec.drafted.text!r}: {verification.keep_text(dec.drafted)}")
        tv = out_tv_sentence(dec.drafted, dec.settings)
        if tv is not None:
            lines.append(tv)
    if dec.added is not None:
        lines.append(verification.replace_text(dec.added, len(dec.round.drafted)))
    return _html("verdict", head, lines)


# --- small panels ----------------------------------------------------------------------


def status_html(message: str, kind: str = "info") -> str:
    """A one-line status message (kind: info, busy, error)."""
    return _html("status", message, kind)


def speedline_html(story: SpeedStory | None) -> str:
    """The run's speed in one line (costs.SpeedStory): tokens per target call and the calls
    saved, then the measured speedup with its spread and the prediction; empty before a
    speculative round."""
    if story is None or not story.calls:
        return ""
    m = story.measured
    predicted = basis = None
    if story.predicted is not None:
        predicted = f"{story.predicted:.2f}x"
        basis = f"from the run's own c = {story.c:.2f}"
        if story.verify:
            basis += f", a verify call of {story.verify:.2f} target steps"
        if story.accept is not None:
            basis += f" and {story.accept_name} {story.accept:.2f}, at gamma {story.gamma}"
    return _html(
        "speedline",
        f"{story.tokens_per_call:.2f}",
        story.tokens,
        story.calls,
        story.calls_saved,
        f"{m.value:.2f}x" if m else None,
        f"{m.low:.2f}\u2013{m.high:.2f}" if m else None,
        predicted,
        basis,
        story.below_one(),
    )


def share_link_html(url: str, run_id: str) -> str:
    """The link to a shared run: its address shown, a relative ``?run=ID`` followed."""
    return _html("share_link", url, run_id)


def sampling_text(settings: Settings) -> str:
    """The target's sampling at these settings, the one wording every view uses: "greedy
    decoding", "temperature 0.7 and top-p 0.9", "temperature 1, no top-p, top-k 50"."""
    if settings.is_greedy:
        return "greedy decoding"
    parts = [f"temperature {settings.temperature:g}"]
    parts.append(f"top-p {settings.top_p:g}" if settings.top_p < 1 else "no top-p")
    if settings.top_k:
        parts.append(f"top-k {settings.top_k}")
    return " and ".join(parts) if len(parts) == 2 else ", ".join(parts)


def warped_apart(settings: Settings) -> bool:
    """Whether q is warped at another temperature than p (a draft temperature that differs
    from the target's, on a sampled run)."""
    dt = settings.draft_temperature
    return dt is not None and not settings.is_greedy and float(dt) != float(settings.temperature)


def exact_note_html(
    settings: Settings, drafter: str = "the draft", dtype: str | None = None
) -> str:
    """What the text is distributed as: the target's own sampling at these settings,
    whatever the draft does (the promise of both papers, in one sentence), as the run's
    verification and its target's dtype (as the trace records it; None before a run) allow.
    The promise is the distribution's (Chen et al.: "within hardware numerics"). Greedy
    text equals the target's own greedy text token for token only where the verify call
    gives each row the sum a one-token call gives (the packaged CPU path); elsewhere, float32
    included, the two calls differ in the last bits (in a 16-bit dtype by far more), so a
    near tie's argmax can flip and the texts may part: the note says so rather than
    "never". A draft
    temperature is mentioned only when it differs from the target's (then q's warp differs
    from p's); it can raise or lower the acceptance, so no direction is claimed."""
    greedy = settings.is_greedy
    verification = verification_for(settings)
    if not verification.lossless and not greedy:
        note = (
            f"{verification.called_run}, {verification.promise_text()}: "
            "this text does not follow the "
            "target's own sampling; each decision's TV(out, p) says how much probability it "
            "moved away from the target's (run summary, Decision tab)."
        )
        return _html("exact_note", note)
    if greedy:
        how = "the target's own greedy decoding (argmax of p at every step)"
    else:
        how = "the target's own sampling at " + sampling_text(settings)
    if dtype is None or dtype == "float32":
        note = (
            f"This text is distributed exactly as {how}, whatever {drafter} proposes: "
            "the draft changes how fast the text comes, never which text it is likely to be."
        )
        if dtype is None:
            note += (
                " Up to rounding: the verify call and a one-token call round differently (in "
                "float32 in the last bits, in a 16-bit dtype by more), so where two tokens "
                "nearly tie a greedy text can part from the target's own."
            )
    elif greedy:
        note = (
            f"In exact arithmetic this text is {how}, whatever {drafter} proposes; this "
            f"target runs in {dtype}, where its verify call and a one-token call round "
            "differently, so where two tokens nearly tie the argmax can flip and the text "
            "part from the autoregressive one (the Exactness tab's greedy check shows where)."
        )
    else:
        note = (
            f"This text is distributed as {how}, whatever {drafter} proposes, up to rounding: "
            f"this target runs in {dtype}, where its verify call and a one-token call round "
            "p differently; the draft changes how fast the text comes."
        )
    dt, t = settings.draft_temperature, settings.temperature
    if warped_apart(settings):
        note += (
            f" The draft samples at temperature {dt:g}, the target at {t:g}: q is warped "
            "differently from p, which can change how many drafts are accepted."
        )
    return _html("exact_note", note)


def models_html(described: dict[str, str]) -> str:
    """Which model runs where and in which dtype."""
    return _html("table", list(described.items()), "sv-models")


def table_html(rows: list[tuple[str, str]], caption: str = "") -> str:
    """A two-column table of escaped labels and values."""
    return _html("table", rows, "sv-table", caption)


def progress_html(done: int, total: int) -> str:
    """A progress bar: done of total."""
    return _html("progress", done, total)


def pre_html(text: str, cls: str) -> str:
    """Plain text in a fixed-width block, escaped."""
    return _html("pre", text, cls)


def grid_html(head: list[str], rows: list[list[str]], cls: str, note: str = "") -> str:
    """A table with a header row, every cell escaped, and a note under it."""
    return _html("grid", head, rows, cls, note)


def greedy_check(spec: Trace, ar: Trace, decode: Callable[[list[int]], str] | None = None) -> str:
    """Plain text: do greedy speculative and greedy AR produce the same tokens?"""
    a, b = spec.token_ids, ar.token_ids
    n, first = min(len(a), len(b)), first_mismatch(a, b)
    if first is None and len(a) == len(b):
        return f"identical: speculative and autoregressive greedy text agree on all {n} tokens"
    if first is None:
        return (
            f"the first {n} tokens agree; the runs stopped at different lengths "
            f"({len(a)} speculative, {len(b)} autoregressive)"
        )
    where = f"token {first} (speculative id {a[first]}, autoregressive id {b[first]})"
    if decode is not None:
        where += (
            f": after {decode(a[max(0, first - 8) : first])!r} speculative continues "
            f"{decode(a[first : first + 6])!r}, autoregressive {decode(b[first : first + 6])!r}"
        )
    said = (
        f"different from {where}. Different computation graphs give different numerics "
        "(as in bf16), and one flipped argmax changes everything after it"
    )
    margin = divergence_margin(spec, ar)
    return f"{said}. {margin}" if margin else said


def divergence_margin(spec: Trace, ar: Trace) -> str | None:
    """Plain text: the target's top-2 logit gap where two greedy texts part, in both runs
    (None when they do not part or the traces did not record the gaps)."""
    div = greedy_divergence(spec, ar)
    if div is None or div.spec_gap is None or div.ar_gap is None:
        return None
    return (
        f"At token {div.pos} the target's top-2 logit gap is {div.spec_gap:.4g} in the "
        f"speculative run and {div.ar_gap:.4g} in the autoregressive one (a gap near 0 is a "
        "near tie, which a small numeric difference flips)"
    )


# --- the lesson's panel ----------------------------------------------------------------


def status_word(status: str, text: str | None = None) -> str:
    """A word coloured as the token view colours a token of that status (the lesson's
    sentences name the colours with these)."""
    if status not in TOKEN_STATUSES:
        raise ValueError(f"unknown token status {status!r}")
    return _html("status_word", status, status if text is None else text)


def lesson_card_html(text: str) -> str:
    """A lesson step's sentences (HTML written by specviz.lesson)."""
    return _html("lesson_card", Markup(text))


def lesson_said_html(said: str | None) -> str:
    """What a lesson step said after its run (HTML written by specviz.lesson; "" before it
    ran)."""
    return _html("lesson_said", Markup(said) if said else "")
