"""The EAGLE drafter (EAGLE-1: Li, Wei, Zhang, Zhang 2024, "EAGLE: Speculative Sampling
Requires Rethinking Feature Uncertainty", arXiv 2401.15077): a one-layer head drafts from the
target's own features instead of from a small model's tokens.

Features are the target's last hidden state, after its final norm: what its output layer
reads, so ``lm_head(f_t)`` is the target's logit row at position t. The head
(:class:`FeatureHead`) at position t reads the pair (f_t, x_{t+1}), the feature of one
position and the token that followed it, and predicts f_{t+1}: ``fc`` maps the embedding of
x_{t+1} and f_t (embedding first, as EAGLE's releases) to one vector, one decoder layer of
the target's own architecture (its input norm dropped, as EAGLE-1 drops it) reads it with a
KV cache of its own, and the target's output layer turns a predicted feature into a row of
logits. The target's embeddings and output layer are shared and frozen, never part of the
head's own state.

The drafter (:class:`HeadDrafter`, registered as "eagle") keeps the head's cache over the
accepted sequence, fed with the target's own features: after each verify call it feeds the
pair (f_t, x_{t+1}) of every newly accepted position (the target keeps its last hidden
state at every row of its calls: specviz.lm), the drafts of the round before, which read
predicted features, cropped first. It then drafts autoregressively from its own predicted
features, f-hat_{t+1} = head(f-hat_t, x_{t+1}), each draft drawn from
q = warp(lm_head(f-hat)) with the draft's warp: a chain, a tree or a dynamic tree, exactly as
the model drafter drafts them (specviz.drafters.model and specviz.tree drive the head through
:class:`HeadLM`, which gives it a model cache's interface over tokens). Every draft's q is
the row it was drawn from, so every lossless verification stays exact, however good or bad
the head is.

Its first round drafts nothing (stop "prompt"): the target's features of the prompt arrive
with the first verify call. At each round's end the last emitted token (the resampled or
bonus one) has no feature yet, since the target has not read it; its head input is the
target's feature of the position before it, which the verify call gave, so the next round
drafts at once.

The target's features come from its own calls: eager, or on the compiled path's
ahead-of-time packages (``aoti``, what ``auto`` takes on a CPU), which return them beside
the logits. torch.compile's forwards give none: a run on a backend of theirs that the
request named is refused in one line before any model call (the request check,
specviz.drafters.check_drafter; run it with ``--compile off``), and one "auto" chose opens
its target eager (specviz.engine.Run.open_lm, which says so in the trace). A target's cache that
still gives none (a cache shared by the distribution check hands out stored rows without
features) is refused in one line at its first round's end, before any draft. Where the
head comes from: :func:`head_for` (one attached to the pair, or the one
``python -m specviz train-head`` saved for the target's weights on this machine).
"""

from __future__ import annotations

import copy
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import DynamicCache

from specviz.clock import clock
from specviz.config import Warp
from specviz.drafters.base import Draft, TargetOut
from specviz.drafters.model import ModelDrafter
from specviz.lm import attention_mask_4d, common_prefix, input_device, keep_slots
from specviz.tree import TreeDraft

NAME = "eagle"  # its name in the drafter registry (specviz.drafters)
OWN = ("fc.", "layers.0.")  # the head's own state: EAGLE's releases' key names
TRAIN_HINT = "train one with `python -m specviz train-head`"


