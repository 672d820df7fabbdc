"""The Gradio app: layout and thin handlers. The only module that imports gradio.

Handlers are plain functions over a per-session :class:`Session` (held in ``gr.State``) and
a :class:`Form` of control values; they yield dicts keyed by view names ("tokens",
"speed", ...), which :func:`build_app` maps onto components. That keeps them testable
without a browser.

Live runs: the speculative run and then the autoregressive baseline (same prompt, settings
and seed) execute back to back on the model thread (specviz.modelthread: every model call
of the app runs there), which never waits for the page, so each trace's own clock (t_s)
measures generation only. The handler polls the live traces,
renders only the rounds that are new (span HTML is cached per round) and yields. Models
load once per process (specviz.models caches them); every event that runs a model shares
one queue, ``concurrency_id="model"``, with a concurrency limit (SPECVIZ_CONCURRENCY,
default 1).

Deployment (see :class:`specviz.config.Deployment`): what may load is decided by a
:class:`PairSource` (the offered registry pairs, custom hub ids when allowed, the
allow-list); a failed load, a CUDA out-of-memory error or a bad trace file becomes one
escaped line in a gr.Error and the app keeps serving. On a ZeroGPU Space (the ``spaces``
package importable and SPACES_ZERO_GPU set) a run executes in one GPU-decorated call that
returns both traces. Nothing loads at import time.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import gradio as gr
import torch
from gradio.components.plot import PlotData

from specviz import metrics, plots, render
from specviz.config import DRAFTERS, RULES, Deployment, Limits, Settings
from specviz.engine import Run, Update, generate
from specviz.models import OFFLINE_IDS, PAIRS, ModelPair, check_model_id, load_pair
from specviz.modelthread import MODEL_THREAD
from specviz.trace import Trace

ASSETS = Path(__file__).resolve().parent.parent / "assets"
MAX_IMPORT_BYTES = 5_000_000  # a trace file for import: 5 MB
REPLAY_SECONDS = 3.0  # an imported trace replays in at most this long
PROMPT_CHARS_PER_TOKEN = 16  # prompts longer than this many characters per allowed token
CUSTOM = "custom"  # the pair-menu entry for a draft and target given by hub ids
GPU_SECONDS = 120  # ZeroGPU: the longest one run may hold a GPU
NO_ALPHA = "alpha was not measured (a minimal trace, or no verified drafts): no theory curve"

Loader = Callable[[str, str], ModelPair]
CustomLoader = Callable[[str, str, str], ModelPair]  # (draft id, target id, dtype)
View = dict[str, Any]

# --- presets ---------------------------------------------------------------------------

_ARTICLE = (
    "The city council voted on Tuesday to turn the old railway yard into a public park. "
    "The site has been empty for twenty years. Residents collected more than 4,000 "
    "signatures asking for green space, and the plan includes a playground, a community "
    "garden and a cycle path linking two neighbourhoods. Work is expected to start next "
    "spring and to cost about 3 million pounds, paid partly by a national grant."
)
_CODE = '''def running_max(values: list[int]) -> list[int]:
    """Return a list whose i-th item is the largest of values[0..i].

    >>> running_max([1, 3, 2, 5, 4])
    [1, 3, 3, 5, 5]
    """
'''
_EDIT = (
    "The colour of the sky depends on the scattering of sunlight. Short wavelengths "
    "scatter more than long ones, so the sky looks blue at noon and red at sunset. "
    "The colour of the sea follows the colour of the sky."
)

PRESETS: dict[str, dict[str, Any]] = {
    "chat": {
        "prompt": "Explain in three sentences why the sky is blue.",
        "drafter": "model",
        "gamma": 4,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "greedy": False,
        "draft_temperature": None,
    },
    "XSum-style summary": {
        "prompt": f"Summarise this article in one sentence.\n\n{_ARTICLE}",
        "drafter": "model",
        "gamma": 4,
        "temperature": 1.0,
        "top_p": 0.8,
        "top_k": 0,
        "greedy": False,
        "draft_temperature": None,
    },
    "HumanEval-style code completion": {
        "prompt": f"Complete this Python function. Reply with code only.\n\n{_CODE}",
        "drafter": "model",
        "gamma": 4,
        "temperature": 0.8,
        "top_p": 0.95,
        "top_k": 0,
        "greedy": False,
        "draft_temperature": None,
    },
    "copy-and-edit (n-gram drafter)": {
        "prompt": "Repeat this text exactly, but write 'color' instead of 'colour':\n\n" + _EDIT,
        "drafter": "ngram",
        "gamma": 8,
        "temperature": 0.0,
        "top_p": 1.0,
        "top_k": 0,
        "greedy": True,
        "draft_temperature": None,
    },
}
PRESET_FIELDS = (
    "prompt",
    "drafter",
    "gamma",
    "temperature",
    "top_p",
    "top_k",
    "greedy",
    "draft_temperature",
)

HOW_TO_READ = (
    """
**p** is the target model's distribution, **q** the draft's (Leviathan et al. 2022;
Chen et al. 2023). Each round the draft proposes gamma tokens; one target call scores them
all; draft *x* is accepted when a uniform draw *u* < min(1, p(x)/q(x)). At the first
rejection the target draws from the residual norm(max(0, p − q)); after a full accept it
draws a bonus token from p. Every round adds between 1 and gamma + 1 tokens.

