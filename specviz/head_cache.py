"""Where a target's trained feature head is kept: one directory under cache_root() per target
and head shape, named by a digest of the target's weights (names, shapes, dtypes and values)
and of the head's hyper-parameters, so that a head is never used beside a target it was not
trained on. `python -m specviz train-head` (specviz.head_train) writes there;
specviz.drafters.head.head_for reads :func:`head_file` of the pair's target.

Nothing here imports torch: a model is read through its own methods (``state_dict``), and
its digest is computed once per loaded model (its weights are read-only once loaded).
"""

from __future__ import annotations

import hashlib
import json
import weakref
from pathlib import Path
from typing import Any

from specviz.paths import cache_root

# The layout of a head file and of the head it fills: bump when either changes, so that an
# old file is never read into a head of another shape.
HEAD_FORMAT = 1
HEAD_NAME = "head.safetensors"  # the head's own weights: fc.weight, layers.0.* (EAGLE's names)
RECORD_NAME = "head.json"  # how it was trained (specviz.head_train)

# What `python -m specviz train-head` does by default, kept here (no torch) so that the
# command line's parser states them without loading torch: the whole command, loading,
# answers, training and the last held-out measurement, finishes within 30 minutes on 2
# cores with margin; the target generates this many answer tokens for training.
DEFAULT_BUDGET_MINUTES = 25.0
DEFAULT_TOKENS = 60_000

_digests: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def weights_digest(model: Any) -> str:
    """A hex digest of a model's weights: every state_dict entry's name, dtype, shape and
    bytes (blake2b); computed once per model object."""
    known = _digests.get(model)
    if known is not None:
        return known
    h = hashlib.blake2b(digest_size=16)
    for name, t in model.state_dict().items():
        value = t.detach().cpu()
        h.update(f"{name}|{value.dtype}|{tuple(value.shape)}|".encode())
        # float32 values as they are; a 16-bit float's value exactly, widened to float32
        wide = value if str(value.dtype) == "torch.float32" else value.float()
        h.update(memoryview(wide.contiguous().numpy()).cast("B"))
    digest = h.hexdigest()
    _digests[model] = digest
    return digest


def head_params(bias: bool = False) -> dict[str, Any]:
    """The head's hyper-parameters that shape its weights (and so its file)."""
    return {"format": HEAD_FORMAT, "layers": 1, "fc_bias": bool(bias)}


def head_key(target_model: Any, bias: bool = False) -> str:
    """The directory name of a target's head: its weights' digest, then the head's
    hyper-parameters' digest."""
    params = json.dumps(head_params(bias), sort_keys=True).encode()
    return (
        f"{weights_digest(target_model)[:20]}-{hashlib.blake2b(params, digest_size=4).hexdigest()}"
    )


def head_dir(target_model: Any, bias: bool = False) -> Path:
    """Where a target's head, its record, its checkpoint and its training data are kept."""
    return cache_root() / "heads" / head_key(target_model, bias)


def head_file(target_model: Any, bias: bool = False) -> Path:
    """The trained head's weights for this target (it may not exist yet)."""
    return head_dir(target_model, bias) / HEAD_NAME


def record_file(target_model: Any, bias: bool = False) -> Path:
    """The JSON record of the head's training (it may not exist yet)."""
    return head_dir(target_model, bias) / RECORD_NAME


def cached_head(target_model: Any) -> Path | None:
    """The head file `train-head` saved for this target on this machine (fc with or without
    a bias), or None."""
    files = (head_file(target_model, bias) for bias in (False, True))
    return next((f for f in files if f.is_file()), None)


def file_digest(path: Path) -> str:
    """A head file's digest: what the draft choice's record names the head it measured by."""
    return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()
