"""What a hub model weighs, read before any of it downloads, and what this server may hold.

A visitor who types a hub id must not be able to fill the server's disk or memory: the
size of a repository's weight files is read from the hub's metadata (one API call,
``HfApi.model_info(id, files_metadata=True)``), or, with the hub offline (HF_HUB_OFFLINE)
or unreachable, from the files already in the local hub cache; a model above the
:class:`Budget` is refused with one line naming both. The budget is SPECVIZ_MODEL_BUDGET_GB,
else a share of the memory the weights go to (the GPU's where they load onto CUDA, else
RAM, capped by the container's cgroup limit, which psutil does not see).

The hub's own errors become one line each: a gated repository, a missing (or private) one.
:data:`LOADS` lets one hub load run at a time; a second visitor is told so at once rather
than queued behind a download of unknown length.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from specviz.config.deployment import model_budget_gb

SHARE = 0.4  # of the memory the weights go to: the rest holds KV caches, activations, a
# float32 copy of a 16-bit checkpoint on a CPU without bf16, and transformers' load peak
CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def size_text(n: float) -> str:
    """Bytes as a person reads them: GB (1e9) from 1 GB, MB below."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


@dataclass(frozen=True)
class Budget:
    """The weights this server may hold at once, and where that figure comes from."""

    bytes: int
    why: str  # "40 % of its memory", "SPECVIZ_MODEL_BUDGET_GB"

    def text(self) -> str:
        return f"{size_text(self.bytes)} ({self.why})"


def budget(device: torch.device, spread: bool = False) -> Budget:
    """SPECVIZ_MODEL_BUDGET_GB, else SHARE of the memory the weights go to: the GPU's (every
    GPU's, where a device map spreads a target), else RAM."""
    gb = model_budget_gb()
    if gb is not None:
        return Budget(int(gb * 1e9), "SPECVIZ_MODEL_BUDGET_GB")
    total, where = ram_bytes(), "its memory"
    if device.type == "cuda":
        try:
            gpus = range(torch.cuda.device_count()) if spread else [device.index or 0]
            total = sum(torch.cuda.get_device_properties(i).total_memory for i in gpus)
            where = "its GPUs' memory" if spread else "its GPU's memory"
        except (AssertionError, RuntimeError):  # no GPU attached yet (ZeroGPU's start-up)
            pass
    return Budget(int(total * SHARE), f"{SHARE * 100:.0f} % of {where}")


def ram_bytes() -> int:
    """The RAM this process may use: psutil's total, or the cgroup's limit where lower (a
    container on Spaces sees the host's memory through psutil)."""
    import psutil

    total = int(psutil.virtual_memory().total)
    for path in CGROUP_LIMITS:
        try:
            raw = Path(path).read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and 0 < int(raw) < total:
            total = int(raw)
    return total


# --- what a repository weighs ------------------------------------------------------------


def weight_files(files: dict[str, int | None]) -> dict[str, int | None]:
    """The files transformers loads a model's weights from, of a repository's (name: size):
    the top level's *.safetensors, or where there are none its *.bin (a folder's copies, such
    as original/ or onnx/, are never loaded)."""
    top = {n: s for n, s in files.items() if "/" not in n}
    tensors = {n: s for n, s in top.items() if n.endswith(".safetensors")}
    return tensors or {n: s for n, s in top.items() if n.endswith(".bin")}


def weight_bytes(model_id: str) -> int:
    """The bytes of model_id's weight files, read from the hub's metadata, or from the local
    hub cache where the hub is offline or cannot be reached. Raises ValueError (one line):
    a gated or missing repository, no weight files, sizes unknown."""
    import huggingface_hub.constants

    files = None
    if not huggingface_hub.constants.HF_HUB_OFFLINE:
        files, failed = _hub_files(model_id)
    else:
        failed = "the hub is offline here: HF_HUB_OFFLINE=1"
    if files is None:
        files = _cached_files(model_id)
        if files is None:
            raise ValueError(
                f"refused {model_id}: its size could not be read ({failed}) and it is not in "
                "this server's hub cache"
            )
    weights = weight_files(files)
    if not weights:
        raise ValueError(
            f"refused {model_id}: it has no weight files transformers loads "
            "(*.safetensors or *.bin at its top level)"
        )
    if any(s is None for s in weights.values()):
        raise ValueError(f"refused {model_id}: the hub did not give the size of its weights")
    return sum(s for s in weights.values() if s is not None)


def _hub_files(model_id: str) -> tuple[dict[str, int | None] | None, str]:
    """(name: size) of the repository's files from the hub's metadata (no file downloads),
    or (None, why) where the hub could not be asked; a gated or missing repository raises."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        info = HfApi().model_info(model_id, files_metadata=True)
    except GatedRepoError:  # before its base class: a gated repository exists
        raise ValueError(
            f"refused {model_id}: the repository is gated on the hub, and this server has no "
            "access to it"
        ) from None
    except RepositoryNotFoundError:
        raise ValueError(
            f"refused {model_id}: no model of that id on the hub (or it is private)"
        ) from None
    except Exception as exc:  # no network, a timeout, the hub down: the cache may know
        text = str(exc).strip().splitlines()
        return None, text[0] if text else type(exc).__name__
    return {s.rfilename: s.size for s in info.siblings or []}, ""


def _cached_files(model_id: str) -> dict[str, int | None] | None:
    """(name: size) of the files of model_id's main revision in the local hub cache, or None
    where it is not cached."""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(model_id, "config.json")
    if not isinstance(config, str):
        return None
    snapshot = Path(config).parent
    return {f.name: f.stat().st_size for f in snapshot.iterdir() if f.is_file()}


def check_fits(model_ids: list[str], limit: Budget) -> dict[str, int]:
    """Each model's weight bytes, after refusing (ValueError, one line naming the size and
    the budget) any above the budget, and a set of models above it together."""
    sizes: dict[str, int] = {}
    for model_id in dict.fromkeys(model_ids):
        sizes[model_id] = n = weight_bytes(model_id)
        if n > limit.bytes:
            raise ValueError(
                f"refused {model_id}: {size_text(n)} of weights, above this server's budget "
                f"of {limit.text()}"
            )
    total = sum(sizes.values())
    if len(sizes) > 1 and total > limit.bytes:
        raise ValueError(
            f"refused {' with '.join(sizes)}: {size_text(total)} of weights together, above "
            f"this server's budget of {limit.text()}"
        )
    return sizes


# --- one load at a time ------------------------------------------------------------------


class OneLoad:
    """At most one hub load at a time: :meth:`claim` while loading; a second claim is
    refused at once, with one line naming what is loading."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.what = ""

    @contextmanager
    def claim(self, what: str) -> Iterator[None]:
        if not self._lock.acquire(blocking=False):
            raise ValueError(
                f"another model is loading ({self.what or 'a hub pair'}); try again when it "
                "has loaded"
            )
        self.what = what
        try:
            yield
        finally:
            self.what = ""
            self._lock.release()

    def busy(self) -> bool:
        return self._lock.locked()


LOADS = OneLoad()