- **The output distribution is unchanged.** Whatever q is (try a draft temperature far
  from the target's), the text is distributed exactly as sampling from p. A poor draft
  only costs speed: it gets rejected more often.
- **Bit-identical text is a narrower claim.** In greedy mode the two methods should agree
  token for token, and they do in fp32 here; in bf16 the different computation graphs give
  different numerics and a near-tie can flip, after which the texts differ (Chen et al.
  say as much). The greedy check shows where.
- **More arithmetic, not less.** Speculative decoding does extra work (draft steps and
  rejected tokens). It wins because decoding at batch size 1 is limited by memory
  bandwidth, so one target call over gamma + 1 positions costs about as much as one over a
  single position.
- **Latency at batch size 1.** Both papers measure the time per token of one request, and
  so does this page. The speedup is measured here: speculative and autoregressive decoding
  of the same prompt, settings and seed, back to back in the same process after a warm-up.
  The projection tab is a formula, not a measurement.

**Definitions.** """
    + "; ".join(f"*{k}* = {v}" for k, v in metrics.DEFINITIONS.items())
    + "."
)

# Clicking (or pressing Enter on) a token selects it: its round and position go to Python.
TOKEN_JS = """
const pick = (e) => {
  const s = e.target.closest('[data-pos]');
  if (!s || !element.contains(s)) return;
  element.querySelectorAll('.sv-selected').forEach((x) => x.classList.remove('sv-selected'));
  s.classList.add('sv-selected');
  trigger('click', {round: Number(s.dataset.round), pos: Number(s.dataset.pos)});
};
element.addEventListener('click', pick);
element.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') pick(e); });
"""


# --- form and session ------------------------------------------------------------------


@dataclass
class Form:
    """The control values of one request, as the widgets deliver them."""

    prompt: str = ""
    pair: str = "default"
    dtype: str = "auto"
    custom_draft: str = ""
    custom_target: str = ""
    drafter: str = "model"
    gamma: float = 4
    adaptive_gamma: bool = False
    temperature: float = 1.0
    draft_temperature: float | None = None
    top_p: float = 1.0
    top_k: float = 0
    greedy: bool = False
    max_new_tokens: float = 64
    seed: float = 0
    compare: bool = True

    def settings(self, limits: Limits) -> Settings:
        """Validated settings (raises ValueError with the engine's one-line message)."""
        check_prompt_size(self.prompt, limits)
        return Settings(
            drafter=self.drafter,
            gamma=_as_int("gamma", self.gamma),
            adaptive_gamma=bool(self.adaptive_gamma),
            temperature=_as_float("temperature", self.temperature),
            draft_temperature=None
            if self.draft_temperature in (None, "")
            else _as_float("draft_temperature", self.draft_temperature),
            top_p=_as_float("top_p", self.top_p),
            top_k=_as_int("top_k", self.top_k),
            greedy=bool(self.greedy),
            max_new_tokens=_as_int("max_new_tokens", self.max_new_tokens),
            seed=_as_int("seed", self.seed),
            limits=limits,
        )


FORM_FIELDS = tuple(f.name for f in fields(Form))


def check_prompt_size(prompt: Any, limits: Limits) -> None:
    """Refuse a prompt far too long to fit before it reaches the tokenizer."""
    most = limits.max_prompt_tokens * PROMPT_CHARS_PER_TOKEN
    if isinstance(prompt, str) and len(prompt) > most:
        raise ValueError(
            f"prompt is {len(prompt)} characters; this deployment accepts at most {most}"
        )


def _as_int(name: str, x: Any) -> Any:
    """Whole floats from number widgets become ints; anything else is left to Settings."""
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if x is None:
        raise ValueError(f"{name} is empty")
    return x


def _as_float(name: str, x: Any) -> Any:
    if x is None:
        raise ValueError(f"{name} is empty")
    return float(x) if isinstance(x, int) and not isinstance(x, bool) else x


@dataclass
class Session:
    """One browser tab's state: its traces, the cached HTML, the stepper and timings."""

    spec: Trace | None = None
    ar: Trace | None = None
    parts: list[str] = field(default_factory=list)  # token-view spans, one string per round
    rows: list[str] = field(default_factory=list)  # per-round view rows
    stop: threading.Event = field(default_factory=threading.Event)
    stepper: Iterator[Update] | None = None
    step_key: tuple[Any, ...] | None = None
    decode: Callable[[list[int]], str] | None = None
    ui_ms: list[float] = field(default_factory=list)  # cost of each live page update
    first_round_s: float | None = None  # Run pressed -> first round ready to send
    mode: str = "idle"  # idle | run | step | replay

    def __deepcopy__(self, memo: dict[int, Any]) -> Session:
        """Copies hold copies of the traces; the live machinery (stop event, stepper) is new."""
        return Session(
            spec=copy.deepcopy(self.spec, memo),
            ar=copy.deepcopy(self.ar, memo),
            parts=list(self.parts),
            rows=list(self.rows),
            decode=self.decode,
            ui_ms=list(self.ui_ms),
            first_round_s=self.first_round_s,
            mode="idle" if self.mode in ("run", "step") else self.mode,
        )

    def start(self, spec: Trace | None, ar: Trace | None, mode: str) -> None:
        """Forget the previous generation and hold new (possibly live) traces."""
        self.close_stepper()
        self.spec, self.ar, self.mode = spec, ar, mode
        self.parts, self.rows, self.ui_ms = [], [], []
        self.first_round_s = None
        self.stop = threading.Event()

    def sync_rounds(self, upto: int | None = None) -> int:
        """Render the rounds not yet cached (up to `upto`); return how many were new."""
        if self.spec is None:
            return 0
        rounds = self.spec.rounds[: upto if upto is not None else len(self.spec.rounds)]
        new = rounds[len(self.parts) :]
        for r in new:
            self.parts.append(render.round_spans(r))
            self.rows.append(render.round_row(r))
        return len(new)

    def close_stepper(self) -> None:
        if self.stepper is not None:
            try:
                self.stepper.close()  # type: ignore[attr-defined]
            except ValueError:  # a step is executing in another thread right now
                pass
        self.stepper, self.step_key = None, None


def new_session() -> Session:
    return Session()


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn ValueError into gr.Error (escaped, one line) for plain and generator handlers."""

    def error(exc: ValueError) -> gr.Error:
        return gr.Error(render.esc(str(exc).splitlines()[0] if str(exc) else "invalid input"))

    if _is_generator(fn):

        @functools.wraps(fn)
        def gen_wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            except ValueError as exc:
                raise error(exc) from None

        return gen_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ValueError as exc:
            raise error(exc) from None

    return wrapper


def _is_generator(fn: Callable[..., Any]) -> bool:
    import inspect

    return inspect.isgeneratorfunction(fn)


# --- models ----------------------------------------------------------------------------

_warm_lock = threading.Lock()
_warmed: dict[int, ModelPair] = {}  # pairs that have run once in this process


def default_loader(pair: str, dtype: str) -> ModelPair:
    """The registry's pairs through specviz.models (cached once per process)."""
    return load_pair(pair, dtype=dtype)


def default_custom_loader(draft: str, target: str, dtype: str) -> ModelPair:
    """A custom pair of hub ids through specviz.models (cached once per process)."""
    return load_pair(draft=draft, target=target, dtype=dtype)


def zero_gpu() -> bool:
    """Whether this is a ZeroGPU Space: SPACES_ZERO_GPU set and ``spaces`` importable."""
    flag = os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "t", "true")
    return flag and _spaces() is not None


def has_gpu() -> bool:
    """A CUDA device here, or one attached per call by ZeroGPU."""
    return torch.cuda.is_available() or zero_gpu()


def _spaces() -> Any | None:
    try:
        import spaces
    except ImportError:
        return None
    return spaces


def gpu(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn with the ZeroGPU decorator when ``spaces`` is importable (a no-op off ZeroGPU)."""
    spaces = _spaces()
    return fn if spaces is None else spaces.GPU(duration=GPU_SECONDS)(fn)


def offered_pairs(deployment: Deployment, gpu_present: bool | None = None) -> list[str]:
    """The registry pairs this deployment allows: hub pairs first where a GPU is present,
    the offline pair first on a CPU; "custom" last when custom ids are on."""
    gpu_present = has_gpu() if gpu_present is None else gpu_present
    names = [
        n for n, p in PAIRS.items() if deployment.allows(p.draft) and deployment.allows(p.target)
    ]
    offline = [n for n in names if PAIRS[n].target in OFFLINE_IDS]
    hub = [n for n in names if n not in offline]
    ordered = hub + offline if gpu_present else offline + hub
    return ordered + ([CUSTOM] if deployment.custom_models else [])


class PairSource:
    """What this app may load: the offered registry pairs and, when allowed, custom hub ids
    inside the allow-list. Called like a Loader for registry pairs."""

    def __init__(
        self,
        loader: Loader,
        pairs: list[str],
        deployment: Deployment,
        custom_loader: CustomLoader = default_custom_loader,
    ) -> None:
        self.loader, self.custom_loader = loader, custom_loader
        self.pairs = [p for p in pairs if p != CUSTOM]
        self.deployment = deployment

    def __call__(self, pair: str, dtype: str) -> ModelPair:
        self.check(pair)
        return self.loader(pair, dtype)

    def check(self, pair: str, draft: str = "", target: str = "") -> tuple[str, str]:
        """Raise ValueError unless this pair may load; return the checked custom ids."""
        if pair != CUSTOM:
            if pair not in self.pairs:
                raise ValueError(f"unknown pair {pair!r}; this app offers {', '.join(self.pairs)}")
            return "", ""
        if not self.deployment.custom_models:
            raise ValueError("custom model ids are turned off on this deployment")
        if not (str(draft or "").strip() and str(target or "").strip()):
            raise ValueError("a custom pair needs a draft id and a target id")
        ids = check_model_id(draft), check_model_id(target)
        for model_id in ids:
            self.deployment.check_allowed(model_id)
        return ids

    def custom(self, draft: str, target: str, dtype: str) -> ModelPair:
        """A custom pair of hub ids, once they pass :meth:`check`."""
        d, t = self.check(CUSTOM, draft, target)
        return self.custom_loader(d, t, dtype)


def pair_label(form: Form) -> str:
    if form.pair == CUSTOM:
        return f"{form.custom_draft} -> {form.custom_target}"
    return str(form.pair)


def open_pair(loader: Loader, form: Form) -> ModelPair:
    """The form's pair, loaded once per process. Any failure is one ValueError line; pairs
    already loaded stay loaded and keep serving."""
    try:
        if form.pair != CUSTOM:
            return MODEL_THREAD.call(lambda: loader(form.pair, form.dtype))
        if not isinstance(loader, PairSource):
            raise ValueError("custom pairs are not available in this app")
        source = loader
        return MODEL_THREAD.call(
            lambda: source.custom(form.custom_draft, form.custom_target, form.dtype)
        )
    except ValueError:
        raise
    except Exception as exc:
        raise failure(exc, f"loading pair {pair_label(form)!r}") from None


def failure(exc: BaseException, doing: str) -> ValueError:
    """A one-line ValueError for an error while loading or running a model."""
    if isinstance(exc, ValueError):
        return exc
    if is_out_of_memory(exc):
        free_gpu_memory()
        where = "GPU memory" if not isinstance(exc, MemoryError) else "memory"
        return ValueError(
            f"out of {where} while {doing}: choose a smaller pair (such as 'default'), "
            "fewer max new tokens or a shorter prompt"
        )
    text = str(exc).strip().splitlines()
    return ValueError(f"{doing} failed: {text[0] if text else type(exc).__name__}")


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.cuda.OutOfMemoryError, MemoryError, or an older RuntimeError saying so."""
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def free_gpu_memory() -> None:
    """Release cached CUDA blocks after an out-of-memory error (no-op without CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def warm(pair: ModelPair, prompt: str, settings: Settings) -> None:
    """Run the pair once on this prompt, so no timed run pays first-call costs."""
    s = settings.with_(max_new_tokens=2, gamma=2)
    for method in ("spec", "ar"):
        if method == "spec" and pair.draft is None and s.drafter == "model":
            continue
        for _ in Run(pair, prompt, s.with_(method=method)):
            pass


def warm_pair(loader: Loader, form: Form, limits: Limits) -> ModelPair:
    """Load a pair and warm it once per process."""
    settings = form.settings(limits)
    pair = open_pair(loader, form)
    with _warm_lock:
        if id(pair) not in _warmed:
            try:
                MODEL_THREAD.call(lambda: warm(pair, form.prompt, settings))
            except ValueError:
                raise
            except Exception as exc:
                raise failure(exc, f"running pair {pair_label(form)!r}") from None
            _warmed[id(pair)] = pair
    return pair


def run_traces(form: Form, settings: Settings) -> tuple[Trace, Trace | None]:
    """Both runs to the end in one call, with the default loaders: the ZeroGPU path, where
    a GPU is attached per call and arguments and results cross a process boundary."""
    if form.pair == CUSTOM:
        pair = default_custom_loader(form.custom_draft, form.custom_target, form.dtype)
    else:
        pair = default_loader(form.pair, form.dtype)
    warm(pair, form.prompt, settings)
    spec = generate(pair, form.prompt, settings)
    ar = generate(pair, form.prompt, settings.with_(method="ar")) if form.compare else None
    return spec, ar


run_traces_gpu = gpu(run_traces)


# --- the live run ----------------------------------------------------------------------


class Worker(threading.Thread):
    """Runs the speculative run, then the baseline, without ever waiting for the page."""

    def __init__(self, runs: list[Run], stop: threading.Event) -> None:
        super().__init__(daemon=True, name="specviz-run")
        self.runs, self.stop = runs, stop
        self.tick = threading.Event()  # set after every update
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            MODEL_THREAD.call(self.drive)
        except BaseException as exc:  # reported by the handler
            self.error = exc
        finally:
            self.tick.set()

    def drive(self) -> None:
        for r in self.runs:
            it = iter(r)
            for _ in it:
                self.tick.set()
                if self.stop.is_set():
                    it.close()  # finalises the trace as "stopped"
                    break
            if self.stop.is_set():
                break


def run_updates(session: Session, form: Form, loader: Loader, limits: Limits) -> Iterator[View]:
    """Run: load, warm, then stream the speculative run and the baseline; end with all views."""
    t_click = time.perf_counter()
    settings = form.settings(limits)
    session.start(None, None, "run")
    yield {"status": render.status_html(f"loading pair {pair_label(form)!r} ...", "busy")}
    if zero_gpu():
        yield from zero_run(session, form, loader, settings)
        return
    pair = warm_pair(loader, form, limits)
    spec_run = Run(pair, form.prompt, settings)
    ar_run = Run(pair, form.prompt, settings.with_(method="ar")) if form.compare else None
    session.start(spec_run.trace, ar_run.trace if ar_run else None, "run")
    session.decode = pair.decode
    worker = Worker([spec_run] + ([ar_run] if ar_run else []), session.stop)
    worker.start()
    yield {"models": render.models_html(pair.describe()), "tokens": render.tokens_html([])}
    last_speed = 0.0
    try:
        while worker.is_alive():
            worker.tick.wait(0.5)
            worker.tick.clear()
            frame, last_speed = live_frame(session, last_speed)
            if frame:
                if session.first_round_s is None and session.parts:
                    session.first_round_s = time.perf_counter() - t_click
                yield frame
    finally:
        session.stop.set()  # the page went away or the handler was cancelled
    worker.join()
    if worker.error is not None:
        session.start(None, None, "idle")  # no half-finished trace to export or inspect
        raise failure(worker.error, f"running pair {pair_label(form)!r}")
    yield final_frame(session, settings.gamma)


def zero_run(session: Session, form: Form, loader: Loader, settings: Settings) -> Iterator[View]:
    """ZeroGPU: both runs in one GPU call (no live frames), then every view."""
    if isinstance(loader, PairSource):
        loader.check(form.pair, form.custom_draft, form.custom_target)
    try:
        spec, ar = run_traces_gpu(form, settings)
    except ValueError:
        raise
    except Exception as exc:
        raise failure(exc, f"running pair {pair_label(form)!r}") from None
    session.start(spec, ar, "run")
    yield final_frame(session, settings.gamma)


def live_frame(session: Session, last_speed: float) -> tuple[View, float]:
    """The cheap per-round update: new spans, new rows, the speedup chart, a status line."""
    t0 = time.perf_counter()
    new = session.sync_rounds()
    spec, ar = session.spec, session.ar
    out: View = {}
    if new:
        out["tokens"] = render.tokens_html(session.parts, spec.prompt if spec else "")
        out["rounds"] = render.rounds_html(session.rows)
    # The baseline runs token by token: redraw its curve at most ~6 times a second.
    if new or (ar is not None and ar.timeline and t0 - last_speed > 0.15):
        out["speed"] = live_plot(plots.speedup_spec(spec, ar))
        out["status"] = render.status_html(_progress(spec, ar), "busy")
        last_speed = t0
    if out:
        session.ui_ms.append((time.perf_counter() - t0) * 1e3)
    return out, last_speed


def live_plot(spec: dict[str, Any]) -> PlotData:
    """A plotly JSON spec handed to gr.Plot as is, skipping figure validation."""
    return PlotData(type="plotly", plot=json.dumps(spec))


def _progress(spec: Trace | None, ar: Trace | None) -> str:
    text = ""
    if spec is not None:
        text = f"speculative: round {len(spec.rounds)}, {len(spec.token_ids)} tokens"
    if ar is not None and ar.token_ids:
        text += f" · autoregressive baseline: {len(ar.token_ids)} tokens"
    return text or "generating ..."


def final_frame(session: Session, gamma: int) -> View:
    """Every view, from the session's traces alone."""
    session.sync_rounds()
    spec, ar = session.spec, session.ar
    main = spec or ar
    out: View = {
        "tokens": render.trace_tokens_html(main)
        if spec is None
        else render.tokens_html(session.parts, spec.prompt),
        "rounds": render.rounds_html(session.rows),
        "speed": plots.speedup_figure(spec, ar),
        "summary": summary_html(session),
        "table1": table1_html(spec, ar),
        "greedy": greedy_html(session),
        "status": render.status_html(_done_message(main), "info"),
    }
    if main is not None:
        out["models"] = render.models_html({k: str(v) for k, v in main.models.items()})
    out.update(charts(spec, ar, gamma))
    out.update(default_inspection(spec))
    return out


def _done_message(trace: Trace | None) -> str:
    if trace is None:
        return "nothing generated"
    s = trace.stats
    return (
        f"done ({trace.stop_reason}): {s.new_tokens} tokens in {s.wall_s:.2f} s; "
        "click any token to inspect its decision"
    )


def charts(spec: Trace | None, ar: Trace | None, gamma: int, c_user: float = 0.1) -> View:
    """Acceptance charts, theory against measurement, and the projection."""
    if spec is None or not spec.rounds:
        blank = plots.empty_figure("no speculative rounds")
        return {k: blank for k in ("acc_round", "acc_hist", "acc_pos", "theory", "projection")}
    alpha = metrics.alpha(spec)
    c = metrics.cost_ratio(spec, ar) if ar is not None and ar.token_ids else 0.0
    measured = metrics.speedup(ar, spec) if ar is not None and ar.token_ids else None
    out = {
        "acc_round": plots.acceptance_per_round_figure(spec),
        "acc_hist": plots.accepted_histogram_figure(spec),
        "acc_pos": plots.acceptance_by_position_figure(spec),
    }
    if alpha is None:
        return {
            **out,
            "theory": plots.empty_figure(NO_ALPHA),
            "projection": plots.empty_figure(NO_ALPHA),
        }
    return {
        **out,
        "theory": plots.theory_figure(alpha, c, gamma, measured)
        if c
        else plots.empty_figure(
            "theory needs c, measured against the autoregressive baseline (tick Compare)"
        ),
        "projection": plots.projection_figure(alpha, c_user, gamma),
    }


def default_inspection(spec: Trace | None) -> View:
    """Open the inspector on the first rejection (else the first token)."""
    if spec is None or not spec.rounds:
        return {}
    target = next(
        (
            (r.index, r.start + i)
            for r in spec.rounds
            for i, d in enumerate(r.drafted)
            if d.status == "rejected"
        ),
        (0, 0),
    )
    try:
        return inspect_view(spec, *target)
    except ValueError:
        return {}


def inspect_view(trace: Trace | None, round_index: int | None, pos: int | None) -> View:
    """Inspector views for (round, pos) from the stored trace: no model call."""
    if trace is None or not trace.rounds:
        raise ValueError("no speculative trace yet: press Run or Step, or import a trace")
    if pos is None:
        raise ValueError("choose a position")
    r = None if round_index is None or round_index < 0 else int(round_index)
    dec = render.decision_at(trace, r, int(pos))
    return {
        "insp_round": dec.round.index,
        "insp_pos": dec.pos,
        "insp_plot": plots.decision_figure(dec),
        "verdict": render.verdict_html(dec),
    }


# --- summaries -------------------------------------------------------------------------


def summary_html(session: Session) -> str:
    """The run's figures, each with its definition where it has one."""
    spec, ar = session.spec, session.ar
    rows: list[tuple[str, str]] = []
    if spec is not None and spec.rounds:
        s = spec.stats
        d = metrics.DEFINITIONS
        rows += [
            ("new tokens / rounds", f"{s.new_tokens} / {s.rounds}"),
            ("tokens per target call", f"{s.tokens_per_call:.2f}  ({d['tokens per call']})"),
            ("acceptance rate", f"{s.acceptance_rate:.3f}  ({d['acceptance rate']})"),
            ("alpha", f"{metrics.alpha_text(s.alpha)}  ({d['alpha']})"),
            (
                "mean accepted per round",
                f"{metrics.mean_accepted(spec):.2f} drafts, "
                f"{metrics.mean_accepted(spec, with_added=True):.2f} with the added token",
            ),
            ("draft ms / verify ms", f"{s.draft_ms:.0f} / {s.verify_ms:.0f}"),
            ("speculative ms/token", f"{s.ms_per_token:.1f}"),
        ]
    if ar is not None and ar.token_ids:
        rows.append(("autoregressive ms/token", f"{ar.stats.ms_per_token:.1f}"))
        if spec is not None and spec.rounds:
            rows.append(("c", f"{metrics.cost_ratio(spec, ar):.3f}  ({metrics.DEFINITIONS['c']})"))
    rows += _ui_cost_rows(session)
    return render.table_html(rows, "this run") if rows else ""


def _ui_cost_rows(session: Session) -> list[tuple[str, str]]:
    """First-round latency and the page-update cost next to the round it follows."""
    rows = []
    if session.first_round_s is not None:
        rows.append(("first round shown after Run", f"{session.first_round_s:.2f} s"))
    spec = session.spec
    if session.ui_ms and spec is not None and spec.rounds:
        round_ms = statistics.median(r.draft_ms + r.verify_ms for r in spec.rounds)
        rows.append(
            (
                "page update per round (median)",
                f"{statistics.median(session.ui_ms):.1f} ms, against {round_ms:.1f} ms "
                "per round of generation",
            )
        )
    return rows


def table1_html(spec: Trace | None, ar: Trace | None) -> str:
    """Chen et al.'s Table 1 row for this prompt: ms/token both ways and the speedup."""
    if spec is None or ar is None or not spec.token_ids or not ar.token_ids:
        return render.status_html("Table 1 needs both runs: tick Compare and press Run.")
    row = metrics.table1_row(ar, spec)
    return render.table_html(
        [
            ("ArS (autoregressive) ms/token", f"{row['ar_ms_per_token']:.1f}  (1x)"),
            ("SpS (speculative) ms/token", f"{row['spec_ms_per_token']:.1f}"),
            ("speedup", f"{row['speedup']:.2f}x"),
        ],
        "Chen et al. Table 1 columns, measured here (batch size 1)",
    )


def greedy_html(session: Session) -> str:
    """In greedy mode: do both methods give the same text, and if not, where do they part?"""
    spec, ar = session.spec, session.ar
    if spec is None or ar is None:
        return render.status_html("The greedy check compares both runs: tick Compare.")
    s = spec.settings
    if not (s.get("greedy") or s.get("temperature") == 0):
        return render.status_html(
            "Greedy check: switch on Greedy (or temperature 0). When sampling, the two runs "
            "consume random numbers differently, so only their distributions agree."
        )
    verdict = render.greedy_check(spec, ar, session.decode)
    kind = "info" if verdict.startswith("identical") else "error"
    return render.status_html(f"Greedy check: {verdict}", kind)


# --- step, stop, replay, import, export ------------------------------------------------


def step_update(session: Session, form: Form, loader: Loader, limits: Limits) -> View:
    """Step: one round of a speculative run (a new one when the controls changed)."""
    settings = form.settings(limits)
    if zero_gpu():
        raise ValueError("Step needs a model kept in memory; on ZeroGPU press Run, then Replay")
    key = (form.pair, form.custom_draft, form.custom_target, form.dtype, form.prompt, settings)
    out: View = {}
    if session.stepper is None or session.step_key != key or session.mode != "step":
        pair = open_pair(loader, form)
        run = Run(pair, form.prompt, settings)
        session.start(run.trace, None, "step")
        session.stepper, session.step_key = iter(run), key
        session.decode = pair.decode
        out["models"] = render.models_html(pair.describe())
    assert session.stepper is not None and session.spec is not None
    try:
        upd = MODEL_THREAD.call(lambda: _step(session, settings))
    except Exception as exc:
        session.start(None, None, "idle")
        raise failure(exc, f"running pair {pair_label(form)!r}") from None
    done = session.spec.stop_reason != "running"
    if done:
        session.stepper = None
    session.sync_rounds()
    out["tokens"] = render.tokens_html(session.parts, session.spec.prompt)
    out["rounds"] = render.rounds_html(session.rows)
    if upd is not None and upd.round is not None:
        r = upd.round
        out.update(inspect_view(session.spec, r.index, r.start + min(r.n_accepted, r.emitted)))
    n = len(session.spec.rounds)
    msg = f"step mode: round {n} done, {len(session.spec.token_ids)} tokens"
    msg += " (finished: Step again starts over)" if done else " (timings include the pauses)"
    out["status"] = render.status_html(msg, "info")
    if done:
        out.update(final_frame(session, settings.gamma))
        out["status"] = render.status_html(msg, "info")
    return out


def _step(session: Session, settings: Settings) -> Update | None:
    """One round from the session's stepper (on the model thread)."""
    assert session.stepper is not None and session.spec is not None
    upd = next(session.stepper, None)
    if upd is not None and (upd.round is None or _is_last(upd, settings, session.spec)):
        next(session.stepper, None)  # let the run finish and record its stop reason
        upd = upd if upd.round is not None else None
    return upd


def _is_last(upd: Update, settings: Settings, spec: Trace) -> bool:
    r = upd.round
    assert r is not None
    return (
        upd.n_tokens >= settings.max_new_tokens or r.added is None or spec.stop_reason != "running"
    )


def stop_session(session: Session) -> str:
    """Stop: the worker finishes its current round and the run is shown as it stands."""
    session.stop.set()
    if session.mode == "step":
        session.close_stepper()
    return render.status_html("stopping ...", "busy")


def read_trace(path: str | None) -> Trace:
    """A trace from an uploaded JSON file (ValueError with one line when it is not one)."""
    if not path:
        raise ValueError("choose a JSON trace file first")
    with open(path, "rb") as f:
        data = f.read(MAX_IMPORT_BYTES + 1)
    if len(data) > MAX_IMPORT_BYTES:
        raise ValueError(f"trace file is larger than {MAX_IMPORT_BYTES // 1_000_000} MB")
    try:
        trace = Trace.from_json(data)
    except RecursionError:
        raise ValueError("not a JSON trace: nested too deeply") from None
    check_renders(trace)
    return trace


def check_renders(trace: Trace) -> None:
    """A schema-valid trace whose parts disagree (positions, rounds) is refused whole."""
    spec, ar = (trace, None) if trace.method == "spec" else (None, trace)
    try:
        final_frame(Session(spec=spec, ar=ar), int(trace.settings.get("gamma", 4)))
    except Exception as exc:
        raise ValueError(f"trace file is inconsistent: {failure(exc, 'rendering')}") from None


def replay_updates(session: Session, trace: Trace | None = None) -> Iterator[View]:
    """Replay a stored trace round by round at its recorded pace (capped), no model call."""
    if trace is not None:
        spec, ar = (trace, None) if trace.method == "spec" else (None, trace)
        session.start(spec, ar, "replay")
        session.decode = None
    spec = session.spec
    if spec is None and session.ar is None:
        raise ValueError("nothing to replay: press Run, or import a JSON trace")
    gamma = int((spec or session.ar).settings.get("gamma", 4))  # type: ignore[union-attr]
    if spec is not None and spec.rounds:
        session.parts, session.rows = [], []
        delay = min(0.25, REPLAY_SECONDS / len(spec.rounds))
        for i in range(1, len(spec.rounds) + 1):
            session.sync_rounds(upto=i)
            yield {
                "tokens": render.tokens_html(session.parts, spec.prompt),
                "rounds": render.rounds_html(session.rows),
                "status": render.status_html(f"replaying round {i} of {len(spec.rounds)}", "busy"),
            }
            time.sleep(delay)
    yield final_frame(session, gamma)


def import_updates(session: Session, path: str | None) -> Iterator[View]:
    """Import a JSON trace and replay it."""
    yield from replay_updates(session, read_trace(path))


def export_files(session: Session) -> list[str]:
    """The speculative trace as JSON and CSV, and the baseline trace as JSON."""
    if session.spec is None and session.ar is None:
        raise ValueError("nothing to export yet: press Run first")
    out = Path(tempfile.mkdtemp(prefix="specviz-export-"))
    files = []
    if session.spec is not None:
        files.append(out / "specviz-trace.json")
        files[-1].write_text(session.spec.to_json(indent=1), encoding="utf-8")
        files.append(out / "specviz-rounds.csv")
        metrics.rounds_frame(session.spec).to_csv(files[-1], index=False)
    if session.ar is not None:
        files.append(out / "specviz-ar-trace.json")
        files[-1].write_text(session.ar.to_json(indent=1), encoding="utf-8")
    return [str(f) for f in files]


def projection_update(session: Session, c: float) -> Any:
    """The projection for a user-chosen cost ratio c from the measured alpha."""
    spec = session.spec
    if spec is None or not spec.rounds:
        return plots.empty_figure("run first: the projection uses the measured alpha")
    c = _as_float("c", c)
    if not 0 < c <= 10:
        raise ValueError(f"c must be in (0, 10], got {c}")
    alpha = metrics.alpha(spec)
    if alpha is None:
        return plots.empty_figure(NO_ALPHA)
    return plots.projection_figure(alpha, c, int(spec.settings.get("gamma", 4)))


def pair_updates(loader: Loader, form: Form, limits: Limits) -> Iterator[View]:
    """Load (and warm) a pair with visible progress, then show where each model runs."""
    pair = pair_label(form)
    if form.pair == CUSTOM and not (form.custom_draft.strip() and form.custom_target.strip()):
        yield {"status": render.status_html("custom pair: enter a draft id and a target id")}
        return
    yield {
        "status": render.status_html(
            f"loading pair {pair!r} (the first load takes a while) ...", "busy"
        ),
        "models": render.status_html("loading ...", "busy"),
    }
    loaded = open_pair(loader, form)
    try:
        warm_pair(loader, form, limits)
    except ValueError:
        pass  # the form is not valid yet; the first Run warms the pair instead
    yield {
        "status": render.status_html(f"pair {pair!r} ready: press Run or Step"),
        "models": render.models_html(loaded.describe()),
    }


CHECK_MAX_SAMPLES = 2000  # the distribution check: most samples per method


def check_updates(
    loader: Loader,
    form: Form,
    limits: Limits,
    n: Any,
    length: Any,
    rule: str,
    progress: Callable[[float, str], None] | None = None,
) -> View:
    """The distribution check for the form's prompt and settings: N speculative and N
    autoregressive continuations against the exact target probabilities."""
    from specviz import check

    n, length = _as_int("samples", n), _as_int("length", length)
    if not isinstance(n, int) or not 200 <= n <= CHECK_MAX_SAMPLES:
        raise ValueError(f"samples must be in 200..{CHECK_MAX_SAMPLES}, got {n!r}")
    settings = form.settings(limits)
    check.validate(n, length, rule)
    pair = warm_pair(loader, form, limits)

    def sample() -> check.CheckResult | None:
        result = None
        for item in check.iter_check(pair, form.prompt, settings, n, length, rule):
            if isinstance(item, check.Progress):
                if progress is not None:
                    progress(item.done / max(1, item.total), item.stage)
            else:
                result = item
        return result

    try:
        result = MODEL_THREAD.call(sample)
    except ValueError:
        raise
    except Exception as exc:
        raise failure(exc, f"checking pair {pair_label(form)!r}") from None
    assert result is not None
    return {
        "check_plot": check.check_figure(result),
        "check_summary": f"<pre class='sv-check'>{render.esc(result.summary())}</pre>",
    }


def apply_preset(name: str) -> list[Any]:
    """Control values for a preset, in PRESET_FIELDS order."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return [PRESETS[name][f] for f in PRESET_FIELDS]


# --- layout ----------------------------------------------------------------------------


def launch_options() -> dict[str, Any]:
    """What app.py passes to launch(): gradio 6 takes css and theme there."""
    css = render.css_variables() + "\n" + (ASSETS / "specviz.css").read_text(encoding="utf-8")
    return {"css": css, "theme": gr.themes.Soft()}


def serve(demo: gr.Blocks, deployment: Deployment | None = None, **launch: Any) -> None:
    """Queue and launch the app as a deployment sets it (host and port from
    GRADIO_SERVER_NAME and GRADIO_SERVER_PORT; further launch() arguments override)."""
    dep = deployment or Deployment.from_env()
    options: dict[str, Any] = {
        "server_name": os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        "server_port": int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        "max_file_size": MAX_IMPORT_BYTES,
        **launch_options(),
        **launch,
    }
    demo.queue(default_concurrency_limit=dep.concurrency, max_size=dep.queue_size)
    demo.launch(**options)


def build_app(
    loader: Loader | None = None,
    pairs: list[str] | None = None,
    limits: Limits | None = None,
    deployment: Deployment | None = None,
    custom_loader: CustomLoader | None = None,
) -> gr.Blocks:
    """The Blocks app. Loads nothing: models load on the first event that needs them.

    pairs: the registry pairs offered (default: those the deployment allows, ordered for
    this machine's device); limits overrides the deployment's input limits."""
    dep = deployment or Deployment.from_env()
    if limits is not None:
        dep = replace(dep, limits=limits)
    limits = dep.limits
    pairs = list(pairs) if pairs else offered_pairs(dep)
    if dep.custom_models and CUSTOM not in pairs:
        pairs.append(CUSTOM)
    if not dep.custom_models:
        pairs = [p for p in pairs if p != CUSTOM]
    source = PairSource(
        loader or default_loader, pairs, dep, custom_loader or default_custom_loader
    )
    loader = source
    model_queue = {"concurrency_id": "model", "concurrency_limit": dep.concurrency}
    d = Settings()

    with gr.Blocks(title="specviz: speculative decoding, decision by decision") as demo:
        session = gr.State(new_session, time_to_live=3600)
        gr.HTML(
            "<h1>specviz</h1><p>Speculative decoding, decision by decision: "
            "<b>p</b> is the target's distribution, <b>q</b> the draft's.</p>",
            js_on_load=None,
        )
        with gr.Row():
            with gr.Column(scale=1, min_width=320):
                c = _controls(pairs, dep, d)
            with gr.Column(scale=3):
                v = _views(limits)
        views = {**v, "models": c["models"]}
        inputs = [c[name] for name in FORM_FIELDS]

        def form_of(values: tuple[Any, ...]) -> Form:
            return Form(**dict(zip(FORM_FIELDS, values, strict=True)))

        def keyed(out: View) -> dict[Any, Any]:
            return {views[k]: val for k, val in out.items() if k in views}

        out_all = list(views.values())

        @user_errors
        def on_run(sess: Session, *values: Any) -> Iterator[dict[Any, Any]]:
            for out in run_updates(sess, form_of(values), loader, limits):
                yield keyed(out)

        @user_errors
        def on_step(sess: Session, *values: Any) -> dict[Any, Any]:
            return keyed(step_update(sess, form_of(values), loader, limits))

        @user_errors
        def on_pick(sess: Session, rnd: Any, pos: Any) -> dict[Any, Any]:
            return keyed({**inspect_view(sess.spec, rnd, pos), "tabs": gr.Tabs(selected="insp")})

        def on_click(sess: Session, evt: gr.EventData) -> dict[Any, Any]:
            data = getattr(evt, "_data", None) or {}
            if "pos" not in data:
                return {}
            try:
                out = inspect_view(sess.spec, data.get("round"), data["pos"])
            except (ValueError, TypeError):
                return {}
            return keyed({**out, "tabs": gr.Tabs(selected="insp")})

        @user_errors
        def on_import(sess: Session, path: str | None) -> Iterator[dict[Any, Any]]:
            for out in import_updates(sess, path):
                yield keyed(out)

        @user_errors
        def on_replay(sess: Session) -> Iterator[dict[Any, Any]]:
            for out in replay_updates(sess):
                yield keyed(out)

        @user_errors
        def on_pair(*values: Any) -> Iterator[dict[Any, Any]]:
            for out in pair_updates(loader, form_of(values), limits):
                yield keyed(out)

        live = {"show_progress": "minimal", **model_queue}
        quiet: dict[str, Any] = {"show_progress": "hidden", "concurrency_limit": None}
        c["run"].click(on_run, [session, *inputs], out_all, api_name="run", **live)
        c["step"].click(on_step, [session, *inputs], out_all, api_name="step", **live)
        c["stop"].click(stop_session, [session], [views["status"]], api_name="stop", **quiet)
        c["preset"].change(
            user_errors(apply_preset),
            [c["preset"]],
            [c[f] for f in PRESET_FIELDS],
            api_name="preset",
            **quiet,
        )
        for comp in (c["pair"], c["dtype"]):
            comp.change(on_pair, inputs, out_all, api_visibility="private", **live)
        for comp in (c["custom_draft"], c["custom_target"]):
            comp.submit(on_pair, inputs, out_all, api_visibility="private", **live)
        demo.load(on_pair, inputs, out_all, api_visibility="private", **live)
        for view in (views["tokens"], views["rounds"]):
            view.click(on_click, [session], out_all, api_visibility="private", **quiet)
        views["inspect"].click(
            on_pick,
            [session, views["insp_round"], views["insp_pos"]],
            out_all,
            api_name="inspect",
            **quiet,
        )
        views["c_user"].change(
            user_errors(projection_update),
            [session, views["c_user"]],
            [views["projection"]],
            api_name="projection",
            **quiet,
        )
        views["export"].click(
            user_errors(export_files), [session], [views["files"]], api_name="export", **quiet
        )
        views["upload"].upload(on_import, [session, views["upload"]], out_all, api_name="import")
        views["replay"].click(on_replay, [session], out_all, api_name="replay")

        @user_errors
        def on_check(
            n: Any,
            length: Any,
            rule: str,
            *values: Any,
            progress: Any = gr.Progress(),  # noqa: B008
        ) -> dict[Any, Any]:
            def report(fraction: float, stage: str) -> None:
                progress(fraction, desc=stage)

            out = check_updates(loader, form_of(values), limits, n, length, rule, report)
            return keyed(out)

        views["check_run"].click(
            on_check,
            [views["check_n"], views["check_len"], views["check_rule"], *inputs],
            [views["check_plot"], views["check_summary"]],
            api_name="check",
            show_progress="full",
            **model_queue,
        )
    return demo


def _controls(pairs: list[str], dep: Deployment, d: Settings) -> dict[str, Any]:
    """The left column: presets, prompt, model and sampling controls, buttons."""
    limits = dep.limits
    c: dict[str, Any] = {}
    c["preset"] = gr.Dropdown(list(PRESETS), value=None, label="preset")
    c["prompt"] = gr.Textbox(
        PRESETS["chat"]["prompt"],
        label="prompt",
        lines=4,
        max_lines=12,
        max_length=limits.max_prompt_tokens * PROMPT_CHARS_PER_TOKEN,
        elem_id="sv-prompt",
    )
    with gr.Row():
        c["run"] = gr.Button("Run", variant="primary", elem_id="sv-run")
        c["step"] = gr.Button("Step", elem_id="sv-step")
        c["stop"] = gr.Button("Stop", variant="stop", elem_id="sv-stop")
    c["compare"] = gr.Checkbox(
        True, label="compare with autoregressive decoding (measured speedup)"
    )
    with gr.Accordion("models", open=True):
        c["pair"] = gr.Dropdown(pairs, value=pairs[0], label="pair (draft -> target)")
        c["dtype"] = gr.Dropdown(["auto", "float32", "bfloat16"], value="auto", label="dtype")
        with gr.Row(visible=dep.custom_models):
            c["custom_draft"] = gr.Textbox(
                "", label="custom draft id (pair: custom)", placeholder="owner/name", max_length=200
            )
            c["custom_target"] = gr.Textbox(
                "", label="custom target id", placeholder="owner/name", max_length=200
            )
        c["drafter"] = gr.Radio(list(DRAFTERS), value=d.drafter, label="drafter")
        c["models"] = gr.HTML(
            render.status_html("models load when the page opens"),
            js_on_load=None,
            elem_id="sv-models",
        )
    with gr.Accordion("sampling", open=True):
        c["gamma"] = gr.Slider(
            1, limits.max_gamma, d.gamma, step=1, label="gamma (drafts/round)", elem_id="sv-gamma"
        )
        c["adaptive_gamma"] = gr.Checkbox(False, label="adaptive gamma")
        c["temperature"] = gr.Slider(0, 2, d.temperature, step=0.05, label="temperature")
        c["draft_temperature"] = gr.Number(
            None,
            label="draft temperature (changes q only; empty = same as target)",
            elem_id="sv-draft-temp",
        )
        c["top_p"] = gr.Slider(0.05, 1, d.top_p, step=0.05, label="top-p")
        c["top_k"] = gr.Number(d.top_k, precision=0, label="top-k (0 = off)")
        c["greedy"] = gr.Checkbox(False, label="greedy (argmax p and q)")
        c["max_new_tokens"] = gr.Slider(
            1,
            min(512, limits.max_new_tokens),
            64,
            step=1,
            label="max new tokens",
            elem_id="sv-max-new",
        )
        c["seed"] = gr.Number(d.seed, precision=0, label="seed")
    return c


def _views(limits: Limits) -> dict[str, Any]:
    """The right column: status, token view, per-round view and the tabs."""
    v: dict[str, Any] = {}
    v["status"] = gr.HTML(render.status_html("ready"), js_on_load=None, elem_id="sv-status")
    gr.HTML(render.legend_html(), js_on_load=None)
    with gr.Row(elem_id="sv-token-row"):
        v["tokens"] = gr.HTML(
            render.tokens_html([]),
            js_on_load=TOKEN_JS,
            elem_id="sv-tokens",
            max_height=420,
            scale=3,
            autoscroll=True,
        )
        v["rounds"] = gr.HTML(
            render.rounds_html([]),
            js_on_load=TOKEN_JS,
            elem_id="sv-rounds",
            max_height=420,
            scale=2,
            autoscroll=True,
        )
    with gr.Tabs() as tabs:
        v["tabs"] = tabs
        with gr.Tab("Decision inspector", id="insp", elem_id="sv-inspector"):
            with gr.Row():
                v["insp_round"] = gr.Number(None, precision=0, label="round (empty: from position)")
                v["insp_pos"] = gr.Number(None, precision=0, minimum=0, label="output position")
                v["inspect"] = gr.Button("Inspect", elem_id="sv-inspect")
            v["verdict"] = gr.HTML(
                render.status_html("click a token, or choose a round and position"),
                js_on_load=None,
                elem_id="sv-verdict",
            )
            v["insp_plot"] = gr.Plot(label="p and q", elem_id="sv-insp-plot")
        with gr.Tab("Live speedup", id="speed"):
            v["speed"] = gr.Plot(label="tokens against seconds", elem_id="sv-speed")
            v["table1"] = gr.HTML(js_on_load=None)
            v["greedy"] = gr.HTML(js_on_load=None, elem_id="sv-greedy")
            v["summary"] = gr.HTML(js_on_load=None, elem_id="sv-summary")
        with gr.Tab("Acceptance", id="acc"):
            v["acc_round"] = gr.Plot(label="acceptance per round")
            with gr.Row():
                v["acc_hist"] = gr.Plot(label="accepted per round")
                v["acc_pos"] = gr.Plot(label="acceptance by draft position")
        with gr.Tab("Theory and projection", id="theory"):
            v["theory"] = gr.Plot(label="expected speedup against gamma (Leviathan)")
            v["c_user"] = gr.Slider(
                0.01,
                1.0,
                0.1,
                step=0.01,
                label="projection: cost ratio c of a draft step to a bigger target's step",
            )
            v["projection"] = gr.Plot(label="projection (not a measurement)")
        with gr.Tab("Distribution check", id="check"):
            gr.Markdown(
                "Draw N short continuations of the prompt with speculative and with "
                "autoregressive sampling (current settings) and compare both with the exact "
                "target probabilities. *Break the rule* to watch the same check catch a "
                "wrong algorithm."
            )
            with gr.Row():
                v["check_n"] = gr.Slider(200, CHECK_MAX_SAMPLES, 400, step=100, label="samples N")
                v["check_len"] = gr.Slider(1, 3, 2, step=1, label="tokens per continuation")
                v["check_rule"] = gr.Dropdown(
                    list(RULES), value="exact", label="rule (anything but exact is wrong)"
                )
            v["check_run"] = gr.Button("Run the check", elem_id="sv-check-run")
            v["check_summary"] = gr.HTML(js_on_load=None, elem_id="sv-check-summary")
            v["check_plot"] = gr.Plot(label="empirical against exact", elem_id="sv-check-plot")
        with gr.Tab("Export and import", id="io"):
            v["export"] = gr.Button("Export trace (JSON) and rounds (CSV)")
            v["files"] = gr.File(label="exported files", file_count="multiple", interactive=False)
            v["upload"] = gr.File(
                label="import a JSON trace (replayed with no model)",
                file_types=[".json"],
                type="filepath",
            )
            v["replay"] = gr.Button("Replay the current trace")
        with gr.Tab("How to read this", id="how"):
            gr.Markdown(HOW_TO_READ)
    return v
