"""What one target call produced (``Update``, yielded by every run) and the clock runs read
(perf_counter after the device's queued work): shared by the chain's rounds
and the tree's (specviz.rounds), and the engine's loop (specviz.engine)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from specviz.trace import Round


@dataclass
class Update:
    """What one target call produced."""

    round: Round | None  # the completed round (spec); None for an ar step
    new_ids: list[int]
    n_tokens: int  # output tokens so far
    t_s: float  # seconds since the start


def clock(device: torch.device) -> float:
    """perf_counter after the device has finished its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
