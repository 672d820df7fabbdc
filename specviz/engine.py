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

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from specviz import metrics
from specviz.clock import clock
from specviz.config import Settings
from specviz.drafters import (
    Drafter,
    check_drafter,
    describe_drafter,
    drafter_for,
    gives_features,
)
from specviz.drafters import entry as drafter_entry
from specviz.drafters import resolve as resolve_drafter
from specviz.lm import ModelCache
from specviz.pair import RAN_EAGER, LoadedModel, ModelPair
from specviz.rounds import ChainRounds, RoundStrategy, TreeRounds, check_tree_request
from specviz.sampling import next_token, top2_gap
from specviz.trace import SCHEMA, Round, Trace
from specviz.updates import Update
from specviz.verify import verification_for


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
    """Refuse (ValueError) a request this pair cannot run: a drafter that needs a draft model
    on a pair without one, a tree the pair cannot run, or a prompt prompt_ids_for refuses.
    Returns the prompt's ids. Run makes this check first; a caller that runs several
    generations can make it once, before any output."""
    if settings.method == "spec":
        check_drafter(pair, settings)
        check_tree_request(pair, settings)
    return prompt_ids_for(pair, prompt, settings, raw)


class Run:
    """One generation. Iterate for live updates; read ``trace`` at any point."""

    def __init__(self, pair: ModelPair, prompt: str, settings: Settings, raw: bool = False) -> None:
        # the trace keeps the settings as asked ("auto" included) and names the drafter
        # that drafted in its models; the run itself goes by the drafter "auto" picks here
        asked = settings
        if settings.method == "spec":
            settings = resolve_drafter(settings, pair)
        self.pair, self.settings = pair, settings
        self.prompt_ids = check_request(pair, prompt, settings, raw)
        self.device = pair.device
        models = pair.describe()
        models["drafter"] = settings.drafter if settings.method == "spec" else "none"
        spec = settings.method == "spec"
        what = describe_drafter(settings, pair) if spec else None
        if what is not None:  # the drafter drafts without the draft model: name what does
            models["draft"] = what
        self.verification = verification_for(settings) if spec else None
        self.trace = Trace(
            method=settings.method,
            prompt=prompt,
            prompt_ids=list(self.prompt_ids),
            settings=asked.stored(),
            models=models,
            verification=self.verification.label if self.verification is not None else "",
        )
        self._started = False
        # An autoregressive run paced to a speculative one (interleave) goes on past its
        # end-of-text, so that both time the same number of tokens.
        self.past_eos = False
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

    def cache_positions(self, widths: tuple[int, ...]) -> int:
        """The most positions this run's caches hold: the prompt, the budget, and the widest
        call's padding past it."""
        return len(self.prompt_ids) + self.settings.max_new_tokens + max(widths) + 1

    def open_lm(self, m: LoadedModel, widths: tuple[int, ...]) -> ModelCache:
        """A cache for one model, as the pair opens it (ModelPair.open_cache: eager, or on
        the pair's compiled path with calls after the prefill padded to one of widths).
        A model that runs eager although the compiled path was asked for says so, and why,
        in the trace's description of it, in place of the pair's compiled path.

        A drafter that reads the target's features gets them from the target's calls: on
        the aoti packages, which return them, the target runs packaged; on a compiled path
        whose calls give none (torch.compile's; a named one is refused by check_drafter),
        or a cache that turns out to give none, it runs eager, and the trace says why."""
        s = self.settings
        role = "target" if m is self.pair.target else "draft"
        features = role == "target" and s.method != "ar" and drafter_entry(s.drafter).reads_hidden
        backend = self.pair.compile_backend
        lacks = f"the {s.drafter} drafter reads its hidden states, which compiled calls lack"
        eager = s.drafts_tree or (features and not gives_features(backend))
        positions = self.cache_positions(widths)
        lm = self.pair.open_cache(m, widths, positions, eager=eager)
        fell_back = features and not eager and not getattr(lm, "gives_hidden", False)
        if fell_back:  # a compiled cache whose forwards return logits only
            lm.close()
            lm = self.pair.open_cache(m, widths, positions, eager=True)
        why = None if s.drafts_tree else self.pair.ran_eager(m, lm)
        if features and backend is not None and (fell_back or not gives_features(backend)):
            why = lacks
        if why and role in self.trace.models and RAN_EAGER not in self.trace.models[role]:
            self.trace.models[role] = m.describe() + RAN_EAGER + why
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
        if self.target_lm is not None:
            self.target_lm.close()  # the compiled path's caches go back to their pool
        if self.drafter is not None:
            self.drafter.close()
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
                paused = clock(self.device)
                try:
                    yield Update(None, [x], len(self.trace.token_ids), t_s)
                finally:  # the time the consumer holds this run is not the run's
                    t0 += clock(self.device) - paused
                if x in eos and not self.past_eos:
                    reason = "eos"
                    break
            else:
                reason = "max_new_tokens"
        finally:
            self._finish(reason, t0)

    # --- speculative sampling ----------------------------------------------------------

    @torch.inference_mode()
    def _spec(self) -> Iterator[Update]:
        s, eos, dev = self.settings, self.pair.eos_ids, self.device
        target = self.target_lm = self._target_lm()
        drafter = self.drafter = drafter_for(s, self.pair, self.open_lm)
        if drafter_entry(s.drafter).reads_hidden:
            target.want_hidden = True  # the cache keeps its last hidden state where it can
        if s.drafts_tree:
            self.trace.schema = SCHEMA  # a trace with tree rounds
        rounds = TreeRounds if s.drafts_tree else ChainRounds
        assert self.verification is not None  # a speculative run built it
        strategy: RoundStrategy = rounds(s, self.pair, target, drafter, self.verification)
        greedy = s.target_warp().greedy
        gen = self._generator()
        seq = list(self.prompt_ids)
        out = self.trace.token_ids
        # No separate prefill: the first round's calls read the prompt (specviz.rounds).
        t0 = clock(dev)
        reason = "stopped"
        try:
            while len(out) < s.max_new_tokens:
                # a round emits at most its drafts + 1 tokens: never draft past the budget
                new, rnd, rows = strategy.round(seq, s.max_new_tokens - len(out) - 1, gen)
                rnd.index, rnd.start = len(self.trace.rounds), len(out)
                rnd.t_s = clock(dev) - t0
                self._emit(new, rnd.t_s, rnd, self._gaps(rows, len(new), greedy))
                paused = clock(dev)
                try:
                    yield Update(rnd, new, len(out), rnd.t_s)
                finally:  # the time the consumer holds this run is not the run's
                    t0 += clock(dev) - paused
                if rnd.added is None or new[-1] in eos:
                    reason = "eos"
                    break
            else:
                reason = "max_new_tokens"
        finally:
            self._finish(reason, t0)


