"""Play the verifier: one stored round of a run, decided by the visitor before the reveal.

For each verified draft of the round the board shows the token, p(x) and q(x), and hides
the draw and the verdict. The visitor first says the keep probability a(x) (a number), or
only "likely kept" / "likely rejected"; then the draw is revealed (u under the rejection
rule, the target's own sample under exact match) with the true a(x); then the verdict, with
what replaced a rejected draft (the resampled token) or, after the last kept draft, the
bonus. Drafts after a rejection are discarded untested and are not played.

The keep probability is one function of the stored decision and the trace's settings,
:func:`keep_probability`, which the trace's verification object gives (specviz.verify).

The score over a round (:class:`Score`): one point per played draft whose prediction was
right. A number is right when it lies within :data:`CLOSE` of the true a(x); a call is
right when it matches the revealed verdict. A call is also judged against luck: someone who
knows a(x) and calls "kept" exactly when a(x) >= 1/2 gets sum max(a, 1 - a) calls right on
average, which the score states beside the calls.

Pure: the state is a frozen :class:`Game` (each move returns a new one), the board is HTML
from templates/verifier_game.html.j2, which escapes every token text. No gradio.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from specviz.trace import Drafted, Round, Trace, round_number
from specviz.verify import verification_for
from specviz.verify.words import pq, source_text
from specviz.views.markup import num
from specviz.views.templating import macro

CLOSE = 0.1  # a said keep probability scores when |said - a(x)| <= CLOSE
CONTEXT_TOKENS = 12  # output tokens shown before the round's drafts
KEYS = {"kept": "K", "rejected": "R", "next": "N"}  # the keyboard (specviz.ui.verifier_tab)
_EPS = 1e-9  # float slack in "within CLOSE"


# --- the keep probability, one entry per verification -----------------------------------


@dataclass(frozen=True)
class KeepTest:
    """How one verification keeps a draft: its name, its keep test in one sentence for the
    visitor (str.format fields from the trace's settings), what it draws before deciding
    ("u", "sample", or None for a verification that draws nothing), a(x), and whether it is
    lossy."""

    label: str
    how: str
    draw: str | None
    prob: Callable[[Drafted, Mapping[str, Any]], float]
    lossy: bool = False
    defaults: Mapping[str, Any] | None = None  # settings the how text reads, where absent

    def sentence(self, settings: Mapping[str, Any]) -> str:
        """The keep test in one plain sentence, with the trace's values in it."""
        return self.how


def shown_keep(d: Drafted, settings: Mapping[str, Any]) -> float:
    """a(x) as the trace's verification object reads it from the record: min(1, p/q) under
    the rejection rule (min(1, p'/q) for a tree's later sibling), p(x) under exact match, 1
    or 0 under a test on p alone."""
    return verification_for(settings).shown_keep(d)


def keep_test(settings: Mapping[str, Any]) -> KeepTest:
    """The keep test of a trace's verification, from its object."""
    verification = verification_for(settings)
    return KeepTest(
        verification.label,
        verification.statement(),
        verification.draws,
        shown_keep,
        lossy=not verification.lossless,
    )


def keep_probability(d: Drafted, settings: Mapping[str, Any]) -> float:
    """a(x): the probability that the trace's verification keeps the drafted token d."""
    return keep_test(settings).prob(d, settings)


# --- which rounds can be played -----------------------------------------------------------


def playable_rounds(trace: Trace | None) -> list[int]:
    """The indices of the rounds that verified at least one draft."""
    if trace is None or trace.method != "spec":
        return []
    return [r.index for r in trace.rounds if r.verified]


def draw_decided(d: Drafted, settings: Mapping[str, Any]) -> bool:
    """Whether a draw decided this verified draft: the verification drew (u, or the
    target's own sample) and its keep probability a(x) lies strictly between 0 and 1, so
    that the same p and q could have ended either way."""
    drawn = d.u is not None or d.target_sample is not None
    return drawn and 0.0 < keep_probability(d, settings) < 1.0


def drawn_rounds(trace: Trace | None) -> list[int]:
    """The indices of the playable rounds where a draw decided at least one draft, those
    with a rejection first (there the visitor also sees what replaced it)."""
    if trace is None or trace.method != "spec":
        return []
    s = trace.settings
    drawn = [
        i
        for i in playable_rounds(trace)
        if any(draw_decided(d, s) for d in trace.rounds[i].verified)
    ]
    rejected = [i for i in drawn if any(d.status == "rejected" for d in trace.rounds[i].drafted)]
    return rejected + [i for i in drawn if i not in rejected]


def first_round(trace: Trace) -> int:
    """The round to deal when none is chosen: the first with a rejection, else the first
    that verified a draft (ValueError when none did)."""
    rounds = playable_rounds(trace)
    if not rounds:
        raise ValueError("this run verified no draft: press Run first")
    rejected = [i for i in rounds if any(d.status == "rejected" for d in trace.rounds[i].drafted)]
    return (rejected or rounds)[0]


# --- the game ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Guess:
    """What the visitor said about one draft: a keep probability, or a call."""

    keep: float | None = None  # a said a(x), in [0, 1]
    kept: bool | None = None  # a call: likely kept (True) or likely rejected (False)

    def right(self, a: float, kept: bool) -> bool:
        """A number within CLOSE of a(x); a call that matches the verdict."""
        if self.keep is not None:
            return abs(self.keep - a) <= CLOSE + _EPS
        return self.kept is kept

    @property
    def words(self) -> str:
        if self.keep is not None:
            return f"a(x) = {self.keep:.2f}"
        return "likely kept" if self.kept else "likely rejected"


@dataclass(frozen=True)
class Score:
    """The score over the drafts played so far (definitions in the module docstring)."""

    points: int
    played: int
    numbers: int  # drafts judged by a number
    close: int  # of those, within CLOSE of a(x)
    calls: int  # drafts judged by a call
    calls_right: int
    best_calls: float  # sum max(a, 1 - a) over the called drafts

    def line(self) -> str:
        """The score in one plain sentence, its definition included."""
        head = f"Score {self.points} of {self.played}"
        parts = []
        if self.numbers:
            parts.append(f"{self.close} of {self.numbers} numbers within {CLOSE:g} of a(x)")
        if self.calls:
            parts.append(
                f"{self.calls_right} of {self.calls} calls matched the verdict (knowing a(x) "
                f"exactly gets {self.best_calls:.2f} right on average: u decides the rest)"
            )
        return f"{head}: {'; '.join(parts)}." if parts else f"{head}."


@dataclass(frozen=True)
class Game:
    """One round being played: where the visitor is and what they said."""

    trace: Trace
    index: int  # the round's index in the trace
    at: int = 0  # the verified draft in play
    phase: str = "guess"  # guess -> drawn -> verdict -> (next draft: guess) ... -> done
    guesses: tuple[Guess, ...] = ()
    note: str = ""  # a hint after a move that did nothing (plain text)

    @property
    def round(self) -> Round:
        return self.trace.rounds[self.index]

    @property
    def drafts(self) -> list[Drafted]:
        """The drafts played: those the verification tested."""
        return self.round.verified

    @property
    def test(self) -> KeepTest:
        return keep_test(self.trace.settings)

    def keep(self, i: int) -> float:
        return keep_probability(self.drafts[i], self.trace.settings)

    def kept(self, i: int) -> bool:
        return self.drafts[i].status == "accepted"

    # --- moves ---

    def say(self, value: Any) -> Game:
        """The visitor says a keep probability for the draft in play; the draw is revealed."""
        if self.phase != "guess":
            return self._locked()
        if value is None or value == "":
            raise ValueError("type a keep probability from 0 to 1 first")
        try:
            keep = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"the keep probability must be a number, got {value!r}") from None
        if not 0.0 <= keep <= 1.0:
            raise ValueError(f"the keep probability must be from 0 to 1, got {keep:g}")
        return self._guess(Guess(keep=keep))

    def call(self, kept: bool) -> Game:
        """The visitor calls the draft in play likely kept or likely rejected."""
        if self.phase != "guess":
            return self._locked()
        return self._guess(Guess(kept=bool(kept)))

    def advance(self) -> Game:
        """N: the verdict after the draw, the next draft after a verdict; after the last
        verdict the round is done; once done, the next round of the run is dealt. Before a
        prediction it only says what to do."""
        if self.phase == "done":
            return next_round(self)
        if self.phase == "guess":
            return replace(self, note="First your prediction: a number, or kept / rejected.")
        if self.phase == "drawn":
            return replace(self, phase="verdict", note="")
        if self.phase == "verdict" and self.at + 1 < len(self.drafts):
            return replace(self, at=self.at + 1, phase="guess", note="")
        return replace(self, phase="done", note="")

    def _guess(self, g: Guess) -> Game:
        return replace(self, guesses=(*self.guesses, g), phase="drawn", note="")

    def _locked(self) -> Game:
        if self.phase == "done":
            return replace(self, note="This round is done: press Next (N) for the next round.")
        return replace(self, note="The prediction for this draft is in: press Next (N).")

    # --- the score ---

    def score(self) -> Score:
        """Over the drafts whose prediction was revealed (all of them once done)."""
        rows = [(g, self.keep(i), self.kept(i)) for i, g in enumerate(self.guesses)]
        numbers = [(g, a, k) for g, a, k in rows if g.keep is not None]
        calls = [(g, a, k) for g, a, k in rows if g.keep is None]
        close = sum(g.right(a, k) for g, a, k in numbers)
        right = sum(g.right(a, k) for g, a, k in calls)
        return Score(
            points=close + right,
            played=len(rows),
            numbers=len(numbers),
            close=close,
            calls=len(calls),
            calls_right=right,
            best_calls=sum(max(a, 1.0 - a) for _, a, _ in calls),
        )