def _architecture(config: Any) -> tuple[type, type]:
    """The decoder layer class and the rotary embedding class of a transformers config's
    model (LlamaDecoderLayer and LlamaRotaryEmbedding for a LlamaConfig)."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    try:
        model_cls = MODEL_MAPPING[type(config)]
    except KeyError:
        raise ValueError(f"no transformers model for {type(config).__name__}") from None
    module = sys.modules[model_cls.__module__]
    layer_names = [n for n in (model_cls._no_split_modules or []) if n.endswith("DecoderLayer")]
    rotary_names = [n for n in dir(module) if n.endswith("RotaryEmbedding")]
    if not layer_names or not rotary_names:
        raise ValueError(f"{model_cls.__name__} has no decoder layer with a rotary embedding")
    return getattr(module, layer_names[0]), getattr(module, rotary_names[0])


def _param_like(module: nn.Module) -> torch.Tensor | None:
    return next(iter(module.parameters()), None)


class FeatureHead(nn.Module):
    """EAGLE-1's head for a target: ``fc`` = Linear(2H, H) on cat(embed(next_ids), features),
    then one decoder layer of the target's architecture whose input norm is an identity,
    with the target's rotary embedding; no final norm. ``embed`` and ``lm_head`` are the
    target's, shared and frozen: not submodules, so neither in ``parameters()`` nor in
    :meth:`own_state`."""

    def __init__(
        self, config: Any, embed: nn.Module, lm_head: nn.Module, bias: bool = False
    ) -> None:
        super().__init__()
        config = copy.deepcopy(config.get_text_config())
        if getattr(config, "_attn_implementation", None) not in ("sdpa", "eager"):
            config._attn_implementation = "sdpa"
        self.config = config  # attention_mask_4d reads its attention implementation
        layer_cls, rotary_cls = _architecture(config)
        h = config.hidden_size
        self.fc = nn.Linear(2 * h, h, bias=bias)
        layer = layer_cls(config, layer_idx=0)
        layer.input_layernorm = nn.Identity()  # EAGLE-1 drops its first layer's input norm
        self.layers = nn.ModuleList([layer])
        self.rotary_emb = rotary_cls(config=config)
        self._shared = (embed, lm_head)  # a tuple: the target's, never registered here

    @property
    def hidden_size(self) -> int:
        return self.fc.out_features

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    def _frozen(self, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """A shared module of the target applied to x, its weights taking no gradient (a
        gradient still flows to x)."""
        if not torch.is_grad_enabled():
            return module(x)
        frozen = {k: t.detach() for k, t in module.named_parameters()}
        return torch.func.functional_call(module, frozen, (x,))

    def forward(
        self,
        features: torch.Tensor,
        next_ids: torch.Tensor,
        cache: DynamicCache | None = None,
        position_ids: torch.Tensor | None = None,
        visible: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Predicted next features [B, T, H] from features [B, T, H] (float) and the tokens
        that followed them, next_ids [B, T] (long). cache: a DynamicCache the call appends
        to (None: no cache); position_ids [B, T] default to the positions after the cache's.
        visible: bool [T, cached + T], which of the cache's slots and this call's rows each
        row attends to (default: causal within the call, every cached slot)."""
        b, t, _ = features.shape
        past = cache.get_seq_length() if cache is not None else 0
        dev, dtype = self.device, self.fc.weight.dtype
        if position_ids is None:
            position_ids = torch.arange(past, past + t, device=dev)[None].expand(b, -1)
        if visible is None:
            visible = torch.ones(t, past + t, dtype=torch.bool, device=dev)
            visible[:, past:] = torch.ones(t, t, dtype=torch.bool, device=dev).tril()
        embed, _ = self._shared
        e = self._frozen(embed, next_ids.to(input_device(embed))).to(dev, dtype)
        h = self.fc(torch.cat([e, features.to(dev, dtype)], -1))
        out = self.layers[0](
            h,
            attention_mask=attention_mask_4d(self, visible.to(dev)),
            position_ids=position_ids.to(dev),
            past_key_values=cache,
            use_cache=cache is not None,
            position_embeddings=self.rotary_emb(h, position_ids.to(dev)),
        )
        return out[0] if isinstance(out, tuple) else out

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """The target's output layer on features [..., H]: logits [..., V] (float32)."""
        _, lm_head = self._shared
        w = _param_like(lm_head)
        x = features if w is None else features.to(w.device, w.dtype)
        return self._frozen(lm_head, x).float()

    def own_state(self) -> dict[str, torch.Tensor]:
        """fc.* and layers.0.*, in EAGLE's releases' key names."""
        return {k: t for k, t in self.state_dict().items() if k.startswith(OWN)}

    def load_own_state(self, state: dict[str, torch.Tensor]) -> None:
        """Take a state of :meth:`own_state`'s keys and shapes (strict): ValueError, one line,
        naming the first key missing, unexpected or misshapen."""
        mine = self.own_state()
        for key in mine:
            if key not in state:
                raise ValueError(f"head state: missing key {key!r}")
        for key in state:
            if key not in mine:
                raise ValueError(f"head state: unexpected key {key!r}")
        for key, value in mine.items():
            if tuple(state[key].shape) != tuple(value.shape):
                raise ValueError(
                    f"head state: key {key!r} has shape {list(state[key].shape)}, "
                    f"this head's is {list(value.shape)}"
                )
        with torch.no_grad():
            for key, value in mine.items():
                value.copy_(state[key])

    @classmethod
    def for_target(cls, target_model: nn.Module) -> FeatureHead:
        """A randomly initialised head (the caller seeds) for this target, float32, on the
        device of its input embeddings."""
        head = cls(
            target_model.config,
            target_model.get_input_embeddings(),
            target_model.get_output_embeddings(),
        )
        return head.to(device=input_device(target_model), dtype=torch.float32).eval()