def interleave(runs: Sequence[Run]) -> Iterator[tuple[int, Update]]:
    """Advance several runs of one prompt alternately on this thread, always the one with
    the fewest tokens so far (the earlier in the list on a tie), and yield (its index, its
    update). Each run's clock counts only its own work, so runs compared this way meet the
    same load on a shared machine, stretch by stretch, where runs one after the other meet
    whatever load each happened to get.

    An autoregressive run in the list goes on past its own end-of-text while a speculative
    run is longer, and is ended ("matched") once every speculative run has ended and it
    holds as many tokens as the longest: speeds then compare equal lengths. Closing this
    iterator closes every run still going (each trace is finalised as stopped)."""
    spec = [r for r in runs if r.settings.method == "spec"]
    for r in runs:
        r.past_eos = bool(spec) and r.settings.method == "ar"
    its: dict[int, Iterator[Update]] = {i: iter(r) for i, r in enumerate(runs)}
    try:
        while its:
            going_spec = [i for i in its if runs[i].settings.method == "spec"]
            if spec and not going_spec:  # only paced baselines are left
                longest = max(len(r.trace.token_ids) for r in spec)
                for i in [i for i in its if len(runs[i].trace.token_ids) >= longest]:
                    its.pop(i).close()
                    _matched(runs[i])
                if not its:
                    break
            i = min(its, key=lambda j: (len(runs[j].trace.token_ids), j))
            upd = next(its[i], None)
            if upd is None:
                del its[i]
                continue
            yield i, upd
    finally:
        for it in its.values():
            close = getattr(it, "close", None)
            if close is not None:
                close()


def _matched(run: Run) -> None:
    """A paced baseline ended at the speculative runs' length: say so (or "eos" where its
    last token ended the text anyway)."""
    tr = run.trace
    last_eos = bool(tr.token_ids) and tr.token_ids[-1] in run.pair.eos_ids
    tr.stop_reason = "eos" if last_eos and tr.token_ids.count(tr.token_ids[-1]) == 1 else "matched"


def compare(
    pair: ModelPair, prompt: str, settings: Settings, raw: bool = False
) -> tuple[Trace, Trace]:
    """The speculative run and its autoregressive baseline (same prompt, settings, seed),
    interleaved to the end (:func:`interleave`)."""
    spec = Run(pair, prompt, settings.with_(method="spec"), raw=raw)
    ar = Run(pair, prompt, settings.with_(method="ar"), raw=raw)
    for _ in interleave([spec, ar]):
        pass
    return spec.trace, ar.trace


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
