"""What a hub model weighs, read before any of it downloads, and what this server may hold.

A visitor who types a hub id must not be able to fill the server's disk or memory: the
files a load would read are picked as transformers picks them (:func:`loaded_files`: the
weights, a sharded checkpoint's index and every shard it maps, config.json, the
tokenizer's files) and sized from the hub's metadata (``HfApi.model_info(id,
files_metadata=True)``, plus a download of the small JSON files that decide the pick: the
config and an index), or, with the hub offline (HF_HUB_OFFLINE) or unreachable, from the
files already in the local hub cache. Weights that cannot be sized are refused, and so is a
model above the :class:`Budget`, each with one line. The budget is SPECVIZ_MODEL_BUDGET_GB,
else a share of the memory the weights go to (the GPU's where they load onto CUDA, else
RAM, capped by the container's cgroup limit, which psutil does not see).

The hub's own errors become one line each: a gated repository, a missing (or private) one.
:data:`LOADS` lets one hub load run at a time; a second visitor is told so at once rather
than queued behind a download of unknown length.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

SAFE, SAFE_INDEX = "model.safetensors", "model.safetensors.index.json"
BIN, BIN_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
CONFIG = "config.json"
# what a load reads beside the weights: the model's configuration and the tokenizer's files
# (AutoTokenizer's, at the repository's top level, those present)
BESIDE = (
    CONFIG,
    "generation_config.json",
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
)
JSON_MAX_BYTES = 32_000_000  # a config or an index read to size a model (the largest real
# index, a thousand shards' weight map, is under 10 MB)


@dataclass(frozen=True)
class Repo:
    """A repository's files (name: size in bytes, None where unknown; names with their
    folders) and how to read one of them whole (a small JSON file)."""

    files: dict[str, int | None]
    read: Callable[[str], bytes]


def loaded_files(repo: Repo) -> dict[str, int | None]:
    """The files a load of the repository reads (name: size), picked as transformers 5
    picks them (modeling_utils._get_resolved_checkpoint_files, with no variant, no subfolder
    and use_safetensors unset, as specviz.models loads): the file config.json's
    ``transformers_weights`` names, else model.safetensors, else the shards its index
    (model.safetensors.index.json) maps, else pytorch_model.bin, else the shards of
    pytorch_model.bin.index.json; a shard's name is the index's, folders included. Then the
    index read, config.json and the tokenizer's files present (:data:`BESIDE`).

    Raises ValueError (one line, without the model id) where the weights cannot be sized: no
    weight file transformers loads, a config or an index that cannot be read, a file named
    that is not in the repository."""
    files = repo.files
    named = _json(repo, CONFIG).get("transformers_weights") if CONFIG in files else None
    if named is not None and named != SAFE:
        if not isinstance(named, str) or not (
            named.endswith((".safetensors", ".safetensors.index.json"))
            or named == "adapter_model.bin"
        ):
            raise ValueError(f"its config.json names weights transformers refuses: {named!r:.80}")
        if named not in files:
            raise ValueError(f"its config.json names {named!r:.80}, not in the repository")
        chosen = [named]
    else:
        chosen = next(([n] for n in (SAFE, SAFE_INDEX, BIN, BIN_INDEX) if n in files), [])
    if not chosen:
        raise ValueError(
            f"it has no weight file transformers loads ({SAFE}, {SAFE_INDEX}, {BIN} or "
            f"{BIN_INDEX} at its top level)"
        )
    if chosen[0].endswith(".index.json"):  # sharded: the index, then the shards it maps
        chosen += _shards(repo, chosen[0])
    out = {name: files[name] for name in chosen}
    out.update({name: files[name] for name in BESIDE if name in files})
    return out


def _shards(repo: Repo, index: str) -> list[str]:
    """The shards an index maps (its weight_map's values), each in the repository."""
    weight_map = _json(repo, index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"its {index} maps no weights (no weight_map)")
    for shard in weight_map.values():
        if not isinstance(shard, str):
            raise ValueError(f"its {index} maps a weight to {shard!r:.40}, not a file name")
        if shard not in repo.files:
            raise ValueError(f"its {index} names {shard!r:.80}, which is not in the repository")
    return sorted(set(weight_map.values()))


def _json(repo: Repo, name: str) -> dict[str, Any]:
    """A small JSON object of the repository, read whole (ValueError: one line)."""
    size = repo.files.get(name)
    if size is None:
        raise ValueError(f"the size of its {name} is not known, so it was not read")
    if size > JSON_MAX_BYTES:
        raise ValueError(
            f"its {name} is {size_text(size)}, more than the {size_text(JSON_MAX_BYTES)} "
            "this server reads to size a model"
        )
    try:
        data = repo.read(name)
    except Exception as exc:  # a download that failed: the network, the hub, the disk
        raise ValueError(f"its {name} could not be fetched: {_line(exc)}") from None
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"its {name} could not be read: {_line(exc)}") from None
    if not isinstance(body, dict):
        raise ValueError(f"its {name} could not be read: not a JSON object")
    return body


def _line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def weight_bytes(model_id: str) -> int:
    """The bytes a load of model_id reads (:func:`loaded_files`: its weights as transformers
    picks them, config.json, the tokenizer's files), sized from the hub's metadata, or from
    the local hub cache where the hub is offline or cannot be reached. Raises ValueError
    (one line): a gated or missing repository, weights that cannot be sized."""
    import huggingface_hub.constants

    repo = None
    if not huggingface_hub.constants.HF_HUB_OFFLINE:
        repo, failed = _hub_repo(model_id)
    else:
        failed = "the hub is offline here: HF_HUB_OFFLINE=1"
    if repo is None:
        repo = _cached_repo(model_id)
        if repo is None:
            raise ValueError(
                f"refused {model_id}: its size could not be read ({failed}) and it is not in "
                "this server's hub cache"
            )
    try:
        files = loaded_files(repo)
    except ValueError as exc:
        raise ValueError(f"refused {model_id}: {exc}") from None
    unknown = sorted(name for name, size in files.items() if size is None)
    if unknown:
        raise ValueError(f"refused {model_id}: the size of its {unknown[0]} is not known")
    return sum(size for size in files.values() if size is not None)


def _hub_repo(model_id: str) -> tuple[Repo | None, str]:
    """The repository's files from the hub's metadata (a JSON file read is downloaded, at
    the revision the metadata describes; no weight file is), or (None, why) where the hub
    could not be asked; a gated or missing repository raises."""
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
        return None, _line(exc)
    revision = getattr(info, "sha", None)

    def read(name: str) -> bytes:
        import huggingface_hub

        return Path(huggingface_hub.hf_hub_download(model_id, name, revision=revision)).read_bytes()

    return Repo({s.rfilename: s.size for s in info.siblings or []}, read), ""


def _cached_repo(model_id: str) -> Repo | None:
    """The files of model_id's main revision in the local hub cache (its folders'
    included), or None where it is not cached."""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(model_id, CONFIG)
    if not isinstance(config, str):
        return None
    snapshot = Path(config).parent
    files = {
        f.relative_to(snapshot).as_posix(): f.stat().st_size
        for f in sorted(snapshot.rglob("*"))
        if f.is_file()
    }
    return Repo(files, lambda name: (snapshot / name).read_bytes())


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
