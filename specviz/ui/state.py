"""Per-request and per-visitor state: the form the controls deliver and the session a browser
tab keeps in ``gr.State``. Nothing here renders: the session holds the HTML that
specviz.ui.frames rendered for its rounds.

Form is derived from config.Settings: one field per setting the app offers, beside the
controls that are not settings (:class:`Controls`). Its defaults are the controls' initial
values and equal the CLI's defaults, so an untouched page runs exactly what
``python -m specviz generate`` runs.
"""

from __future__ import annotations

import copy
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any, ClassVar

from specviz.analysis.calibration import Calibration
from specviz.analysis.runlog import ExperimentLog
from specviz.config import DEFAULT_PROMPT, Limits, Setting, Settings, form_defaults, offered
from specviz.engine import Update
from specviz.trace import Trace, has_overlaps

PROMPT_CHARS_PER_TOKEN = 16  # prompts longer than this many characters per allowed token
IMPORTED = "imported from a file, not run on this server"  # shown with an imported run
Changes = dict[str, Any]  # a handler's output: component name -> value


DEFAULTS = Settings()  # the CLI's defaults: untouched controls mean exactly these


@dataclass
class Controls:
    """The controls of one request that are not settings: the prompt, the pair, the baseline
    and the compiled path. :func:`form_class` adds one field per setting the app offers."""

    prompt: str = DEFAULT_PROMPT
    pair: str = "default"
    dtype: str = "auto"
    custom_draft: str = ""
    custom_target: str = ""
    compare: bool = True
    # The compiled path (specviz.backend, inductor): static caches and compiled forwards.
    # None: the machine's default (specviz.backend.auto_backend: on CUDA, not on a CPU,
    # where the first run of each shape compiles for minutes), as the CLI's --compile auto.
    compile: bool | None = None

    settings_class: ClassVar[type[Settings]] = Settings

    def settings(self, limits: Limits) -> Settings:
        """Validated settings (raises ValueError with the engine's one-line message)."""
        check_prompt_size(self.prompt, limits)
        values = {s.name: setting_value(s, self) for s in offered("app", self.settings_class)}
        return self.settings_class(**values, limits=limits)


def form_class(cls: type[Settings] = Settings) -> type[Controls]:
    """The form of an app over cls: :class:`Controls` and, per setting the app offers (in
    field order), a field at its widget's initial value (config.form_defaults), an optional
    number's switch box just before it."""
    starts = form_defaults(cls)
    specs: list[tuple[str, Any, Any]] = []
    for s in offered("app", cls):
        if s.meta.switch is not None:
            specs.append((s.meta.switch.name, bool, field(default=False)))
        specs.append((s.name, _widget_type(s), field(default=starts[s.name])))
    doc = (
        "The control values of one request, as the widgets deliver them. The defaults are "
        "the widgets' initial values, which are the CLI's defaults."
    )
    made = make_dataclass("Form", specs, bases=(Controls,), namespace={"__doc__": doc})
    made.__module__ = __name__
    made.settings_class = cls
    return made


def _widget_type(s: Setting) -> Any:
    """What the setting's widget delivers: number boxes and sliders give floats, a tuple's
    text box a string; an optional number may arrive empty."""
    kind = {int: float, tuple: str}.get(s.kind, s.kind)
    return kind | None if s.optional and s.kind is not tuple else kind


def setting_value(s: Setting, form: Any) -> Any:
    """The setting's value from its widget: whole floats become ints, a tuple's text is
    parsed, an optional number is None unless its switch is on; ValueError for an empty
    number."""
    if s.meta.switch is not None and not getattr(form, s.meta.switch.name):
        return None
    return convert(s, getattr(form, s.name))


def convert(s: Setting, x: Any) -> Any:
    """A widget's or an argument's value as the setting takes it (ValueError when empty)."""
    if s.kind is bool:
        return bool(x)
    if s.kind is int:
        return as_int(s.words, x)
    if s.kind is float:
        return as_float(s.words, x)
    return s.parse(x)


# The control values of one request: Controls and the Settings the app offers. An untouched
# page's draft runs at the target's temperature, as the CLI's without --draft-temperature:
# an optional setting applies only while its switch is on.
Form = form_class(Settings)
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
    specviz.ui.frames.sync_rounds), the stepper and timings, and
    what accumulates over its runs (the experiment log, the calibration counts)."""

    spec: Trace | None = None
    ar: Trace | None = None
    spans: list[str] = field(default_factory=list)  # the token view's spans, one string per round
    rows: list[str] = field(default_factory=list)  # per-round view rows
    stop: threading.Event = field(default_factory=threading.Event)
    stepper: Iterator[Update] | None = None
    step_key: tuple[Any, ...] | None = None
    decode: Callable[[list[int]], str] | None = None
    ui_ms: list[float] = field(default_factory=list)  # cost of each live page update
    first_round_s: float | None = None  # Run pressed -> first round ready to send
    mode: str = "idle"  # idle | run | step | replay | shared
    shade: bool = False  # shade drafted tokens by their overlap sum_x min(p, q)
    log: ExperimentLog = field(default_factory=ExperimentLog)  # one row per Run
    calibration: Calibration = field(default_factory=Calibration)  # over the logged runs
    race_nonce: int = 0  # a new race replay restarts the animation
    # A shared run opened from its link (specviz.ui.shared): its id, the controls as they
    # stood when it opened (a Step with them unchanged walks its rounds) and the rounds shown
    # by those Steps (0: the whole run)
    shared_id: str | None = None
    shared_form: Any = None
    shared_at: int = 0
    # Whether the traces were imported from a file (the Data tab) rather than run by this
    # server: set by the server when it reads the file, never by the file, and kept when the
    # run is shared and its link opened (specviz.sharestore)
    imported: bool = False
    # A recorded lesson opened from its link (specviz.ui.lesson_replay.Walk): where its
    # visitor is in it; None: none
    recorded: Any = None
    # an anonymous key of this page's answers to the verifier on a link (specviz.classpool):
    # random, so that answering a draft again replaces the answer; nothing else is kept
    voter: str = field(default_factory=lambda: secrets.token_hex(8))
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards spans

    def __deepcopy__(self, memo: dict[int, Any]) -> Session:
        """Copies hold copies of the traces and the log; the live machinery (stop event,
        stepper, lock) is new."""
        return Session(
            spec=copy.deepcopy(self.spec, memo),
            ar=copy.deepcopy(self.ar, memo),
            spans=list(self.spans),
            rows=list(self.rows),
            decode=self.decode,
            ui_ms=list(self.ui_ms),
            first_round_s=self.first_round_s,
            mode="idle" if self.mode in ("run", "step") else self.mode,
            shade=self.shade,
            log=copy.deepcopy(self.log, memo),
            calibration=copy.deepcopy(self.calibration, memo),
            race_nonce=self.race_nonce,
            shared_id=self.shared_id,
            shared_form=self.shared_form,
            shared_at=self.shared_at,
            imported=self.imported,
            recorded=copy.copy(self.recorded),
        )

    def start(
        self, spec: Trace | None, ar: Trace | None, mode: str, imported: bool = False
    ) -> None:
        """Forget the previous generation and hold new (possibly live) traces, run by this
        server unless imported; the log, the calibration and the shading switch stay."""
        self.close_stepper()
        self.spec, self.ar, self.mode, self.imported = spec, ar, mode, imported
        with self.lock:
            self.spans, self.rows = [], []
        self.ui_ms, self.first_round_s = [], None
        self.shared_id, self.shared_form, self.shared_at = None, None, 0
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
