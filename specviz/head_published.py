"""A published EAGLE-1 head, in the layout of the EAGLE authors' releases (e.g.
yuhuili/EAGLE-LLaMA3.1-Instruct-8B for meta-llama/Llama-3.1-8B-Instruct), loaded into a
:class:`~specviz.drafters.head.FeatureHead` for its target.

The layout: a directory (or a hub repository) holding ``config.json``, a Llama config of one
layer (``num_hidden_layers`` 1) whose optional ``bias`` says whether ``fc`` has a bias (the
authors' loader reads it with True as its default; their Llama 3.1 head says false), and
``pytorch_model.bin`` (or ``model.safetensors``) with the keys ``fc.weight`` (``fc.bias``
where bias), ``layers.0.self_attn.{q,k,v,o}_proj.weight``,
``layers.0.mlp.{gate,up,down}_proj.weight`` and ``layers.0.post_attention_layernorm.weight``:
no ``input_layernorm`` (EAGLE-1 drops it) and no output layer (the target's is used). Some
releases also carry the target's ``embed_tokens.weight``: it is checked against the
target's embedding's shape and not kept (the head uses the target's own). The decoder layer
is built from the release's config (its sizes, rope_theta and rope scaling, as the authors'
code builds it), not from the target's.

A hub id is read through huggingface_hub's cache: with HF_HUB_OFFLINE=1 nothing is
downloaded, and an id not in the cache is refused in one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from specviz.drafters.head import FeatureHead

CONFIG = "config.json"
WEIGHTS = ("pytorch_model.bin", "model.safetensors")  # the authors' loader tries them so
EMBED = "embed_tokens.weight"
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def _files(source: str | Path) -> tuple[Path, Path]:
    """The release's config and weights files: in a directory, or in the hub's cache
    (downloaded there unless HF_HUB_OFFLINE=1)."""
    local = Path(source)
    if local.is_dir():
        weights = [local / w for w in WEIGHTS if (local / w).is_file()]
        if not (local / CONFIG).is_file() or not weights:
            raise ValueError(
                f"{local} holds no EAGLE head: it needs {CONFIG} and {' or '.join(WEIGHTS)}"
            )
        return local / CONFIG, weights[0]
    text = str(source)
    if not _HUB_ID.match(text) or ".." in text:
        raise ValueError(f"{text!r} is neither a directory nor a hub id like 'owner/name'")
    from huggingface_hub import hf_hub_download

    try:
        config = Path(hf_hub_download(text, CONFIG))
    except Exception as exc:
        raise ValueError(f"could not read {CONFIG} of {text}: {_first_line(exc)}") from None
    why = ""
    for name in WEIGHTS:
        try:
            return config, Path(hf_hub_download(text, name))
        except Exception as exc:
            why = _first_line(exc)
    raise ValueError(f"could not read the weights of {text}: {why}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def read_state(weights: Path) -> dict[str, torch.Tensor]:
    """A release's state dict (a torch pickle read with weights_only, or safetensors)."""
    try:
        if weights.suffix == ".safetensors":
            from safetensors.torch import load_file

            return dict(load_file(str(weights)))
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"unreadable head weights {weights}: {_first_line(exc)}") from None
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise ValueError(f"{weights} is not a state dict of tensors")
    return state


def layer_config(release: dict[str, Any]) -> Any:
    """The transformers config of the release's decoder layer (its model type, llama by
    default), from the release's config.json as it stands."""
    from transformers import AutoConfig

    fields = {k: x for k, x in release.items() if k not in ("bias", "architectures")}
    model_type = fields.pop("model_type", "llama")
    try:
        return AutoConfig.for_model(model_type, **fields)
    except Exception as exc:
        raise ValueError(f"unusable EAGLE head config: {_first_line(exc)}") from None


def load_published(source: str | Path, target_model: torch.nn.Module) -> FeatureHead:
    """The EAGLE-1 head released at source (a directory or a hub id) for target_model, float32
    on the target's device, its embedding and output layer the target's. ValueError, one
    line, for a release that does not fit the target (sizes, layers, keys, shapes)."""
    config_path, weights = _files(source)
    try:
        release = json.loads(config_path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"unreadable {config_path}: {_first_line(exc)}") from None
    if not isinstance(release, dict):
        raise ValueError(f"{config_path} is not a JSON object")
    layers = release.get("num_hidden_layers", 1)
    if layers != 1:
        raise ValueError(f"an EAGLE-1 head has one decoder layer; {config_path} says {layers}")
    embed = target_model.get_input_embeddings()
    hidden = int(embed.weight.shape[1])
    if release.get("hidden_size", hidden) != hidden:
        raise ValueError(
            f"the head's hidden size {release.get('hidden_size')} is not the target's {hidden}"
        )
    state = read_state(weights)
    extra = state.pop(EMBED, None)
    if extra is not None and tuple(extra.shape) != tuple(embed.weight.shape):
        raise ValueError(
            f"the release's {EMBED} has shape {list(extra.shape)}, the target's embedding "
            f"{list(embed.weight.shape)}: the head was trained for another target"
        )
    bias = bool(release.get("bias", True))
    head = FeatureHead(
        layer_config(release), embed, target_model.get_output_embeddings(), bias=bias
    )
    head.load_own_state(state)
    return head.to(device=embed.weight.device, dtype=torch.float32).eval()