def deal(trace: Trace | None, shown_round: int | None = None) -> Game:
    """A new game on a round of the trace, numbered from 1 as the page shows it (None: the
    first round with a rejection, else the first that verified a draft)."""
    if trace is None or trace.method != "spec" or not trace.rounds:
        raise ValueError("no speculative run yet: press Run, then play one of its rounds")
    keep_test(trace.settings)  # refuses a verification with no keep probability
    if shown_round is None:
        return Game(trace, first_round(trace))
    n, last = int(shown_round), len(trace.rounds)
    if not 1 <= n <= last:
        raise ValueError(f"round {n} does not exist: this run has rounds 1 to {last}")
    if not trace.rounds[n - 1].verified:
        raise ValueError(f"round {n} verified no draft: choose another round")
    return Game(trace, n - 1)


def next_round(game: Game) -> Game:
    """A new game on the next playable round of the same run (after the last: the first)."""
    rounds = playable_rounds(game.trace)
    later = [i for i in rounds if i > game.index]
    return Game(game.trace, (later or rounds)[0])


# --- the board --------------------------------------------------------------------------


def _html(name: str, *args: object) -> str:
    """The page's HTML from a macro of templates/verifier_game.html.j2."""
    return str(macro("verifier_game.html.j2", name)(*args))


