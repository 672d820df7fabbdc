"""Per-request and per-visitor state: the form the controls deliver and the session a browser
tab keeps in ``gr.State``. Nothing here renders: the session holds the HTML that
specviz.ui.views rendered for its rounds.

Form's defaults are the controls' initial values and equal the CLI's defaults, so an
untouched page runs exactly what ``python -m specviz generate`` runs.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from specviz.analysis.calibration import Calibration
from specviz.analysis.runlog import ExperimentLog
from specviz.config import DEFAULT_PROMPT, Limits, Settings
from specviz.engine import Update
from specviz.trace import Trace, has_overlaps

PROMPT_CHARS_PER_TOKEN = 16  # prompts longer than this many characters per allowed token
View = dict[str, Any]  # a handler's output: view name -> value


DEFAULTS = Settings()  # the CLI's defaults: untouched controls mean exactly these
DRAFT_TEMPERATURE = 1.5  # where the draft-temperature slider starts once it is switched on


@dataclass
class Form:
    """The control values of one request, as the widgets deliver them. The defaults are the
    widgets' initial values, which are the CLI's defaults (:data:`DEFAULTS`)."""

    prompt: str = DEFAULT_PROMPT
    pair: str = "default"
    dtype: str = "auto"
    custom_draft: str = ""
    custom_target: str = ""
    drafter: str = DEFAULTS.drafter
    gamma: float = DEFAULTS.gamma
    adaptive_gamma: bool = DEFAULTS.adaptive_gamma
    temperature: float = DEFAULTS.temperature
    # The draft's own temperature applies only while the box is ticked: an untouched page
    # drafts at the target's temperature, as the CLI does without --draft-temperature.
    own_draft_temperature: bool = False
    draft_temperature: float | None = DRAFT_TEMPERATURE
    top_p: float = DEFAULTS.top_p
    top_k: float = DEFAULTS.top_k
    greedy: bool = DEFAULTS.greedy
    verification: str = DEFAULTS.verification
    typical_threshold: float = DEFAULTS.typical_threshold
    typical_alpha: float = DEFAULTS.typical_alpha
    match_top_k: float = DEFAULTS.match_top_k
    max_new_tokens: float = DEFAULTS.max_new_tokens
    seed: float = DEFAULTS.seed
    compare: bool = True
    # The compiled path (specviz.compiled, inductor): static caches and compiled forwards.
    # None: the machine's default (specviz.compiled.auto_backend: on CUDA, not on a CPU,
    # where the first run of each shape compiles for minutes), as the CLI's --compile auto.
    compile: bool | None = None

    def settings(self, limits: Limits) -> Settings:
        """Validated settings (raises ValueError with the engine's one-line message)."""
        check_prompt_size(self.prompt, limits)
        return Settings(
            drafter=self.drafter,
            gamma=as_int("gamma", self.gamma),
            adaptive_gamma=bool(self.adaptive_gamma),
            temperature=as_float("temperature", self.temperature),
            draft_temperature=as_float("draft temperature", self.draft_temperature)
            if self.own_draft_temperature
            else None,
            top_p=as_float("top_p", self.top_p),
            top_k=as_int("top_k", self.top_k),
            greedy=bool(self.greedy),
            verification=self.verification,
            typical_threshold=as_float("typical_threshold", self.typical_threshold),
            typical_alpha=as_float("typical_alpha", self.typical_alpha),
            match_top_k=as_int("match_top_k", self.match_top_k),
            max_new_tokens=as_int("max_new_tokens", self.max_new_tokens),
            seed=as_int("seed", self.seed),
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


def as_int(name: str, x: Any) -> Any:
    """Whole floats from number widgets become ints; anything else is left to Settings."""
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if x is None:
        raise ValueError(f"{name} is empty")
    return x


def as_float(name: str, x: Any) -> Any:
    if x is None:
        raise ValueError(f"{name} is empty")
    return float(x) if isinstance(x, int) and not isinstance(x, bool) else x


@dataclass
class Session:
    """One browser tab's state: its traces, the HTML cached for their rounds (written by
    specviz.ui.views.sync_rounds), the stepper and timings, and
    what accumulates over its runs (the experiment log, the calibration counts)."""

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
    shade: bool = False  # shade drafted tokens by their overlap sum_x min(p, q)
    log: ExperimentLog = field(default_factory=ExperimentLog)  # one row per Run
    calibration: Calibration = field(default_factory=Calibration)  # over the logged runs
    race_nonce: int = 0  # a new race replay restarts the animation
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards parts

    def __deepcopy__(self, memo: dict[int, Any]) -> Session:
        """Copies hold copies of the traces and the log; the live machinery (stop event,
        stepper, lock) is new."""
        return Session(
            spec=copy.deepcopy(self.spec, memo),
            ar=copy.deepcopy(self.ar, memo),
            parts=list(self.parts),
            rows=list(self.rows),
            decode=self.decode,
            ui_ms=list(self.ui_ms),
            first_round_s=self.first_round_s,
            mode="idle" if self.mode in ("run", "step") else self.mode,
            shade=self.shade,
            log=copy.deepcopy(self.log, memo),
            calibration=copy.deepcopy(self.calibration, memo),
            race_nonce=self.race_nonce,
        )

    def start(self, spec: Trace | None, ar: Trace | None, mode: str) -> None:
        """Forget the previous generation and hold new (possibly live) traces; the log, the
        calibration and the shading switch stay."""
        self.close_stepper()
        self.spec, self.ar, self.mode = spec, ar, mode
        with self.lock:
            self.parts, self.rows = [], []
        self.ui_ms, self.first_round_s = [], None
        self.stop = threading.Event()

    def new_stop(self) -> threading.Event:
        """A fresh stop event for a new measurement that keeps the traces (the sweep)."""
        self.stop = threading.Event()
        return self.stop

    @property
    def shading(self) -> bool:
        """Whether the token view shades: switched on, and the trace recorded overlaps."""
        return self.shade and self.spec is not None and has_overlaps(self.spec)

    def record(self, spec: Trace | None, ar: Trace | None) -> None:
        """Log a finished run and count its decisions (stored traces only: no model call).
        A baseline that never produced a token is left out of the row."""
        ar = ar if ar is not None and ar.token_ids else None
        if spec is None and ar is None:
            return
        self.log.add(spec, ar)
        if spec is not None:
            self.calibration.add(spec)

    def close_stepper(self) -> None:
        if self.stepper is not None:
            try:
                self.stepper.close()  # type: ignore[attr-defined]
            except ValueError:  # a step is executing in another thread right now
                pass
        self.stepper, self.step_key = None, None


def new_session() -> Session:
    return Session()
