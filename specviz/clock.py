"""The clock every timing reads: perf_counter once the device has finished its queued work
(a CUDA sync; nothing to wait for on a CPU), so that a time read after a call counts the
call's work and not only its launch."""

from __future__ import annotations

import time

import torch


def clock(device: torch.device) -> float:
    """perf_counter after the device has finished its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