def _context(game: Game) -> tuple[str, str, list[tuple[str, str]]]:
    """The output just before the round, then the round's drafts: played ones with their
    verdict once shown, the one in play marked, the rest plain (the draft proposed them
    all before the one target call): the lead, the text before, and (text, class) per
    chip."""
    rnd, trace = game.round, game.trace
    start = max(0, rnd.start - CONTEXT_TOKENS)
    before = "".join(trace.token_texts[start : rnd.start])
    if not before and not start:
        before = trace.prompt[-80:]
    lead = "…" if start or len(trace.prompt) > 80 else ""
    decided = game.at + (game.phase in ("verdict", "done"))  # drafts whose verdict is shown
    ended = decided == len(game.drafts)  # the rest were discarded untested
    chips = []
    for i, d in enumerate(rnd.drafted):
        shown = i < decided or ended
        cls = f"sv-{d.status}" if shown else ("sv-play-now" if i == game.at else "sv-play-hid")
        chips.append((d.text, cls))
    added = rnd.added
    if added is not None and game.phase == "done":
        chips.append((added.text, f"sv-{added.status}"))
    return lead, before, chips


def prob(x: float) -> str:
    """A probability on the board, with enough digits to compute p/q from (words.pq)."""
    return pq(x)


def _bar(name: str, value: float, cls: str) -> tuple[str, str, str, str]:
    """One probability as a bar: its name, width in %, class and the number shown."""
    width = max(0.0, min(1.0, value)) * 100
    return name, f"{width:.1f}", cls, prob(value)


