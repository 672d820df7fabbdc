"""Training a target's feature head (EAGLE-1, Li et al. 2024) on the target's own answers:
self-distillation from the prompts of specviz.head_prompts, with no network.

The data: the target answers the prompts, sampled at temperature 1 from a seeded generator,
in batches of rows (a decode step of 8 rows costs about one row's on a memory-bound CPU);
then one teacher-forced forward over each whole sequence gives its features f_t, the target's
last hidden state (after its final norm) at every position. Features (float32) and ids are
stored, never vocabulary-wide distributions: the target's distribution at t is
softmax(lm_head(f_t)) exactly, recomputed where needed. Every batch has its own seed, so a
generation cut short continues where it stopped, with the same ids.

The head reads (f_t, x_{t+1}) and predicts f_{t+1}; its loss is EAGLE's: SmoothL1 between
the predicted and the true feature, plus 0.1 times the cross-entropy of the head's
distribution log_softmax(lm_head(f̂_{t+1})) against the target's softmax(lm_head(f_{t+1})) as
a soft target, over the positions of the answers. AdamW on the head's own parameters (a
linear warm-up, then the learning rate falls as one over the square root of the steps,
gradient values clipped as EAGLE clips them); the target's embedding and output layer are
shared and stay frozen.

Held-out acceptance (:func:`held_out_alpha`): on the held-out prompts' answers, at every
answer position, alpha = sum_x min(p(x), q(x)) of the head's next-token distribution q
against the target's p, both at temperature 1, one step from the target's own features (the
first draft of a round); and the greedy top-1 agreement argmax q == argmax p.

Resumable: a checkpoint (head, optimiser, step, curve) every few steps, written whole or not
at all; the training data is kept beside it; a rerun continues from both. The finished head
goes where specviz.head_cache says (the digest of the target's weights names its directory),
with a JSON record of the training.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from specviz.drafters.head import FeatureHead
from specviz.head_cache import (
    DEFAULT_BUDGET_MINUTES,
    DEFAULT_TOKENS,
    HEAD_NAME,
    RECORD_NAME,
    head_dir,
    head_params,
)
from specviz.outfiles import write_json

MAX_NEW = 160  # the longest answer, in tokens
GEN_ROWS = 8  # answers generated together
GEN_SHARE = 0.4  # at most this share of the budget goes to generating the data
CHECKPOINT_NAME = "checkpoint.pt"


@dataclass(frozen=True)
class TrainSettings:
    """What a head's training depends on. The data and the checkpoint are keyed by the
    seed, the tokens, max_new and the prompts (:meth:`data_key`); the rest may change
    between runs that continue one training."""

    seed: int = 0
    tokens: int = DEFAULT_TOKENS  # answer tokens of the training data
    max_new: int = MAX_NEW
    rows: int = GEN_ROWS
    batch: int = 8  # sequences per training step
    lr: float = 1e-3  # the peak: after a linear warm-up, lr / sqrt(1 + step / decay)
    warmup: int = 20  # steps
    decay: int = 100  # steps
    clip: float = 0.5  # gradient values clipped to +-clip, as EAGLE does
    p_weight: float = 0.1  # the cross-entropy's weight (EAGLE's)
    checkpoint_every: int = 25  # steps
    eval_every: int = 30_000  # training tokens between held-out measurements
    bias: bool = False  # fc's bias

    def data_key(self, prompts: Sequence[Sequence[int]], held: Sequence[Sequence[int]]) -> str:
        """The digest that names the training data: its settings and prompts."""
        what = json.dumps(
            [
                self.seed,
                self.tokens,
                self.max_new,
                [list(p) for p in prompts],
                [list(p) for p in held],
            ]
        )
        return hashlib.blake2b(what.encode(), digest_size=8).hexdigest()

    def check(self) -> None:
        """ValueError (one line) for a setting out of range."""
        if not 0 <= self.seed < 2**31:
            raise ValueError(f"seed must be in 0..{2**31 - 1}, got {self.seed}")
        if not 100 <= self.tokens <= 10_000_000:
            raise ValueError(f"tokens must be in 100..10000000, got {self.tokens}")
        if not 1 <= self.max_new <= 4096:
            raise ValueError(f"max_new must be in 1..4096, got {self.max_new}")


# --- the data ----------------------------------------------------------------------------


@dataclass
class Corpus:
    """Sequences (prompt then answer) with the target's features at every position."""

    ids: list[torch.Tensor] = field(default_factory=list)  # each [L] int64
    prompt_lens: list[int] = field(default_factory=list)
    features: list[torch.Tensor] = field(default_factory=list)  # each [L, H] float32
    batches_done: int = 0  # generation batches done (each seeded by its index)
    complete: bool = False
    seconds: float = 0.0  # spent generating it, over all runs

    @property
    def answer_tokens(self) -> int:
        return sum(len(i) - p for i, p in zip(self.ids, self.prompt_lens, strict=True))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ids": self.ids,
            "prompt_lens": self.prompt_lens,
            "features": self.features,
            "batches_done": self.batches_done,
            "complete": self.complete,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Corpus:
        return cls(
            list(d["ids"]),
            list(d["prompt_lens"]),
            list(d["features"]),
            int(d["batches_done"]),
            bool(d["complete"]),
            float(d.get("seconds", 0.0)),
        )


