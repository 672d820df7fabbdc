"""The decision panel beside the token view: the selected (or latest) decision in a glance,
large enough for a hall. The token, its p and q as bars with their numbers, the keep
probability a(x) as a zone of [0, 1] with the draw u on it (min(1, p/q) under the rejection
rule), then the verdict sentence and, where the target added a token at that position, where
it was drawn from with its probability there.

Every number and sentence comes from the stored record and the verification that decided
(specviz.verify: its keep label, its verdict and replacement sentences), so the panel says
what the Decision tab says, for every verification, round shape and drafter. HTML from
templates/decision_panel.html.j2, which escapes every value. No gradio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specviz.config import Settings
from specviz.trace import Added, Decision, Drafted, Node, Round, round_number
from specviz.verify import verification_for
from specviz.verify.words import num, pair_fmt, pq
from specviz.views.templating import macro

HINT = "Click a token to see its decision here: p and q, the draw u against min(1, p/q)."


@dataclass(frozen=True)
class Bar:
    """One probability as a bar: its name (p(x), q(x), ...), its value, and the palette key
    of its colour (p, q, residual)."""

    name: str
    value: float
    color: str

    @property
    def shown(self) -> str:
        return pq(self.value)  # p and q beside min(1, p/q): three figures each

    @property
    def width(self) -> str:
        return f"{100 * min(1.0, max(0.0, self.value)):.1f}%"


@dataclass(frozen=True)
class Keep:
    """The keep probability a(x) (named as the verification names it) as a zone of [0, 1],
    and the draw u where one was drawn; kept: the verdict."""

    label: str
    a: float
    u: float | None
    kept: bool

    @property
    def numbers(self) -> tuple[str, str]:
        """u and a, with digits enough to tell them apart ("" for u without a draw)."""
        if self.u is None:
            return "", num(self.a)
        return pair_fmt(self.u, self.a)

    @property
    def zone(self) -> str:
        return f"{100 * min(1.0, max(0.0, self.a)):.1f}%"

    @property
    def at(self) -> str:
        """Where the draw's mark stands on [0, 1]."""
        return f"{100 * min(1.0, max(0.0, self.u or 0.0)):.1f}%"

    @property
    def left(self) -> bool:
        """The draw's label goes on the mark's left past the middle, so that it stays
        inside the panel."""
        return self.u is not None and self.u > 0.5


def _html(name: str, *args: object) -> str:
    return str(macro("decision_panel.html.j2", name)(*args))


def hint_html(message: str = HINT) -> str:
    """The panel before any decision is selected."""
    return _html("hint", message)


def _drafted_part(d: Drafted, settings: Settings) -> dict[str, Any]:
    """A tried draft: p and q (and p′) as bars, a(x) against u, the verdict sentence."""
    verification = verification_for(settings)
    bars = [Bar("p(x)", d.p, "p"), Bar("q(x)", d.q, "q")]
    if d.p_prime is not None:  # a tree's later sibling was tried against the updated p′
        bars.append(Bar("p′(x)", d.p_prime, "residual"))
    keep = Keep(verification.keep_label(d), d.accept_prob, d.u, d.status == "accepted")
    said = verification.keep_text(d)
    return {"token": (d.text, d.status), "bars": bars, "keep": keep, "said": said}


def _added_part(a: Added, settings: Settings, drafts: int) -> dict[str, Any]:
    """The token the target added: its probability under what it was drawn from, its p,
    and where it came from in words (drafts: how many its round had)."""
    verification = verification_for(settings)
    source = a.source or ("bonus" if a.status == "bonus" else verification.fallback_source)
    bars = _added_bars(a, source)
    said = verification.replace_text(a, drafts)
    return {"token": (a.text, a.status), "bars": bars, "keep": None, "said": said}


def _added_bars(a: Added, source: str) -> list[Bar]:
    """The added token's p, and its probability under what it was drawn from where that
    is not p itself."""
    bars = [Bar("p(x)", a.p, "p")]
    if source in ("residual", "siblings"):  # the sentence under the bars names it in full
        bars.insert(0, Bar("r(x)" if source == "residual" else "p′(x)", a.prob, "residual"))
    return bars


def decision_panel_html(dec: Decision) -> str:
    """The panel for one decision of a stored trace (a chain's or a tree's recorded path)."""
    head = f"round {round_number(dec.round.index)} · position {dec.pos}"
    parts = []
    if dec.drafted is not None:
        parts.append(_drafted_part(dec.drafted, dec.settings))
    if dec.added is not None:
        parts.append(_added_part(dec.added, dec.settings, len(dec.round.drafted)))
    return _html("panel", head, parts)


def node_panel_html(rnd: Round, node: Node, sentence: str) -> str:
    """The panel for one node of a tree round (its trial among its siblings): p at its
    parent, q, the updated p′ it was tried against, min(1, p′/q) against u, and the
    node's verdict sentence (tree_view.node_verdict)."""
    head = f"round {round_number(rnd.index)} · tree depth {node.depth}"
    bars = [Bar("p(x)", node.p, "p"), Bar("q(x)", node.q, "q")]
    keep = None
    if node.trial is not None:
        if node.p_prime is not None:
            bars.append(Bar("p′(x)", node.p_prime, "residual"))
        if node.accept_prob is not None:
            label = "min(1, p′/q)" if node.u is not None else "a(x)"
            keep = Keep(label, node.accept_prob, node.u, node.status == "accepted")
    status = node.status if node.status in ("accepted", "rejected") else "discarded"
    part = {"token": (node.text, status), "bars": bars, "keep": keep, "said": sentence}
    return _html("panel", head, [part])