def _meter(game: Game) -> tuple[str | None, str | None, str | None, str]:
    """The unit interval: the keep zone [0, a(x)) and the draw u once revealed, the
    visitor's number marked; before the reveal only a question mark. The zone's width,
    the visitor's mark and u's, in %, and a(x) shown."""
    d, g = game.drafts[game.at], game.guesses[game.at] if game.at < len(game.guesses) else None
    you = f"{g.keep * 100:.1f}" if g is not None and g.keep is not None else None
    if game.phase == "guess" or g is None:
        return None, you, None, "?"
    a = game.keep(game.at)
    u = f"{d.u * 100:.1f}" if d.u is not None else None
    return f"{a * 100:.1f}", you, u, num(a)


def draw_sentence(game: Game, i: int) -> str:
    """What the verification drew for draft i, with the true a(x) (plain text)."""
    d, a = game.drafts[i], game.keep(i)
    return verification_for(game.trace.settings).draw_text(d, a)


def verdict_sentence(game: Game, i: int) -> str:
    """The verdict on draft i, and what replaced it after a rejection (plain text)."""
    d, rnd = game.drafts[i], game.round
    drew_u = game.test.draw == "u" and d.u is not None  # a verification that draws u decided by it
    if d.status == "accepted":
        why = (
            "the sample is x"
            if d.target_sample is not None
            else "u < a(x)"
            if drew_u
            else "the verification keeps it"
        )
        line = f"Kept: {why}."
        if i == len(game.drafts) - 1 and len(game.drafts) == len(rnd.drafted):
            added = rnd.added
            if added is None:
                line += " The round ended on this accepted end-of-text token."
            else:
                line += (
                    f" Every draft kept: the same target call adds the bonus {added.text!r}, "
                    f"drawn from p (p = {num(added.p)})."
                )
        return line
    why = (
        "the sample is not x"
        if d.target_sample is not None
        else "u ≥ a(x)"
        if drew_u
        else "the verification does not keep it"
    )
    line = f"Rejected: {why}."
    added = rnd.added
    if added is not None and added.status == "resampled":
        verification = verification_for(game.trace.settings)
        source = added.source or verification.fallback_source
        line += (
            f" In its place the round emits {added.text!r}, drawn from {source_text(source)} "
            f"(probability {num(added.prob)} there)."
        )
    later = len(rnd.drafted) - len(game.drafts)
    if later:
        line += f" The {later} later draft(s) are discarded untested."
    return line


def round_sentence(game: Game) -> str:
    """What the whole round did, once done (plain text)."""
    rnd = game.round
    kept, tested = rnd.n_accepted, len(game.drafts)
    added = rnd.added
    tail = (
        "and no added token (it ended on an accepted end-of-text token)"
        if added is None
        else f"then the {added.status} token {added.text!r}"
    )
    return (
        f"Round done: {kept} of {tested} tested draft(s) kept, {tail}: {rnd.emitted} token(s) "
        f"from one target call. Next (N) deals the next round."
    )


def _ask(game: Game) -> str:
    d = game.drafts[game.at]
    return (
        f"How likely does the verification keep {d.text!r}? Type a(x) from 0 to 1, or call it: "
        f"{KEYS['kept']} likely kept, {KEYS['rejected']} likely rejected."
    )


