"""What one target call produced (``Update``, yielded by every run): shared by the chain's
rounds and the tree's (specviz.rounds), and the engine's loop (specviz.engine). The clock
they read is specviz.clock."""

from __future__ import annotations

from dataclasses import dataclass

from specviz.trace import Round


@dataclass
class Update:
    """What one target call produced."""

    round: Round | None  # the completed round (spec); None for an ar step
    new_ids: list[int]
    n_tokens: int  # output tokens so far
    t_s: float  # seconds since the start
