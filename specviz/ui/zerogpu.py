"""ZeroGPU, the way the Spaces documentation shows it: the Space's pair loads at start-up
(``torch.cuda`` reads as available there, so it lands on 'cuda' as the guide's module-level
``model.to('cuda')`` does), and each model-running event calls one function decorated with
``spaces.GPU``, its duration computed from the size of the run.

A run is a decorated generator, so it streams round by round as it does anywhere else.
Step replays the run up to its next round in one GPU call: no model state survives between
GPU calls, and the seed makes the replay the same run. Arguments and yields cross a process
boundary, so only forms, settings and trace pieces (plain dataclasses) go through; the pair
itself is found in the process-wide model cache, which the start-up load filled.

Compiled ahead of time. ZeroGPU has no ``torch.compile`` at run time, so the start-up
compiles the pair's decode calls ahead of time, as Hugging Face's guide to ZeroGPU shows
("Make your ZeroGPU Spaces go brrr with ahead-of-time compilation"): inside one GPU call,
for each model and width (the target's 1 and gamma + 1 at the default gamma, the draft's 1
and 2) ``spaces.aoti_capture`` records the call's arguments, ``torch.export`` exports it
(specviz.backend.aoti.AotiStep: the forward on a static KV cache given as tensors) and
``spaces.aoti_compile`` compiles it; back in the main process ``spaces.aoti_apply`` puts
each compiled forward on a shell module that specviz.backend.aoti.FORWARDS calls. A run with the
compiled box ticked then takes the compiled path's static cache (specviz.backend.StaticLM)
with those forwards; a call of another shape, a tree, a request longer than the compiled
cache, or a start-up whose compilation failed runs eager, and one line on stderr says why.

Off ZeroGPU (``spaces`` missing, or SPACES_ZERO_GPU unset) ``spaces.GPU`` returns the
function unchanged, and the app's runner (specviz.ui.runners) is the local one, which uses
none of this.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from specviz.config import Deployment, Settings
from specviz.engine import Run, interleave, warm_up
from specviz.pair import ModelPair
from specviz.trace import Round, Stats, Trace
from specviz.ui import pairs
from specviz.ui.state import Form

GPU_SECONDS_MAX = 120  # the longest one call may hold a GPU
SETUP_SECONDS = 15  # attaching the GPU, the warm-up, the first forward
SECONDS_PER_TOKEN = 0.1  # a generous budget per generated token (both methods count)


def duration(form: Form, settings: Settings, *_: Any) -> int:
    """Seconds to ask for: the set-up plus a budget per token of every run in the call
    (spaces calls this with the decorated function's own arguments)."""
    tokens = settings.max_new_tokens * (2 if form.compare else 1)
    return int(min(GPU_SECONDS_MAX, SETUP_SECONDS + SECONDS_PER_TOKEN * tokens))


def preload(dep: Deployment) -> ModelPair:
    """At start-up on ZeroGPU (specviz.ui.runners.ZeroGpuRunner): load the first pair this
    Space offers, once per process, and compile its decode calls ahead of time
    (compile_ahead; eager when that fails, with one line saying why)."""
    name = next(p for p in pairs.offered_pairs(dep, gpu_present=True) if p != pairs.CUSTOM)
    pair = pairs.default_loader(name, "auto")
    compile_ahead(name, pair)
    pairs.remember(pair)
    return pair


# --- compiled ahead of time -------------------------------------------------------------

AOTI_SECONDS = 900  # the start-up's GPU call: export and compile every shape
AOTI_CACHE_LEN = 1024  # the static cache's positions (a power of two, as StaticLM's)
AOTI_NOTE = ", compiled ahead of time (AOTInductor, spaces.aoti_*)"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def aoti_widths(settings: Settings | None = None) -> dict[str, tuple[int, ...]]:
    """The widths compiled per role: the target's one-token call and its verify call at
    the default gamma, the draft's one- and two-token calls."""
    g = (settings or Settings()).gamma
    return {"target": (1, g + 1), "draft": (1, 2)}


def _compile_on_gpu(name: str) -> tuple[dict[tuple[str, int], Any], Any]:
    """Inside the start-up's GPU call: each shape captured, exported and compiled, as the
    ZeroGPU guide does; and the GPU's memory bandwidth for the Speed tab's roofline."""
    import torch

    from specviz import costs
    from specviz.backend import aoti

    spaces = pairs.spaces_module()
    pair = pairs.default_loader(name, "auto")
    out: dict[tuple[str, int], Any] = {}
    models = {"target": pair.target, "draft": pair.draft}
    for role, widths in aoti_widths().items():
        m = models[role]
        if m is None:
            continue
        for w in widths:
            step = aoti.AotiStep(m.model, w, AOTI_CACHE_LEN)
            with spaces.aoti_capture(step) as call:
                step(*step.example_args())
            exported = aoti.export_step(step, call.args, call.kwargs)
            out[role, w] = spaces.aoti_compile(exported)
    dev = pair.device.type
    bw = costs.measure_bandwidth(dev) if dev == "cuda" and torch.cuda.is_available() else None
    return out, bw


def compile_ahead(name: str, pair: ModelPair) -> bool:
    """Compile the pair's decode calls ahead of time in one GPU call and apply them here
    (specviz.backend.aoti.FORWARDS); False, with one line on stderr, where that cannot be done."""
    from specviz import costs
    from specviz.backend import aoti

    spaces = pairs.spaces_module()
    missing = [f for f in ("aoti_capture", "aoti_compile", "aoti_apply") if not hasattr(spaces, f)]
    if spaces is None or missing:
        say(f"ZeroGPU runs eager: this spaces package has no {', '.join(missing) or 'aoti'}")
        return False
    if pair.draft is None:
        say(f"ZeroGPU runs eager: pair {name!r} has no draft model to compile")
        return False
    try:
        compiled, bw = spaces.GPU(duration=AOTI_SECONDS)(_compile_on_gpu)(name)
        models = {"target": pair.target, "draft": pair.draft}
        for (role, width), forward in compiled.items():
            shell = aoti.Shell()
            spaces.aoti_apply(forward, shell)
            aoti.FORWARDS.add(models[role].model, width, AOTI_CACHE_LEN, shell)
    except Exception as exc:  # noqa: BLE001 - any failure leaves the eager path serving
        aoti.FORWARDS.clear()
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        say(f"ZeroGPU runs eager: ahead-of-time compilation failed ({type(exc).__name__}: {first})")
        return False
    if bw is not None:
        costs.set_bandwidth(bw)
    shapes = ", ".join(f"{r} {w}" for r, w in sorted(compiled))
    say(f"ZeroGPU: compiled ahead of time for {shapes} positions on a cache of {AOTI_CACHE_LEN}")
    return True


def compiled_ahead(pair: ModelPair | None = None) -> bool:
    """Whether forwards compiled ahead of time serve (this pair's target, if given)."""
    from specviz.backend import aoti

    if pair is None:
        return aoti.FORWARDS.serving()
    return aoti.FORWARDS.has(pair.target.model)


class AotiRun(Run):
    """A Run whose models take the compiled path's static cache with the forwards compiled
    ahead of time (specviz.backend.aoti.FORWARDS) instead of torch.compile's."""

    def __init__(self, pair: ModelPair, prompt: str, settings: Settings) -> None:
        super().__init__(pair, prompt, settings)
        for role in ("target", "draft"):
            if role in self.trace.models:
                self.trace.models[role] += AOTI_NOTE

    def open_lm(self, m: Any, widths: tuple[int, ...]) -> Any:
        from specviz.backend import StaticLM, aoti

        if not aoti.FORWARDS.has(m.model):
            return super().open_lm(m, widths)
        return StaticLM(
            m.model,
            m.name,
            self.pair.vocab_size,
            aoti.FORWARDS,
            widths,
            AOTI_CACHE_LEN,
            self.device,
        )


def run_class(pair: ModelPair, form: Form, settings: Settings, prompt_ids: int) -> type[Run]:
    """AotiRun when the form asks for the compiled path (the box, ticked by default where
    forwards were compiled) and this request can use it; else Run, with one line on stderr
    saying why when the box asked for it."""
    if form.compile is False or not compiled_ahead():
        return Run
    why = None
    if not compiled_ahead(pair):
        why = f"pair {pair.name!r} was not compiled ahead of time"
    elif settings.tree or settings.tree_budget:
        why = "a tree's verify call has no compiled forward"
    elif prompt_ids + settings.max_new_tokens + settings.gamma + 2 > AOTI_CACHE_LEN:
        why = f"the request needs more than the compiled cache's {AOTI_CACHE_LEN} positions"
    if why is not None:
        say(f"ZeroGPU runs this request eager: {why}")
        return Run
    return AotiRun


@dataclass
class Piece:
    """One target call's worth of a run, as it crosses the process boundary."""

    method: str
    round: Round | None  # None for an autoregressive step
    new_ids: list[int]
    texts: list[str]
    t_s: float


@dataclass
class Done:
    """A run's end: what the finished trace adds to its pieces."""

    method: str
    stop_reason: str
    text: str
    stats: Stats


Event = Trace | Piece | Done  # a Trace starts each run (settings, prompt ids, models)


def stream(form: Form, settings: Settings) -> Iterator[Event]:
    """The speculative run and (with compare) the baseline, in turn (engine.interleave),
    one event per target call."""
    pair = pairs.load_default(form)
    cls = run_class(pair, form, settings, len(pair.encode_prompt(form.prompt)))
    if cls is Run:
        warm_up(pair, form.prompt, settings)
    else:  # a fresh GPU process loads each compiled package on its first call
        for method in ("ar", "spec"):
            for upd in cls(pair, form.prompt, settings.with_(method=method)):
                if upd.n_tokens >= 4:
                    break
    methods = ("spec", "ar") if form.compare else ("spec",)
    runs = [cls(pair, form.prompt, settings.with_(method=method)) for method in methods]
    for run in runs:
        yield _empty_copy(run.trace)
    for i, upd in interleave(runs):
        tr = runs[i].trace
        texts = tr.token_texts[len(tr.token_texts) - len(upd.new_ids) :]
        yield Piece(methods[i], upd.round, list(upd.new_ids), list(texts), upd.t_s)
    for method, run in zip(methods, runs, strict=True):
        tr = run.trace
        yield Done(method, tr.stop_reason, tr.text, tr.stats)


def step_trace(form: Form, settings: Settings, rounds: int) -> Trace:
    """The speculative run replayed up to `rounds` rounds (fewer when it ends first)."""
    pair = pairs.load_default(form)
    cls = run_class(pair, form, settings, len(pair.encode_prompt(form.prompt)))
    run = cls(pair, form.prompt, settings)
    it = iter(run)
    for upd in it:
        r = upd.round
        last = r is None or r.added is None or r.added.id in pair.eos_ids
        if len(run.trace.rounds) >= rounds and not (
            last or upd.n_tokens >= settings.max_new_tokens
        ):
            it.close()  # finalises the trace as "stopped"
            break
    return run.trace


def apply(traces: dict[str, Trace], event: Event) -> None:
    """Rebuild the runs' traces from their events, as the engine built them."""
    if isinstance(event, Trace):
        traces[event.method] = event
        return
    tr = traces[event.method]
    if isinstance(event, Piece):
        tr.append_call(event.new_ids, event.texts, event.t_s, event.round)
    else:
        tr.stop_reason, tr.text, tr.stats = event.stop_reason, event.text, event.stats


def _empty_copy(trace: Trace) -> Trace:
    return Trace.from_dict({**trace.to_dict(), "rounds": [], "token_ids": [], "token_texts": []})


@functools.cache
def _decorated(fn: Callable[..., Any], spaces: Any) -> Callable[..., Any]:
    return spaces.GPU(duration=duration)(fn)


def on_gpu(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn decorated with ``spaces.GPU`` (duration from the run's size) when ``spaces`` is
    importable, decorated once per function; fn itself otherwise."""
    spaces = pairs.spaces_module()
    return fn if spaces is None else _decorated(fn, spaces)