def _batch_seed(seed: int, batch: int) -> int:
    return (seed * 1_000_003 + batch) % 2**63


def _prompt_order(n: int, seed: int, batch: int, rows: int) -> list[int]:
    """The prompts of generation batch `batch`: the prompts in a seeded order, one pass
    (epoch) after another, `rows` at a time."""
    per_pass = math.ceil(n / rows)
    epoch, k = divmod(batch, per_pass)
    order = torch.randperm(
        n, generator=torch.Generator().manual_seed(_batch_seed(seed, -1 - epoch))
    )
    return order[k * rows : (k + 1) * rows].tolist()


@torch.inference_mode()
def generate(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    seed: int,
    max_new: int,
    vocab: int,
    eos_ids: frozenset[int] | set[int] = frozenset(),
    pace: Callable[[], object] | None = None,
) -> list[list[int]]:
    """The model's answers to prompts (token id lists), generated together: left-padded,
    sampled at temperature 1 over the first `vocab` columns from a generator seeded by
    `seed`; each answer ends at an EOS id (kept) or after max_new tokens. pace is called
    before each model call (specviz.threads: the thread count follows the machine's load)."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(list(p))
        mask[i, width - len(p) :] = 1
    position = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    answers: list[list[int]] = [[] for _ in prompts]
    done = [False] * len(prompts)
    step_ids, step_pos = ids, position
    for _ in range(max_new):
        if pace is not None:
            pace()
        out = model(
            input_ids=step_ids.to(device),
            attention_mask=mask.to(device),
            position_ids=step_pos.to(device),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        probs = torch.softmax(out.logits[:, -1, :vocab].float().cpu(), dim=-1)
        nxt = torch.multinomial(probs, 1, generator=gen)[:, 0]
        for i, t in enumerate(nxt.tolist()):
            if not done[i]:
                answers[i].append(t)
                done[i] = t in eos_ids
        if all(done):
            break
        step_ids = nxt[:, None]
        step_pos = step_pos[:, -1:] + 1
        mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=torch.long)], dim=1)
    return answers


@torch.inference_mode()
def features_of(model: torch.nn.Module, ids: Sequence[int]) -> torch.Tensor:
    """The target's features of one sequence: its last hidden state (after the final norm)
    at every position, [L, H] float32, from one teacher-forced forward."""
    device = next(model.parameters()).device
    x = torch.tensor([list(ids)], device=device)
    out = model(input_ids=x, output_hidden_states=True, logits_to_keep=1)
    return out.hidden_states[-1][0].float().cpu()


def fill_corpus(
    corpus: Corpus,
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    tokens: int | None,
    seed: int,
    max_new: int,
    rows: int,
    vocab: int,
    eos_ids: frozenset[int] | set[int] = frozenset(),
    deadline: float | None = None,
    on_batch: Callable[[Corpus], None] | None = None,
    pace: Callable[[], object] | None = None,
) -> Corpus:
    """Add generation batches to the corpus until it holds `tokens` answer tokens (None: one
    answer per prompt) or the deadline (time.monotonic) passes; batch k always answers the
    same prompts with the same seed, so a corpus cut short continues with the same ids."""
    n = len(prompts)
    per_pass = math.ceil(n / rows)
    while not corpus.complete:
        if deadline is not None and time.monotonic() > deadline:
            break
        b = corpus.batches_done
        t0 = time.perf_counter()
        chosen = [prompts[i] for i in _prompt_order(n, seed, b, rows)]
        answers = generate(
            model,
            chosen,
            seed=_batch_seed(seed, b),
            max_new=max_new,
            vocab=vocab,
            eos_ids=eos_ids,
            pace=pace,
        )
        for p, a in zip(chosen, answers, strict=True):
            seq = list(p) + a
            corpus.ids.append(torch.tensor(seq, dtype=torch.long))
            corpus.prompt_lens.append(len(p))
            if pace is not None:
                pace()
            corpus.features.append(features_of(model, seq))
        corpus.batches_done = b + 1
        corpus.seconds += time.perf_counter() - t0
        corpus.complete = (
            corpus.answer_tokens >= tokens if tokens is not None else b + 1 >= per_pass
        )
        if on_batch is not None:
            on_batch(corpus)
    return corpus


# --- the loss and the held-out measure ---------------------------------------------------


def collate(corpus: Corpus, rows: Sequence[int]) -> tuple[torch.Tensor, ...]:
    """A batch of sequences, right-padded (a causal layer never reads a later pad): the
    head's inputs f_t and x_{t+1}, its targets f_{t+1}, and the mask of the targets that are
    answer positions. [B, T, H], [B, T], [B, T, H], [B, T] bool."""
    longest = max(len(corpus.ids[r]) for r in rows) - 1
    h = corpus.features[rows[0]].shape[-1]
    feats = torch.zeros(len(rows), longest, h)
    nxt = torch.zeros(len(rows), longest, dtype=torch.long)
    target = torch.zeros(len(rows), longest, h)
    mask = torch.zeros(len(rows), longest, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids, f, p = corpus.ids[r], corpus.features[r], corpus.prompt_lens[r]
        n = len(ids) - 1
        feats[i, :n] = f[:-1]
        nxt[i, :n] = ids[1:]
        target[i, :n] = f[1:]
        # row t reads f_t and x_{t+1}: from t = p - 1 on (the prompt's last feature and the
        # first answer token, where a round's drafting starts) it is an answer's position
        mask[i, max(p - 1, 0) : n] = True
    return feats, nxt, target, mask


def eagle_loss(
    head: FeatureHead, batch: tuple[torch.Tensor, ...], vocab: int, p_weight: float
) -> tuple[torch.Tensor, float, float]:
    """EAGLE's loss over a batch's answer positions: SmoothL1(f̂, f) + p_weight * CE(p, q)
    with p = softmax(lm_head(f)) the soft target and q's log_softmax(lm_head(f̂)). Returns
    the loss and its two parts."""
    feats, nxt, target, mask = batch
    pred = head(feats, nxt)
    m = mask.float()
    count = m.sum().clamp(min=1.0)
    l1 = (F.smooth_l1_loss(pred, target, reduction="none").mean(-1) * m).sum() / count
    with torch.no_grad():
        p = torch.softmax(head.logits(target[mask])[..., :vocab].float(), dim=-1)
    logq = torch.log_softmax(head.logits(pred[mask])[..., :vocab].float(), dim=-1)
    ce = -(p * logq).sum(-1).sum() / count
    return l1 + p_weight * ce, float(l1.detach()), float(ce.detach())


@torch.inference_mode()
def held_out_alpha(
    head: FeatureHead, corpus: Corpus, vocab: int, batch: int = 8
) -> dict[str, float]:
    """On the corpus's answer positions: the expected acceptance alpha = mean sum_x min(p, q)
    of the head's distribution q against the target's p (both softmax at temperature 1 over
    the first `vocab` columns, the head one step from the target's own features), the greedy
    top-1 agreement mean [argmax q == argmax p], and the positions counted."""
    total, top1, n = 0.0, 0.0, 0
    for start in range(0, len(corpus.ids), batch):
        feats, nxt, target, mask = collate(
            corpus, range(start, min(start + batch, len(corpus.ids)))
        )
        pred = head(feats, nxt)[mask]
        p = torch.softmax(head.logits(target[mask])[..., :vocab].float(), dim=-1)
        q = torch.softmax(head.logits(pred)[..., :vocab].float(), dim=-1)
        total += float(torch.minimum(p, q).sum(-1).sum())
        top1 += float((p.argmax(-1) == q.argmax(-1)).sum())
        n += int(mask.sum())
    return {"alpha": total / max(n, 1), "top1": top1 / max(n, 1), "positions": n}


# --- the training loop -------------------------------------------------------------------


def own_parameters(head: FeatureHead) -> list[tuple[str, torch.nn.Parameter]]:
    """The head's trained parameters by their own_state names, in a fixed order."""
    names = set(head.own_state())
    params = dict(head.named_parameters())
    missing = sorted(names - set(params))
    if missing:
        raise ValueError(f"the head's own state names no parameter: {', '.join(missing)}")
    return [(n, params[n]) for n in sorted(names)]


def batch_rows(n: int, seed: int, step: int, batch: int) -> list[int]:
    """The sequences of training step `step`: a seeded order per pass over the data, so
    that the step alone says which (a resumed run draws what an uninterrupted one would)."""
    per_pass = max(n // batch, 1)
    epoch, k = divmod(step, per_pass)
    g = torch.Generator().manual_seed(_batch_seed(seed, 10_000_000 + epoch))
    order = torch.randperm(n, generator=g)
    return order[k * batch : (k + 1) * batch].tolist()


@dataclass
class TrainState:
    """Where training stands: what a checkpoint holds besides the weights."""

    step: int = 0
    tokens: int = 0  # answer positions trained on (a position counted once per visit)
    seconds: float = 0.0  # training time over all runs
    curve: list[dict[str, float]] = field(default_factory=list)  # held-out measurements
    last_loss: float | None = None


def save_checkpoint(path: Path, head: FeatureHead, opt: Any, state: TrainState, key: str) -> None:
    """The head's own state, the optimiser's and the TrainState, written whole or not at all."""
    blob = {
        "head": {k: t.detach().clone() for k, t in head.own_state().items()},
        "optim": opt.state_dict(),
        "state": asdict(state),
        "key": key,
    }
    _save_whole(path, blob)


def _save_whole(path: Path, blob: Any) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        torch.save(blob, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def check_checkpoint(path: Path, key: str) -> dict[str, Any] | None:
    """The checkpoint kept at path (None: none), read; ValueError (one line) for one that is
    unreadable or was made with other settings or data."""
    if not path.is_file():
        return None
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(
            f"unreadable checkpoint {path} ({type(exc).__name__}): --fresh starts over"
        ) from None
    if not isinstance(blob, dict) or blob.get("key") != key:
        raise ValueError(
            f"the checkpoint in {path.parent} was made with other settings (seed, tokens) or "
            "data: rerun with those, or --fresh to start over"
        )
    return blob


def load_checkpoint(path: Path, head: FeatureHead, opt: Any, key: str) -> TrainState | None:
    """Restore a checkpoint into head and opt; None where none is kept. ValueError (one
    line) for one made with other settings or data."""
    blob = check_checkpoint(path, key)
    if blob is None:
        return None
    head.load_own_state(blob["head"])
    opt.load_state_dict(blob["optim"])
    return TrainState(**blob["state"])


def learning_rate(s: TrainSettings, step: int) -> float:
    """The step's learning rate: a linear warm-up to s.lr, then an inverse square root
    decay (a function of the step alone, so a resumed run continues it)."""
    return s.lr * min(1.0, (step + 1) / max(s.warmup, 1)) / math.sqrt(1 + step / s.decay)


def make_optimizer(head: FeatureHead, s: TrainSettings) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        [p for _, p in own_parameters(head)], lr=s.lr, betas=(0.9, 0.95), weight_decay=0.0
    )


def train(
    head: FeatureHead,
    data: Corpus,
    held: Corpus,
    s: TrainSettings,
    vocab: int,
    *,
    checkpoint: Path,
    key: str,
    max_steps: int | None = None,
    deadline: float | None = None,
    progress: Callable[[TrainState, str], None] | None = None,
    pace: Callable[[], object] | None = None,
) -> TrainState:
    """Train head on data until max_steps (a total, resumed steps included) or the deadline
    (time.monotonic), resuming from the checkpoint when one is kept, saving one every
    s.checkpoint_every steps and at the end; the held-out alpha is measured at the start,
    every s.eval_every training tokens and at the end."""
    opt = make_optimizer(head, s)
    state = load_checkpoint(checkpoint, head, opt, key) or TrainState()
    say = progress or (lambda _s, _m: None)

    def measure() -> None:
        head.eval()
        m = held_out_alpha(head, held, vocab)
        state.curve.append(
            {"tokens": state.tokens, "step": state.step, **m, "seconds": state.seconds}
        )
        head.train()
        say(state, f"held-out alpha {m['alpha']:.3f}, top-1 {m['top1']:.3f}")

    if not state.curve:
        measure()
    next_eval = (state.tokens // s.eval_every + 1) * s.eval_every
    head.train()
    while max_steps is None or state.step < max_steps:
        if deadline is not None and time.monotonic() > deadline:
            break
        if pace is not None:
            pace()
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = learning_rate(s, state.step)
        batch = collate(data, batch_rows(len(data.ids), s.seed, state.step, s.batch))
        loss, l1, ce = eagle_loss(head, batch, vocab, s.p_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_value_([p for _, p in own_parameters(head)], s.clip)
        opt.step()
        state.step += 1
        state.tokens += int(batch[3].sum())
        state.seconds += time.perf_counter() - t0
        state.last_loss = float(loss.detach())
        say(state, f"loss {state.last_loss:.4f} (SmoothL1 {l1:.4f}, CE {ce:.3f})")
        if state.tokens >= next_eval:
            measure()
            next_eval = (state.tokens // s.eval_every + 1) * s.eval_every
        if state.step % s.checkpoint_every == 0:
            save_checkpoint(checkpoint, head, opt, state, key)
    if not state.curve or state.curve[-1]["step"] != state.step:
        measure()
    save_checkpoint(checkpoint, head, opt, state, key)
    head.eval()
    return state


# --- one command's work ------------------------------------------------------------------


class Progress:
    """One line on stderr, redrawn in place on a terminal, else printed every 30 seconds:
    the phase, its progress and what the work last said."""

    def __init__(self, stream: Any = None, every_s: float = 30.0) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every_s, self.last, self.width = every_s, 0.0, 0

    def show(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            pad = max(self.width - len(text), 0)
            self.stream.write("\r" + text + " " * pad)
            self.width = len(text)
            self.stream.flush()
        elif force or now - self.last >= self.every_s:
            self.stream.write(text + "\n")
            self.stream.flush()
            self.last = now

    def done(self) -> None:
        if self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()
        self.width = 0


def bar(fraction: float, width: int = 20) -> str:
    full = int(max(0.0, min(1.0, fraction)) * width)
    return "[" + "#" * full + "." * (width - full) + "]"


def _load_corpus(path: Path) -> Corpus | None:
    if not path.is_file():
        return None
    try:
        return Corpus.from_dict(torch.load(path, map_location="cpu", weights_only=True))
    except Exception:  # a damaged data file: generated again (the same ids)
        return None


def train_head(
    target: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    held_prompts: Sequence[Sequence[int]],
    *,
    vocab: int,
    eos_ids: frozenset[int] | set[int] = frozenset(),
    settings: TrainSettings = TrainSettings(),
    budget_s: float = DEFAULT_BUDGET_MINUTES * 60,
    started: float | None = None,
    fresh: bool = False,
    max_steps: int | None = None,
    directory: Path | None = None,
    progress: Progress | None = None,
    pace: Callable[[], object] | None = None,
    machine: Callable[[], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The whole command's work on one target: the held-out and training answers (kept,
    continued where a previous run stopped), then training from the checkpoint (or from a
    fresh head), then the head and its record written. pace is called between model calls;
    machine() gives the record's "machine" (the CPU, the threads, the rest's load: the
    command's specviz.threads.Load). Returns the record."""
    settings.check()
    started = time.monotonic() if started is None else started
    deadline = started + budget_s
    d = directory or head_dir(target, settings.bias)
    d.mkdir(parents=True, exist_ok=True)
    key = settings.data_key(prompts, held_prompts)
    data_path, held_path = d / f"data-{key}.pt", d / f"held-{key}.pt"
    ckpt = d / CHECKPOINT_NAME
    if fresh:
        for stale in (ckpt, d / HEAD_NAME, d / RECORD_NAME):
            stale.unlink(missing_ok=True)
    else:
        check_checkpoint(ckpt, key)  # other settings fail here, before any answer
    show = progress or Progress()
    gen_kw = dict(
        max_new=settings.max_new, rows=settings.rows, vocab=vocab, eos_ids=eos_ids, pace=pace
    )
    gen_deadline = started + GEN_SHARE * budget_s
    t_gen = time.monotonic()

    held = _load_corpus(held_path) or Corpus()
    if not held.complete:

        def held_batch(corpus: Corpus) -> None:
            done = len(corpus.ids) / len(held_prompts)
            show.show(
                f"train-head: held-out answers {bar(done)} {len(corpus.ids)}/{len(held_prompts)}"
            )
            _save_whole(held_path, corpus.to_dict())  # a run cut short keeps them

        fill_corpus(
            held,
            target,
            held_prompts,
            tokens=None,
            seed=settings.seed + 1,
            on_batch=held_batch,
            **gen_kw,
        )
        _save_whole(held_path, held.to_dict())
        show.done()

    data = _load_corpus(data_path) or Corpus()
    gen_s = 0.0

    def generated(corpus: Corpus) -> None:
        done = corpus.answer_tokens / settings.tokens
        show.show(
            f"train-head: answers {bar(done)} {corpus.answer_tokens}/{settings.tokens} tokens, "
            f"{len(corpus.ids)} answers, {time.monotonic() - t_gen:.0f} s"
        )
        if corpus.batches_done % 25 == 0:  # kept as it grows: a run cut short loses little
            _save_whole(data_path, corpus.to_dict())

    if not data.complete:
        fill_corpus(
            data,
            target,
            prompts,
            tokens=settings.tokens,
            seed=settings.seed,
            deadline=gen_deadline,
            on_batch=generated,
            **gen_kw,
        )
        _save_whole(data_path, data.to_dict())
        gen_s = time.monotonic() - t_gen
        show.done()
    if not data.ids:
        raise ValueError("the budget ended before any training answer was generated")

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        head = FeatureHead.for_target(target)  # its own weights drawn from the seed
    t_train = time.monotonic()
    # the last held-out measurement and the writing fit in what the budget leaves
    reserve = 10.0 + 2.0 * _eval_estimate(head, held, vocab)

    def said(state: TrainState, what: str) -> None:
        left = max(deadline - reserve - time.monotonic(), 0.0)
        fresh_alpha = "held-out" in what  # the measurement itself: said once
        alpha = (
            f", held-out alpha {state.curve[-1]['alpha']:.3f}"
            if state.curve and not fresh_alpha
            else ""
        )
        show.show(
            f"train-head: step {state.step}, {state.tokens} tokens, {what}{alpha}, "
            f"{left / 60:.1f} min left",
            force=fresh_alpha,
        )

    state = train(
        head,
        data,
        held,
        settings,
        vocab,
        checkpoint=ckpt,
        key=key,
        max_steps=max_steps,
        deadline=deadline - reserve,
        progress=said,
        pace=pace,
    )
    show.done()
    from safetensors.torch import save_file

    own = {k: t.detach().contiguous().clone() for k, t in head.own_state().items()}
    fd, tmp = tempfile.mkstemp(prefix=f".{HEAD_NAME}.", suffix=".tmp", dir=d)
    os.close(fd)
    try:
        save_file(own, tmp, metadata={"format": "specviz feature head", **_str_params(settings)})
        os.replace(tmp, d / HEAD_NAME)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    last = state.curve[-1]
    record = {
        "head": str(d / HEAD_NAME),
        "head_params": head_params(settings.bias),
        "settings": asdict(settings),
        "alpha_definition": (
            "held-out alpha: mean over the held-out answers' positions of sum_x min(p(x), "
            "q(x)), p the target's and q the head's next-token distribution at temperature "
            "1, the head one step from the target's own features; top1: the greedy top-1 "
            "agreement argmax q == argmax p"
        ),
        "held_out": {
            "alpha": last["alpha"],
            "top1": last["top1"],
            "positions": last["positions"],
            "answers": len(held.ids),
        },
        "curve": state.curve,
        "training_tokens": state.tokens,
        "steps": state.step,
        "data": {
            "answers": len(data.ids),
            "answer_tokens": data.answer_tokens,
            "complete": data.complete,
            "prompts": len(prompts),
            "held_out_prompts": len(held_prompts),
        },
        "seconds": {
            "generation_this_run": round(gen_s, 1),
            "generation_total": round(data.seconds + held.seconds, 1),
            "training_total": round(state.seconds, 1),
            "training_this_run": round(time.monotonic() - t_train, 1),
            "command": round(time.monotonic() - started, 1),
        },
        "machine": machine() if machine is not None else {},
        "torch": torch.__version__,
    }
    write_json(d / RECORD_NAME, record)
    return record


def _str_params(s: TrainSettings) -> dict[str, str]:
    return {k: str(x) for k, x in asdict(s).items()}


def _eval_estimate(head: FeatureHead, held: Corpus, vocab: int) -> float:
    """Seconds a held-out measurement takes, from one batch of it."""
    if not held.ids:
        return 0.0
    sample = Corpus(held.ids[:4], held.prompt_lens[:4], held.features[:4])
    t0 = time.perf_counter()
    held_out_alpha(head, sample, vocab)
    return (time.perf_counter() - t0) * len(held.ids) / len(sample.ids)


def settings_with(**changes: Any) -> TrainSettings:
    """TrainSettings with some fields changed (validated)."""
    s = replace(TrainSettings(), **changes)
    s.check()
    return s