# --- training (the test's heads; the train-head command's loss) ----------------------------


@torch.no_grad()
def target_features(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The target's features (last hidden state, after its final norm) at every position
    of ids [B, T]: [B, T, H] float32, on the model's input device."""
    ids = ids.to(input_device(model))
    out = model(input_ids=ids, output_hidden_states=True, logits_to_keep=1)
    return out.hidden_states[-1].float()


def head_loss(head: FeatureHead, features: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """EAGLE-1's loss on sequences ids [B, T] and the target's features there [B, T, H]:
    the head reads (f_t, x_{t+1}) and predicts f_{t+1}; SmoothL1 against the target's feature
    plus 0.1 times the cross-entropy of the target's softmax(lm_head(f_{t+1})) against
    log_softmax(lm_head(predicted))."""
    features = features.to(head.device, torch.float32)
    want = features[:, 1:]
    pred = head(features[:, :-1], ids[:, 1:])
    with torch.no_grad():
        p = torch.softmax(head.logits(want), -1)
    ce = -(p * torch.log_softmax(head.logits(pred), -1)).sum(-1).mean()
    return nn.functional.smooth_l1_loss(pred, want) + 0.1 * ce


def fit(
    head: FeatureHead,
    features: torch.Tensor,
    ids: torch.Tensor,
    steps: int = 200,
    lr: float = 1e-2,
    seed: int = 0,
    batch: int | None = None,
) -> float:
    """Train the head's own weights (Adam) on the target's features [B, T, H] of sequences
    ids [B, T]: each step on `batch` sequences drawn with the seeded generator (None: all of
    them). Returns the last step's loss. The head is left in eval mode."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(head.parameters(), lr=lr)
    head.train()
    loss = torch.zeros(())
    for _ in range(steps):
        rows = slice(None) if batch is None else torch.randint(len(ids), (batch,), generator=g)
        loss = head_loss(head, features[rows], ids[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
    head.eval()
    return float(loss.detach())


# --- where a pair's head comes from ---------------------------------------------------------


def load_head(target_model: nn.Module, path: Path) -> FeatureHead:
    """A head for this target with the own state saved at path (safetensors; its fc bias
    as saved), float32 on the target's input device."""
    from safetensors.torch import load_file

    state = load_file(str(path))
    head = FeatureHead(
        target_model.config,
        target_model.get_input_embeddings(),
        target_model.get_output_embeddings(),
        bias="fc.bias" in state,
    )
    head.load_own_state(state)
    return head.to(device=input_device(target_model), dtype=torch.float32).eval()


# Heads loaded from this machine's cache, per target model: (path, its stamp, the head)
_LOADED: weakref.WeakKeyDictionary[nn.Module, tuple[Path, tuple[int, int], FeatureHead]] = (
    weakref.WeakKeyDictionary()
)


def head_for(pair: Any) -> FeatureHead:
    """The head for the pair's target: one attached to the pair (``pair.head``), else the one
    `python -m specviz train-head` saved for this target's weights on this machine
    (specviz.head_cache.head_file, with or without fc's bias), loaded once per process and
    again when the file changes; ValueError, one line, where there is none."""
    head = getattr(pair, "head", None)
    if head is not None:
        return head
    from specviz.head_cache import cached_head

    target = pair.target
    path = cached_head(target.model)
    if path is None:
        raise ValueError(f"no EAGLE head for {target.name} on this machine: {TRAIN_HINT}")
    stat = path.stat()
    stamp = (stat.st_mtime_ns, stat.st_size)
    held = _LOADED.get(target.model)
    if held is None or held[:2] != (path, stamp):
        try:
            held = (path, stamp, load_head(target.model, path))
        except ValueError as e:
            raise ValueError(f"the EAGLE head at {path} does not fit {target.name}: {e}") from None
        _LOADED[target.model] = held
    return held[2]


# --- the head behind a model cache's interface -----------------------------------------------


class HeadLM:
    """One request's cache of a feature head, with a model cache's interface over tokens
    (specviz.lm.CachedLM's ``logits``, ``rollback``, ``masked_logits`` and ``keep``), so that
    the model drafter and specviz.tree draft chains and trees with it.

    Slot i holds token i of the sequence; slot 0 has no head entry, and slot i >= 1 holds
    the head's entry for the pair (feature at position i - 1, token i), at the head's
    position i - 1. Its output is the predicted feature at position i, and ``logits`` at slot
    i is the target's output layer on it: q's logits for token i + 1. The first ``known``
    slots read the target's own features (fed by :meth:`feed_known`); a slot fed by
    ``logits`` or ``masked_logits`` reads the head's output at the slot before it (its
    parent node, in a tree): a predicted feature."""

    gives_hidden = False

    def __init__(self, head: FeatureHead, vocab_size: int) -> None:
        self.head, self.vocab_size = head, vocab_size
        self.cache = DynamicCache()
        self.tokens: list[int] = []
        self.out = torch.zeros(0, head.hidden_size, device=head.device)  # [slots, H]
        self.known = 0  # leading slots whose inputs are the target's features
        self.branched = False
        self.calls = 0
        self.busy_s = 0.0  # seconds in the head's calls and the output layer on their rows

    @property
    def cached(self) -> int:
        return len(self.tokens)

    def close(self) -> None:
        """Nothing to hand back: the dynamic cache goes with the request."""

    def _linear(self) -> None:
        if self.branched:
            raise RuntimeError("the head's cache holds a tree: keep() the accepted path first")

    def _crop(self, keep: int) -> None:
        drop = len(self.tokens) - keep
        if drop > 0:
            entries = self.cache.get_seq_length()
            if entries > max(keep - 1, 0):
                self.cache.crop(max(keep - 1, 0) - entries)
            del self.tokens[keep:]
            self.out = self.out[:keep]
            self.known = min(self.known, keep)

    def rollback(self, seq: list[int]) -> None:
        """Keep only the longest prefix the cache shares with seq."""
        self._linear()
        self._crop(common_prefix(self.tokens, seq))

    def _run(
        self,
        features: torch.Tensor,
        ids: list[int],
        positions: list[int] | None = None,
        visible: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One head call over rows (features [n, H], the tokens after them): [n, H]."""
        dev = self.head.device
        ids_t = torch.tensor([ids], dtype=torch.long, device=dev)
        pos = None if positions is None else torch.tensor([positions], device=dev)
        t0 = time.perf_counter()
        out = self.head(features[None], ids_t, self.cache, pos, visible)[0]  # [n, H]
        self.busy_s += clock(dev) - t0
        self.calls += 1
        return out

    def _append(self, ids: list[int], out: torch.Tensor) -> None:
        self.tokens.extend(ids)
        self.out = torch.cat([self.out, out])

    def _rows(self, first: int, last: int) -> torch.Tensor:
        """q's logits at slots first..last - 1: [n, V]."""
        if first < 1:
            raise RuntimeError("slot 0 has no head entry: it cannot give a draft's row")
        t0 = time.perf_counter()
        rows = self.head.logits(self.out[first:last])[:, : self.vocab_size]
        self.busy_s += clock(rows.device) - t0  # the output layer is most of a draft step
        return rows

    @torch.inference_mode()
    def logits(self, seq: list[int], keep: int = 1) -> torch.Tensor:
        """Logits [keep, V] for the last `keep` positions of seq: the tokens the cache lacks
        are fed one at a time, each reading the head's own output at the slot before it."""
        self._linear()
        self._crop(common_prefix(self.tokens, seq))
        for s in range(len(self.tokens), len(seq)):
            if s == 0:  # the first token: no feature before it, no entry
                self._append([seq[0]], self.out.new_zeros(1, self.out.shape[1]))
                continue
            self._append([seq[s]], self._run(self.out[s - 1 : s], [seq[s]]))
        return self._rows(len(seq) - keep, len(seq))

    @torch.inference_mode()
    def masked_logits(
        self, ids: list[int], positions: list[int], visible: torch.Tensor, keep: int | None = None
    ) -> torch.Tensor:
        """As CachedLM's: n tree nodes after the cache's slots, row j seeing the slots
        visible[j] marks. Each node reads the head's output at its parent's slot (the last
        slot it sees before its own), at the head's position (its position - 1)."""
        n, start = len(ids), self.cached
        keep = n if keep is None else keep
        if visible.shape != (n, start + n):
            raise ValueError(f"mask must be [{n}, {start + n}], got {list(visible.shape)}")
        parents = [int(visible[r, : start + r].nonzero().max()) for r in range(n)]
        if not all(1 <= par < start for par in parents):
            raise RuntimeError("a node's parent must be a slot fed before this call")
        features = self.out[torch.tensor(parents, device=self.out.device)]  # [n, H]
        out = self._run(features, ids, [p - 1 for p in positions], visible[:, 1:])
        self._append(ids, out)
        self.branched = True
        return self._rows(self.cached - keep, self.cached)

    def keep(self, slots: list[int]) -> None:
        """Keep only these slots, in this order (a prefix, then the accepted path); the
        cache is linear again afterwards."""
        keep_slots(self.cache, [s - 1 for s in slots if s >= 1])
        self.tokens = [self.tokens[s] for s in slots]
        self.out = self.out[torch.tensor(slots, dtype=torch.long, device=self.out.device)]
        self.known = min(self.known, len(slots))
        self.branched = False

    @torch.inference_mode()
    def feed_known(self, seq: list[int], features: torch.Tensor, at: int) -> None:
        """Hold seq with every slot reading the target's own features: features [m, H] at
        positions at .. at + m - 1 (one verify call's). Slots beyond the known ones (drafts,
        which read predicted features) are dropped first; the rest are fed in one call.
        ValueError (one line) where the features leave a position out."""
        self._linear()
        self._crop(min(common_prefix(self.tokens, seq), self.known))
        if not self.tokens and seq:
            self._append([seq[0]], self.out.new_zeros(1, self.out.shape[1]))
        first, last = len(self.tokens), len(seq)  # slots to feed: positions first-1..last-2
        if first < last:
            if at > first - 1 or at + len(features) < last - 1:
                raise ValueError(
                    f"the target's features cover positions {at}..{at + len(features) - 1}, "
                    f"the head needs {first - 1}..{last - 2}"
                )
            rows = features[first - 1 - at : last - 1 - at].to(self.head.device, torch.float32)
            self._append(seq[first:last], self._run(rows, seq[first:last]))
        self.known = len(self.tokens)


# --- the drafter ---------------------------------------------------------------------------


class HeadDrafter(ModelDrafter):
    """Drafts from an EAGLE head over the target's features (this module's docstring): the
    model drafter's chains, confidence stop, trees and dynamic trees, on :class:`HeadLM`.

    The target's packaged calls (aoti) give its features; torch.compile's give none: on
    such a backend the request named, the run is refused before any model call
    (check_drafter); on one "auto" chose, the run opens its target eager and its trace says
    so (specviz.engine.Run.open_lm). A cache that gave no features ends the first round in
    one line (nothing is drafted before then)."""

    name = NAME

    def __init__(self, lm: HeadLM, w: Warp, eos_ids: frozenset[int], *args: Any) -> None:
        super().__init__(lm, w, eos_ids, *args)  # type: ignore[arg-type]
        self.lm: HeadLM = lm

    @classmethod
    def check(cls, pair: Any, settings: Any) -> None:
        """Refuse (ValueError, one line) a pair with no head, before any model call."""
        head_for(pair)

    @classmethod
    def describe(cls, pair: Any, settings: Any) -> str:
        """What drafts and what it reads, as a trace names it in place of a draft model."""
        head = head_for(pair)
        own = sum(t.numel() for t in head.own_state().values())
        layer = type(head.layers[0]).__name__
        return (
            f"EAGLE head on {pair.target.name}'s features: reads the target's last hidden "
            f"state and the next token's embedding; fc and one {layer} ({own / 1e6:.1f}M "
            "parameters of its own), then the target's output layer"
        )

    @classmethod
    def build(cls, settings: Any, pair: Any, open_lm: Any) -> HeadDrafter:
        return cls(
            HeadLM(head_for(pair), pair.vocab_size),
            settings.draft_warp(),
            pair.eos_ids,
            settings.draft_confidence,
            settings.tree,
            settings.tree_budget,
        )

    def _ready(self, seq: list[int]) -> bool:
        """Whether the head's cache holds seq on the target's features: not before the first
        verify call."""
        return len(seq) >= 2 and self.lm.known == len(seq) == len(self.lm.tokens)

    def propose(self, seq: list[int], gamma: int, gen: torch.Generator) -> Draft:
        if not self._ready(seq):
            return Draft([], torch.empty(0, self.lm.vocab_size), "prompt")
        return super().propose(seq, gamma, gen)

    def propose_tree(
        self, seq: list[int], depth: int, gen: torch.Generator
    ) -> tuple[TreeDraft, str]:
        if depth > 0 and not self._ready(seq):
            return TreeDraft(greedy=self.w.greedy), "prompt"
        return super().propose_tree(seq, depth, gen)

    def keep_path(self, tree: TreeDraft, path: list[int], prefix: list[int]) -> None:
        # the nodes read predicted features: after_round feeds the accepted ones the target's
        if self.lm.branched:
            self.lm.keep(list(range(len(prefix))))

    def after_round(self, seq: list[int], target: TargetOut) -> None:
        if target.features is None:
            raise ValueError(
                f"the {NAME} drafter needs the target's hidden state at every position, "
                f"and this target's cache ({type(target.cache).__name__}) gave none"
            )
        self.lm.feed_known(seq, target.features, target.features_at)
