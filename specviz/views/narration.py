"""Round narration: numbered plain sentences telling what one round did, from the trace's
numbers only (no model call).

In order: what the draft proposed and how long it took (draft_ms); that one target call
scored k + 1 positions and how long it took (verify_ms); each decision with u, p, q and
min(1, p/q) (under exact match: the target's own sample against the draft); the drafts
discarded after a rejection; where the added token came from (the residual
norm(max(0, p - q)) after a rejection, the target's sample under exact match, or p after a
full accept); and how many tokens the round emitted. ``narration_html`` escapes every
sentence. No gradio.
"""

from __future__ import annotations

from specviz.trace import Drafted, Round, round_number
from specviz.views.markup import _pair_fmt, esc, match_verdict, num


def _tokens(drafted: list[Drafted]) -> str:
    return ", ".join(repr(d.text) for d in drafted)


def proposal(rnd: Round) -> str:
    """What the draft proposed, and how long drafting took."""
    k = len(rnd.drafted)
    took = f"in {rnd.draft_ms:.1f} ms"
    if k == 0:
        return f"The drafter proposed no tokens this round (gamma {rnd.gamma}), {took}."
    fewer = f" (gamma was {rnd.gamma}; it proposed fewer)" if k < rnd.gamma else ""
    s = "s" if k > 1 else ""
    return f"The draft proposed {k} token{s}{fewer}, {took}: {_tokens(rnd.drafted)}."


def scoring(rnd: Round) -> str:
    """The one target call: k + 1 positions scored."""
    k = len(rnd.drafted)
    what = f"the {k} draft{'s' if k > 1 else ''} and the position after them" if k else "one"
    n = k + 1
    return (
        f"One target call scored {n} position{'s' if n > 1 else ''} ({what}) "
        f"in {rnd.verify_ms:.1f} ms."
    )


def decision(i: int, d: Drafted) -> str:
    """The rule's (or exact match's) decision on draft i (1-based), with its numbers."""
    head = f"Draft {i} {d.text!r}: p = {num(d.p)}, q = {num(d.q)}"
    if d.target_sample is not None:
        return f"{head}; {match_verdict(d)}."
    if d.u is None:
        same = "equals" if d.status == "accepted" else "differs from"
        return f"{head}; greedy, no u drawn: the draft's argmax {same} the target's, {d.status}."
    su, sa = _pair_fmt(d.u, d.accept_prob)
    sign = "<" if d.status == "accepted" else "≥"
    return f"{head}, min(1, p/q) = {sa}; u = {su} {sign} {sa}, so it was {d.status}."


def discarded(rnd: Round) -> str | None:
    """The drafts after a rejection, never tested."""
    dropped = [(i, d) for i, d in enumerate(rnd.drafted, 1) if d.status == "discarded"]
    if not dropped:
        return None
    first, last = dropped[0][0], dropped[-1][0]
    which = f"Draft {first} was" if first == last else f"Drafts {first} to {last} were"
    return (
        f"{which} discarded without a test ({_tokens([d for _, d in dropped])}): "
        "they came after the rejection."
    )


def addition(rnd: Round) -> str:
    """Where the added token came from."""
    a, k = rnd.added, len(rnd.drafted)
    if a is None:
        return "The last accepted draft was the end of the sequence, so no token was added."
    if a.status == "resampled" and rnd.exact_match:
        return (
            f"Draft {rnd.n_accepted + 1} did not match, so the round kept the target's own "
            f"sample {a.text!r}, drawn from p in the same target call (p = {num(a.p)})."
        )
    if a.status == "resampled":
        return (
            f"Draft {rnd.n_accepted + 1} was rejected, so the same target call drew {a.text!r} "
            f"from the residual norm(max(0, p − q)) at that position, where it had "
            f"probability {num(a.prob)} (p = {num(a.p)})."
        )
    if k == 0:
        return f"With no drafts, the target call drew {a.text!r} from p (p = {num(a.p)})."
    every = "The draft was" if k == 1 else f"All {k} drafts were"
    return (
        f"{every} accepted, so the same target call drew the bonus token "
        f"{a.text!r} from p at position {k + 1} (p = {num(a.p)})."
    )


def narrate_round(rnd: Round) -> list[str]:
    """The round as plain sentences, in order (unnumbered; the HTML numbers them)."""
    lines = [proposal(rnd), scoring(rnd)]
    lines += [decision(i, d) for i, d in enumerate(rnd.verified, 1)]
    extra = discarded(rnd)
    if extra:
        lines.append(extra)
    lines.append(addition(rnd))
    n = rnd.emitted
    lines.append(f"The round emitted {n} token{'s' if n != 1 else ''} for one target call.")
    return lines


def narration_html(rnd: Round) -> str:
    """The numbered sentences as an escaped ordered list."""
    items = "".join(f"<li>{esc(s)}</li>" for s in narrate_round(rnd))
    head = esc(f"Round {round_number(rnd.index)}")
    return f'<div class="sv-narration"><b>{head}</b><ol>{items}</ol></div>'