def _steps(game: Game) -> list[str]:
    """The sentences of the draft in play, as far as the phase has revealed."""
    if game.phase == "guess":
        return [_ask(game)]
    g = game.guesses[game.at]
    lines = [f"You said {g.words}.", draw_sentence(game, game.at)]
    if game.phase in ("verdict", "done"):
        a, kept = game.keep(game.at), game.kept(game.at)
        mark = "right" if g.right(a, kept) else "not right"
        lines += [verdict_sentence(game, game.at), f"Your prediction: {mark}."]
    return lines


def score_table(game: Game) -> str:
    """One row per played draft: token, p, q, what was said, a(x), the verdict, the point."""
    return _html("score_table", _score_rows(game))


def _score_rows(game: Game) -> list[tuple[str, ...]]:
    rows = []
    shown = len(game.guesses) if game.phase in ("verdict", "done") else game.at
    for i in range(shown):
        d, g, a, kept = game.drafts[i], game.guesses[i], game.keep(i), game.kept(i)
        point = "✓" if g.right(a, kept) else "✗"
        rows.append((d.text, prob(d.p), prob(d.q), g.words, num(a), d.status, point))
    return rows


def board_html(game: Game | None) -> str:
    """The whole board for a game (None: how to start)."""
    if game is None:
        return _html("idle")
    rnd, trace, test = game.round, game.trace, game.test
    n = len(rnd.drafted)  # proposed: how many get tested is for the verdicts to tell
    where = f"Round {round_number(rnd.index)} of {len(trace.rounds)} · {test.label} · " + (
        "round done" if game.phase == "done" else f"draft {game.at + 1} of {n} proposed"
    )
    greedy = " (greedy: p and q are one-hot)" if trace.settings.is_greedy else ""
    card = None
    if game.phase != "done":
        d = game.drafts[game.at]
        card = {
            "text": d.text,
            "bars": [_bar("p(x)", d.p, "sv-play-p"), _bar("q(x)", d.q, "sv-play-q")],
            "meter": _meter(game),
            "steps": _steps(game),
        }
    score = game.score()
    shown = score if game.phase in ("verdict", "done") else _score_before(game)
    values = {
        "phase": game.phase,
        "at": game.at,
        "points": score.points,
        "played": score.played,
        "where": where,
        "test": "The test: " + test.sentence(trace.settings) + greedy,
        "context": _context(game),
        "card": card,
        "done": round_sentence(game) if card is None else "",
        "note": game.note,
        "total": shown.line() if shown.played else "",
        "final": game.phase == "done",
        "rows": _score_rows(game),
    }
    return _html("board", values)


def _score_before(game: Game) -> Score:
    """The score without the draft whose verdict is not shown yet."""
    shown = game.at if game.phase != "done" else len(game.guesses)
    return replace(game, guesses=game.guesses[:shown]).score()


def _drafted_count(rnd: Round) -> str:
    """What the round drafted: a chain's drafts, or a tree's nodes and the path shown."""
    if rnd.nodes:
        return (
            f"a tree of {len(rnd.nodes)} drafted node(s), played along its path of "
            f"{len(rnd.drafted)}"
        )
    return f"{len(rnd.drafted)} proposed draft(s)"


def lesson_line(game: Game) -> str:
    """What the lesson says once a round is dealt (an HTML paragraph, escaped)."""
    rnd = game.round
    said = (
        f"Round {round_number(rnd.index)} of your run is on the board in the Decision tab: "
        f"{_drafted_count(rnd)}, judged under {game.test.label}. For each tested one, say "
        f"a(x) or press {KEYS['kept']} / {KEYS['rejected']}: the draw is revealed; "
        f"{KEYS['next']} shows the verdict, {KEYS['next']} again the next draft. A number "
        f"scores within {CLOSE:g} of a(x); a call scores when the verdict agrees."
    )
    return _html("paragraph", said)
