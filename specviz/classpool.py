"""A class playing the verifier together: the answers of everyone on one link (a shared run
or a recorded lesson), pooled per tested draft, so that the lecturer's board shows how the
class called it beside the true keep probability and what the draw did.

An answer is a call ("likely kept" / "likely rejected") or a said keep probability a(x), for
one tested draft: (link, run, round, draft). Answers are anonymous: a voter is an opaque key
the server makes per page (never a name or an address), kept only so that a visitor who
answers the same draft again replaces their answer instead of adding one. Bounded: at most
`max_answers` answers per link (later ones are refused with a line that says so) and
`max_links` links (the least recently answered goes first). In memory only; no gradio, no
model.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

MAX_LINKS = 64
MAX_ANSWERS = 2000  # per link, over all its drafts


@dataclass(frozen=True)
class Tally:
    """The class's answers on one draft: calls kept and rejected, and the numbers said."""

    kept: int = 0
    rejected: int = 0
    numbers: int = 0
    number_sum: float = 0.0

    @property
    def calls(self) -> int:
        return self.kept + self.rejected

    @property
    def answers(self) -> int:
        return self.calls + self.numbers

    @property
    def kept_share(self) -> float | None:
        """The share of the calls that said kept (None without a call)."""
        return self.kept / self.calls if self.calls else None

    @property
    def mean_number(self) -> float | None:
        return self.number_sum / self.numbers if self.numbers else None


Draft = tuple[str, int, int]  # (the run's key, the round's index, the tested draft's index)


class ClassPool:
    """The answers of each link, by draft and voter (bounded; thread-safe)."""

    def __init__(self, max_links: int = MAX_LINKS, max_answers: int = MAX_ANSWERS) -> None:
        self.max_links, self.max_answers = max_links, max_answers
        self._links: OrderedDict[str, dict[Draft, dict[str, bool | float]]] = OrderedDict()
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def answer(self, link: str, draft: Draft, voter: str, said: bool | float) -> None:
        """Pool one answer: True / False a call (kept / rejected), a float a said a(x) in
        [0, 1]. ValueError with one line when the link's pool is full."""
        if not isinstance(said, bool) and not 0.0 <= float(said) <= 1.0:
            raise ValueError(f"a keep probability is from 0 to 1, got {said!r}")
        with self._lock:
            answers = self._links.get(link)
            if answers is None:
                answers = self._links[link] = {}
                self._counts[link] = 0
                while len(self._links) > self.max_links:
                    old, _ = self._links.popitem(last=False)
                    self._counts.pop(old, None)
            self._links.move_to_end(link)
            votes = answers.setdefault(draft, {})
            if voter not in votes:
                if self._counts[link] >= self.max_answers:
                    raise ValueError(
                        f"this link's class has given {self.max_answers} answers, as many as "
                        "this server pools per link: yours is not counted"
                    )
                self._counts[link] += 1
            votes[voter] = said if isinstance(said, bool) else float(said)

    def tally(self, link: str, draft: Draft) -> Tally:
        """The answers pooled on one draft of a link (none: an empty Tally)."""
        with self._lock:
            votes = list(self._links.get(link, {}).get(draft, {}).values())
        numbers = [vote for vote in votes if not isinstance(vote, bool)]
        return Tally(
            kept=sum(vote is True for vote in votes),
            rejected=sum(vote is False for vote in votes),
            numbers=len(numbers),
            number_sum=float(sum(numbers)),
        )

    def links(self) -> int:
        with self._lock:
            return len(self._links)


def run_key(token_ids: list[int], prompt: str) -> str:
    """A run's key among a link's runs (a recorded lesson has several): its prompt's and
    tokens' hash and its length."""
    return f"{len(token_ids)}:{hash((prompt, tuple(token_ids))) & 0xFFFFFFFF:08x}"
