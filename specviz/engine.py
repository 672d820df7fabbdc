"""Speculative sampling and the autoregressive baseline, one record at a time.

``Run`` is one generation. Iterating it yields an :class:`Update` per target call (a round
for "spec", a token for "ar") as soon as it completes, while ``run.trace`` fills in; a
consumer may stop iterating at any moment and still hold a consistent partial trace.
``generate`` runs to the end and returns the trace.

Both methods share the warp and draw code and the clock. The speculative clock also runs
while each round's records are built (``round_decisions``: overlaps, top rows, texts), work
the autoregressive baseline does not do, so a comparison charges the method with that
bookkeeping too (trace level "minimal" records less of it). Knows nothing of gradio or
plotly.

One speculative round (Leviathan et al. 2022, Algorithm 1; Chen et al. 2023, Algorithm 2):
draft k <= gamma tokens from q, score them with one target forward (k + 1 rows of p), accept
x_i while u_i < p(x_i)/q(x_i), then draw one token from the residual norm(max(0, p - q)) at
the first rejection, or from p after a full accept (the bonus token). Both KV caches are
then cropped to the accepted prefix. With ``verification="exact-match"`` the round instead
samples the target's own y_i ~ p_i at all k + 1 positions from the run's generator, accepts
x_i while y_i == x_i, and adds y at the first mismatch (or y_{k+1} as the bonus). The lossy
verifications ("typical", "top-k-match") keep x_i while a test on p passes and add the
target's own sample from p at the first miss (specviz.verify). The round's decisions
are recorded by specviz.record.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import torch

from specviz import metrics
from specviz.config import Settings
from specviz.drafters import Draft, Drafter, ModelDrafter, NgramDrafter
from specviz.lm import ModelCache
from specviz.pair import LoadedModel, ModelPair
from specviz.record import round_decisions
from specviz.sampling import next_token, top2_gap, warp
from specviz.trace import SCHEMA, Round, Trace
from specviz.tree_run import TreeRounds, check_tree_request
from specviz.updates import Update, clock
from specviz.verify import verification_for
from specviz.verify.base import Verification


def prompt_ids_for(
    pair: ModelPair, prompt: Any, settings: Settings, raw: bool = False
) -> list[int]:
    """Tokenise and check one prompt: batch size 1, non-empty, within the context."""
    if isinstance(prompt, (list, tuple)) or (isinstance(prompt, torch.Tensor) and prompt.dim() > 1):
        raise ValueError(
            "batch size must be 1: pass one prompt string (both papers measure batch 1)"
        )
    ids = pair.encode_prompt(prompt, raw=raw)
    lim = settings.limits.max_prompt_tokens
    if len(ids) > lim:
        raise ValueError(f"prompt is {len(ids)} tokens; this deployment accepts at most {lim}")
    if len(ids) + settings.max_new_tokens > pair.context_len:
        raise ValueError(
            f"prompt ({len(ids)} tokens) plus max_new_tokens ({settings.max_new_tokens}) "
            f"exceeds the model's context of {pair.context_len} tokens"
        )
    return ids


def check_request(pair: ModelPair, prompt: Any, settings: Settings, raw: bool = False) -> list[int]:
    """Refuse (ValueError) a request this pair cannot run: a model drafter without a draft
    model, or a prompt prompt_ids_for refuses. Returns the prompt's ids. Run makes this check
    first; a caller that runs several generations can make it once, before any output."""
    if settings.method == "spec" and settings.drafter == "model" and pair.draft is None:
        raise ValueError(f"pair {pair.name!r} has no draft model; use the ngram drafter")
    if settings.method == "spec":
        check_tree_request(pair, settings)
    return prompt_ids_for(pair, prompt, settings, raw)


class Run:
    """One generation. Iterate for live updates; read ``trace`` at any point."""

    def __init__(self, pair: ModelPair, prompt: str, settings: Settings, raw: bool = False) -> None:
        self.pair, self.settings = pair, settings
        self.prompt_ids = check_request(pair, prompt, settings, raw)
        self.device = pair.device
        models = pair.describe()
        models["drafter"] = settings.drafter if settings.method == "spec" else "none"
        self.trace = Trace(
            method=settings.method,
            prompt=prompt,
            prompt_ids=list(self.prompt_ids),
            settings=settings.to_dict(),
            models=models,
            verification=verification_for(settings).label if settings.method == "spec" else "",
        )
        self._started = False
        # The request's own model state, exposed for inspection (tests, benchmarks).
        self.target_lm: ModelCache | None = None
        self.drafter: Drafter | None = None

    def __iter__(self) -> Iterator[Update]:
        if self._started:
            raise RuntimeError("a Run can be iterated once")
        self._started = True
        return self._spec() if self.settings.method == "spec" else self._ar()

    # --- shared pieces ---------------------------------------------------------------

    def _generator(self) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(self.settings.seed)

    def _target_lm(self) -> ModelCache:
        """The target's cache. Its logits come to the pair's device, where the verification runs and
        the generator lives, even when a device map spreads its layers over several."""
        return self.open_lm(self.pair.target, self._verify_widths())

    def open_lm(self, m: LoadedModel, widths: tuple[int, ...]) -> ModelCache:
        """A cache for one model, as the pair opens it (ModelPair.open_cache: eager, or on
        the pair's compiled path with calls after the prefill padded to one of widths).
        A model that runs eager although the compiled path was asked for says why in the
        trace's description of it."""
        s = self.settings
        max_len = len(self.prompt_ids) + s.max_new_tokens + max(widths) + 1
        lm = self.pair.open_cache(m, widths, max_len, eager=s.drafts_tree)
        why = None if s.drafts_tree else self.pair.ran_eager(m, lm)
        role = "target" if m is self.pair.target else "draft"
        if why and role in self.trace.models and "ran eager" not in self.trace.models[role]:
            self.trace.models[role] += f"; ran eager: {why}"
        return lm

    def _verify_widths(self) -> tuple[int, ...]:
        """The target's call shapes: one token (ar, and a round that drafted nothing) and
        gamma + 1; with adaptive gamma, a few buckets up to max_gamma + 1."""
        s = self.settings
        if s.method == "ar":
            return (1,)
        if not s.adaptive_gamma:
            return (1, s.gamma + 1)
        top = s.limits.max_gamma + 1
        return tuple(sorted({1, *(w for w in (3, 5, 9, 17, 33) if w < top), top}))

    def _emit(
        self,
        new_ids: list[int],
        t_s: float,
        rnd: Round | None = None,
        gaps: list[float] | None = None,
    ) -> None:
        texts = [self.pair.token_text(t) for t in new_ids]
        self.trace.append_call(new_ids, texts, t_s, rnd, gaps)

    @staticmethod
    def _gaps(logits: torch.Tensor, n: int, greedy: bool) -> list[float] | None:
        """Greedy runs record the target's top-2 logit gap at each emitted position (the rows
        that scored them): where two runs part, it shows how near a tie the argmax was."""
        return top2_gap(logits[:n]).tolist() if greedy else None

    def _finish(self, reason: str, t0: float) -> None:
        for lm in (self.target_lm, getattr(self.drafter, "lm", None)):
            if lm is not None:
                lm.close()  # the compiled path's caches go back to their pool
        tr = self.trace
        tr.stop_reason = reason
        tr.text = self.pair.decode(tr.token_ids)
        tr.stats = metrics.summarize(tr, wall_s=clock(self.device) - t0)

    # --- autoregressive baseline -------------------------------------------------------

    @torch.inference_mode()
    def _ar(self) -> Iterator[Update]:
        s, eos = self.settings, self.pair.eos_ids
        pw = s.target_warp()
        target = self.target_lm = self._target_lm()
        gen = self._generator()
        seq = list(self.prompt_ids)
        # No separate prefill: the first call reads the whole prompt and yields a token.
        t0 = clock(self.device)
        reason = "stopped"
        try:
            while len(self.trace.token_ids) < s.max_new_tokens:
                row = target.logits(seq)[-1]
                x = next_token(row, pw, gen)
                seq.append(x)
                t_s = clock(self.device) - t0
                self._emit([x], t_s, gaps=self._gaps(row[None], 1, pw.greedy))
                yield Update(None, [x], len(self.trace.token_ids), t_s)
                if x in eos:
                    reason = "eos"
                    break
            else:
                reason = "max_new_tokens"
        finally:
            self._finish(reason, t0)

    # --- speculative sampling ----------------------------------------------------------

    def _drafter(self) -> Drafter:
        s, pair = self.settings, self.pair
        if s.drafter == "ngram":
            return NgramDrafter(pair.vocab_size, s.ngram_size, pair.eos_ids)
        assert pair.draft is not None
        lm = self.open_lm(pair.draft, (1, 2))  # one token, or two after a full accept
        return ModelDrafter(lm, s.draft_warp(), pair.eos_ids, s.draft_confidence)

    @torch.inference_mode()
    def _spec(self) -> Iterator[Update]:
        s, eos, dev = self.settings, self.pair.eos_ids, self.device
        target = self.target_lm = self._target_lm()
        drafter = self.drafter = self._drafter()
        verification = verification_for(s)
        strategy: RoundStrategy
        if s.drafts_tree:
            self.trace.schema = SCHEMA  # a trace with tree rounds
            assert isinstance(drafter, ModelDrafter)
            strategy = TreeRounds(s, self.pair, target, drafter.lm, verification)
        else:
            strategy = ChainRounds(s, self.pair, target, drafter, verification)
        greedy = s.target_warp().greedy
        gen = self._generator()
        seq = list(self.prompt_ids)
        out = self.trace.token_ids
        # No separate prefill: the first round's draft and verify calls read the prompt.
        t0 = clock(dev)
        reason = "stopped"
        try:
            while len(out) < s.max_new_tokens:
                # a round emits at most its drafts + 1 tokens: never draft past the budget
                new, rnd, rows = strategy.round(seq, s.max_new_tokens - len(out) - 1, gen)
                rnd.index, rnd.start = len(self.trace.rounds), len(out)
                rnd.t_s = clock(dev) - t0
                self._emit(new, rnd.t_s, rnd, self._gaps(rows, len(new), greedy))
                yield Update(rnd, new, len(out), rnd.t_s)
                if rnd.added is None or new[-1] in eos:
                    reason = "eos"
                    break
            else:
                reason = "max_new_tokens"
        finally:
            self._finish(reason, t0)


class RoundStrategy(Protocol):
    """How a round drafts and verifies: a chain (ChainRounds) or a tree
    (specviz.tree_run.TreeRounds). The loop (Run._spec) owns the budget, the clock, the
    trace and the stop."""

    def round(
        self, seq: list[int], room: int, gen: torch.Generator
    ) -> tuple[list[int], Round, torch.Tensor]:
        """Draft at most `room` tokens after seq, verify them with one target call, extend
        seq by the new tokens; return them, the round's record (the loop sets its index,
        start and t_s) and the target's logit rows that scored them [len(new), V]."""
        ...


class ChainRounds:
    """The round strategy of a chain of drafts (Leviathan et al. 2022, Algorithm 1; Chen et
    al. 2023, Algorithm 2), with adaptive gamma where the settings ask for it."""

    def __init__(
        self,
        settings: Settings,
        pair: ModelPair,
        target: ModelCache,
        drafter: Drafter,
        verification: Verification,
    ) -> None:
        self.s, self.pair, self.target, self.drafter = settings, pair, target, drafter
        self.verification = verification
        self.gamma = settings.gamma

    def round(
        self, seq: list[int], room: int, gen: torch.Generator
    ) -> tuple[list[int], Round, torch.Tensor]:
        s, dev, eos = self.s, self.pair.device, self.pair.eos_ids
        pw, gamma = s.target_warp(), self.gamma
        k_max = min(gamma, room)
        ta = clock(dev)
        draft = self.drafter.propose(seq, k_max, gen) if k_max > 0 else self._no_draft()
        tb = clock(dev)
        k = len(draft.ids)
        # Both are over the tokenizer's V ids: padded columns are cut (specviz.lm) and a
        # pair whose model is narrower than V cannot be built (ModelPair).
        logits = self.target.logits(seq + draft.ids, keep=k + 1)  # [k+1, V]
        p = warp(logits, pw)  # [k+1, V]
        q = draft.q.to(dev)  # [k, V]
        drafts = torch.tensor(draft.ids, dtype=torch.long, device=dev)  # [k]
        verdict = self.verification.decide_chain(p, q, drafts, gen, pw.greedy)
        accepted = draft.ids[: verdict.n_accepted]
        ends_on_eos = bool(accepted) and accepted[-1] in eos
        added = None if ends_on_eos else verdict.added_token(gen, pw.greedy)
        new = accepted + ([] if added is None else [added])
        seq.extend(new)
        self.target.rollback(seq)
        self.drafter.rollback(seq)
        tc = clock(dev)
        drafted, added_record = round_decisions(
            s, self.pair.token_text, draft.ids, p, q, verdict, added, self.verification
        )
        rnd = Round(
            index=0,
            start=0,
            gamma=gamma,
            drafted=drafted,
            added=added_record,
            draft_ms=(tb - ta) * 1e3,
            verify_ms=(tc - tb) * 1e3,
            t_s=0.0,
            stop=draft.stop if k_max == gamma or draft.stop != "gamma" else "budget",
        )
        if s.adaptive_gamma:
            self.gamma = next_gamma(gamma, k, verdict.n_accepted, s.limits.max_gamma)
        return new, rnd, logits[: len(new)]

    def _no_draft(self) -> Draft:
        """The round after the budget is spent drafts nothing: a plain target step."""
        return Draft([], torch.empty(0, self.pair.vocab_size), "budget")


def next_gamma(gamma: int, k: int, n_accepted: int, max_gamma: int) -> int:
    """Adaptive gamma, as transformers' heuristic: +2 after a full accept, -1 after a rejection."""
    if k == 0:
        return gamma
    if n_accepted == k:
        return min(gamma + 2, max_gamma)
    return max(1, gamma - 1)


def generate(pair: ModelPair, prompt: str, settings: Settings, raw: bool = False) -> Trace:
    """Run one generation to the end and return its trace."""
    run = Run(pair, prompt, settings, raw=raw)
    for _ in run:
        pass
    return run.trace


def warm_up(pair: ModelPair, prompt: str, settings: Settings, raw: bool = False) -> None:
    """Run both methods for a few tokens, so that no timed run pays for first-call set-up
    (allocator growth, kernel selection, lazy initialisation, and on the compiled path the
    compilation of every shape the run's settings use)."""
    for method in ("ar", "spec"):
        run = Run(pair, prompt, settings.with_(method=method), raw=raw)
        for update in run:
            if update.n_tokens >= 4:
                break
