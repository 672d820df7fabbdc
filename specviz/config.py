"""Validated settings for one generation.

Everything a user can set lives in :class:`Settings`, a frozen dataclass that checks itself
on construction and raises ``ValueError`` with a one-line message. No torch and no gradio
here, so the CLI, the app and the tests can validate input before any model is touched.

Settings is also the one schema of the front ends. Each field carries a :class:`Meta` in its
metadata (made by :func:`setting`): its label and help, its valid range or choices, which
front ends offer it (the CLI's flags, the app's form, the ``/generate`` API) and how the app
shows it. :func:`schema` reads the fields back as :class:`Setting` records, from which
specviz.cli.args derives the flags, specviz.ui the form, its widgets and the API signature,
and specviz.lesson its starting controls. Adding a setting is one field here (plus the code
that uses it).

Deployment limits (the largest gamma, max_new_tokens and prompt length a public app
accepts) and the app's deployment settings (:class:`Deployment`: queue size, concurrency,
which model ids may load) come from environment variables, read when they are built, never
at import time.
"""

from __future__ import annotations

import functools
import math
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

# re-exported: the front ends read the choices from config with the other settings
from specviz.verify.registry import LOSSY_VERIFICATIONS as LOSSY_VERIFICATIONS
from specviz.verify.registry import OLD_RULE_NAMES, entry
from specviz.verify.registry import RULES as RULES
from specviz.verify.registry import TREE_ONLY_RULES as TREE_ONLY_RULES
from specviz.verify.registry import TREE_VERIFICATIONS as TREE_VERIFICATIONS
from specviz.verify.registry import VERIFICATIONS as VERIFICATIONS
from specviz.verify.registry import label as verification_name_label

METHODS = ("spec", "ar")
DRAFTERS = ("model", "ngram")
# The verifications and the rejection rule's variants come from specviz.verify.registry,
# which says of each whether it is lossless and which round shapes it takes.
# A tree's node budget: each round's draft and verify calls are this wide at most.
MAX_TREE_NODES = 64
TRACE_LEVELS = ("full", "minimal")
# torch.compile backends of the compiled path (specviz.compiled), and what --compile takes:
# a backend, "off" (the eager path) or "auto" (compiled on CUDA, eager elsewhere).
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
COMPILE_CHOICES = ("auto", "off", *COMPILE_BACKENDS)
# The prompt a run starts from when nobody typed one: the app's first preset, the CLI's check.
DEFAULT_PROMPT = "Explain in three sentences why the sky is blue."
# The smallest temperature above 0 (greedy). logits / T must stay finite in float32: at
# T = 1e-40 it overflows and softmax returns NaN. vLLM raises temperatures below 0.01 to
# 0.01 for the same reason; here they are refused instead, since a silent change would
# change the target distribution the user asked for. At 0.01 a logit gap of 0.1 already
# scales the odds by e^-10, so nothing between 0 and 0.01 differs visibly from greedy.
MIN_TEMPERATURE = 0.01


def _env_int(name: str, default: int, lo: int = 1) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from exc
    if value < lo:
        raise ValueError(f"environment variable {name} must be >= {lo}, got {value}")
    return value


def on_zero_gpu() -> bool:
    """Whether SPACES_ZERO_GPU says this process serves a ZeroGPU Space (the GPU is attached
    per call there, and torch.compile is not supported)."""
    return os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "t", "true")


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"environment variable {name} must be 1 or 0, got {raw!r}")


@dataclass(frozen=True)
class Limits:
    """Upper bounds on user input; public deployments lower them by environment variables."""

    max_gamma: int = 32
    max_new_tokens: int = 2048
    max_prompt_tokens: int = 4096

    @classmethod
    def from_env(cls) -> Limits:
        """Read SPECVIZ_MAX_GAMMA, SPECVIZ_MAX_NEW_TOKENS and SPECVIZ_MAX_PROMPT_TOKENS."""
        base = cls()
        return cls(
            max_gamma=min(base.max_gamma, _env_int("SPECVIZ_MAX_GAMMA", base.max_gamma)),
            max_new_tokens=min(
                base.max_new_tokens, _env_int("SPECVIZ_MAX_NEW_TOKENS", base.max_new_tokens)
            ),
            max_prompt_tokens=_env_int("SPECVIZ_MAX_PROMPT_TOKENS", base.max_prompt_tokens),
        )


@dataclass(frozen=True)
class Deployment:
    """How a public app is served: input limits, the queue, and which model ids may load.

    ``allowed_models`` None allows any hub id; the offline pair's ids are always allowed
    (they load from an installed package, never from the network).
    """

    limits: Limits = field(default_factory=Limits)
    concurrency: int = 1
    queue_size: int = 64
    allowed_models: frozenset[str] | None = None
    custom_models: bool = True

    @classmethod
    def from_env(cls) -> Deployment:
        """Read SPECVIZ_CONCURRENCY, SPECVIZ_QUEUE_SIZE, SPECVIZ_ALLOWED_MODELS (comma
        separated ids), SPECVIZ_CUSTOM_MODELS (1 or 0) and the :class:`Limits` variables."""
        raw = os.environ.get("SPECVIZ_ALLOWED_MODELS", "").strip()
        allowed = frozenset(x.strip() for x in raw.split(",") if x.strip()) if raw else None
        return cls(
            limits=Limits.from_env(),
            concurrency=_env_int("SPECVIZ_CONCURRENCY", cls.concurrency),
            queue_size=_env_int("SPECVIZ_QUEUE_SIZE", cls.queue_size),
            allowed_models=allowed,
            custom_models=_env_bool("SPECVIZ_CUSTOM_MODELS", cls.custom_models),
        )

    def allows(self, model_id: str) -> bool:
        """Whether this deployment may load model_id."""
        if model_id.startswith("offline:") or self.allowed_models is None:
            return True
        return model_id in self.allowed_models

    def check_allowed(self, model_id: str) -> None:
        """Raise ValueError (one line) for a model id outside the allow-list."""
        if not self.allows(model_id):
            raise ValueError(f"model {model_id!r} is not allowed on this deployment")


def verification_label(name: str, rule: str = "rejection") -> str:
    """A verification's name as every view prints it: a lossy one says so, and so does a
    deliberately wrong rule."""
    return verification_name_label(name, rule)


@dataclass(frozen=True)
class Warp:
    """How logits become a distribution: the same transformation is applied to p and q."""

    temperature: float
    top_k: int
    top_p: float

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


# --- the schema: what the front ends know about each setting ---------------------------------

FRONT_ENDS = ("cli", "app", "api")  # the CLI's flags, the app's form, the /generate API
APP_GROUPS = ("models", "sampling")  # the app's sections that hold settings
SCHEMA_KEY = "specviz"  # the key of a Settings field's Meta in its dataclass metadata


@dataclass(frozen=True)
class Switch:
    """The app's box that turns an optional number on: unticked, the setting is None;
    ticked, it takes the widget's value. The box is a form field of its own."""

    name: str  # the form field (and control) of the box
    label: str
    start: float  # where the number's widget stands before anyone moves it
    elem_id: str | None = None


@dataclass(frozen=True)
class Meta:
    """What the front ends need to know about one setting. Plain data: the CLI, the app and
    the API each map it onto their own flags, widgets and parameters.

    The valid range (lo, hi) applies to a number, or to each entry of a tuple; hi is a
    number or the name of a :class:`Limits` field. ``fronts`` says where the setting is
    offered (a subset of :data:`FRONT_ENDS`; empty: set by code only). The app shows a
    number as a slider where ``slider`` is given (its top is capped by hi), else as a
    number box; a choice as radio buttons, a flag as a checkbox, a tuple as comma-separated
    text, and an optional number behind its :class:`Switch`.
    """

    label: str  # the app's label
    help: str = ""  # one line for --help and the API's parameter description
    choices: tuple[str, ...] = ()
    lo: float | None = None
    hi: float | str | None = None
    lo_open: bool = False  # lo itself is not valid
    hi_open: bool = False  # hi itself is not valid
    fronts: tuple[str, ...] = FRONT_ENDS
    flag: str | None = None  # the CLI's flag where it is not --name-with-dashes
    slider: tuple[float, float | None, float] | None = None  # min, max (None: hi), step
    group: str = "sampling"  # the app's section (one of APP_GROUPS)
    elem_id: str | None = None
    switch: Switch | None = None  # how the app turns an optional number on


def setting(default: Any, label: str, **meta: Any) -> Any:
    """A Settings field: its default and its :class:`Meta`."""
    return field(default=default, metadata={SCHEMA_KEY: Meta(label, **meta)})


@dataclass(frozen=True)
class Setting:
    """One Settings field as the front ends read it: name, default, kind and Meta.

    kind is bool, int, float, str or tuple (of ``item``: int or float); ``optional``
    means None is a value too (unset).
    """

    name: str
    default: Any
    kind: type
    item: type | None
    optional: bool
    meta: Meta

    def offered(self, front: str) -> bool:
        return front in self.meta.fronts

    @property
    def flag(self) -> str:
        return self.meta.flag or "--" + self.name.replace("_", "-")

    @property
    def words(self) -> str:
        """The name as a message says it: "draft temperature"."""
        return self.name.replace("_", " ")

    def high(self, limits: Limits) -> float | None:
        hi = self.meta.hi
        return getattr(limits, hi) if isinstance(hi, str) else hi

    def range_text(self, limits: Limits) -> str:
        """The valid values in words: "1..32", "(0, 1]", ">= 0" ("" when unbounded)."""
        lo, hi, kind = self.meta.lo, self.high(limits), self.item or self.kind
        if lo is None and hi is None or kind not in (int, float):
            return ""
        if hi is None:
            return f"{'>' if self.meta.lo_open and kind is float else '>='} {lo:g}"
        if lo is None:
            return f"<= {_bound(hi) if kind is int else format(hi, 'g')}"
        if kind is int:
            return f"{_bound(lo)}..{_bound(hi)}"
        return (
            f"{'(' if self.meta.lo_open else '['}{lo:g}, {hi:g}{')' if self.meta.hi_open else ']'}"
        )

    def check(self, value: Any, limits: Limits) -> Any:
        """The value validated (ValueError, one line); a list for a tuple becomes a tuple."""
        if value is None and self.optional:
            return None
        if self.kind is tuple:
            if isinstance(value, list):
                value = tuple(value)
            if not isinstance(value, tuple) or not value:
                raise ValueError(f"{self.name} must be a non-empty list of numbers, got {value!r}")
            for x in value:
                self._check_one(f"{self.name} entries", self.item, x, limits)
            return value
        self._check_one(self.name, self.kind, value, limits)
        return value

    def _check_one(self, name: str, kind: type | None, value: Any, limits: Limits) -> None:
        m, hi = self.meta, self.high(limits)
        if m.choices:
            _choice(name, value, m.choices)
        elif kind is int:
            _int_range(name, value, None if m.lo is None else int(m.lo), _int_or_none(hi))
        elif kind is float:
            _number_range(name, value, m.lo, hi, m.lo_open, m.hi_open)
        elif kind is str and not isinstance(value, str):
            raise ValueError(f"{name} must be text, got {value!r}")

    def text(self, value: Any) -> str:
        """A value as the CLI and a text box write it ("2,2,1" for a tuple; "" for None)."""
        if value is None:
            return ""
        return ",".join(map(str, value)) if self.kind is tuple else str(value)

    def parse(self, text: Any) -> Any:
        """A tuple from comma-separated text (None for "" when optional; ValueError, one
        line, otherwise); anything that is not text is left to :meth:`check`."""
        if self.kind is not tuple or not isinstance(text, str):
            return text
        parts = [x.strip() for x in text.split(",") if x.strip()]
        if not parts:
            if self.optional:
                return None
            raise ValueError(f"{self.words} is empty")
        try:
            return tuple((self.item or int)(x) for x in parts)
        except ValueError:
            kind = "integers" if self.item is int else "numbers"
            raise ValueError(f"{self.name} must be comma-separated {kind}, got {text!r}") from None


@functools.cache
def schema(cls: type[Settings] | None = None) -> tuple[Setting, ...]:
    """The settings of cls (default :class:`Settings`, or a subclass), in field order: every
    field that carries a :class:`Meta`. A Meta that cannot work raises TypeError."""
    cls = cls or Settings
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        meta = f.metadata.get(SCHEMA_KEY)
        if meta is None:
            continue
        kind, item, optional = _kind(f.name, hints[f.name])
        s = Setting(f.name, f.default, kind, item, optional, meta)
        _check_meta(s)
        out.append(s)
    return tuple(out)


def offered(front: str, cls: type[Settings] | None = None) -> tuple[Setting, ...]:
    """The settings one front end (see :data:`FRONT_ENDS`) offers, in field order."""
    if front not in FRONT_ENDS:
        raise ValueError(f"front end must be one of {', '.join(FRONT_ENDS)}; got {front!r}")
    return tuple(s for s in schema(cls) if s.offered(front))


def form_defaults(cls: type[Settings] | None = None) -> dict[str, Any]:
    """The app's settings controls as an untouched page has them, by form field: each
    setting's default (a tuple as its text) and, for an optional number, its switch off and
    its widget at the switch's start."""
    out: dict[str, Any] = {}
    for s in offered("app", cls):
        if s.meta.switch is not None:
            out[s.meta.switch.name] = False
            out[s.name] = s.meta.switch.start
        else:
            out[s.name] = s.text(s.default) if s.kind is tuple else s.default
    return out


def _kind(name: str, hint: Any) -> tuple[type, type | None, bool]:
    args = typing.get_args(hint)
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"setting {name}: one type or one type and None, got {hint}")
        hint = rest[0]
    if hint in (bool, int, float, str):
        return hint, None, optional
    if typing.get_origin(hint) is tuple:
        items = typing.get_args(hint)
        if len(items) == 2 and items[1] is Ellipsis and items[0] in (int, float):
            return tuple, items[0], optional
    raise TypeError(f"setting {name}: bool, int, float, str or tuple[int, ...], got {hint}")


def _check_meta(s: Setting) -> None:
    m = s.meta
    unknown = sorted(set(m.fronts) - set(FRONT_ENDS))
    if unknown:
        raise TypeError(f"setting {s.name}: unknown front end(s) {', '.join(unknown)}")
    if m.group not in APP_GROUPS:
        raise TypeError(f"setting {s.name}: group must be one of {', '.join(APP_GROUPS)}")
    if m.choices and s.kind is not str:
        raise TypeError(f"setting {s.name}: choices need a str setting")
    if m.slider is not None and s.kind not in (int, float):
        raise TypeError(f"setting {s.name}: a slider needs a number")
    number = s.kind in (int, float)
    if s.offered("app") and s.optional and number and m.switch is None:
        raise TypeError(f"setting {s.name}: an optional number in the app needs a Switch")
    if m.switch is not None and not (s.optional and number):
        raise TypeError(f"setting {s.name}: a Switch belongs to an optional number")


@dataclass(frozen=True)
class Settings:
    """One generation's settings. Invalid values raise ValueError with a one-line message.

    The defaults are the CLI's and the app's untouched controls alike. Temperature 0.7 with
    top-p 0.9 keeps a small target coherent while it still samples; the output is
    distributed exactly as the target's own sampling at whatever values are chosen.

    Each field's Meta (see :func:`setting`) says where it is offered and how; ranges and
    choices in it are checked on construction, the rules between fields in __post_init__.
    """

    method: str = setting(
        "spec", "method", choices=METHODS, fronts=(), help="spec, or the autoregressive baseline"
    )
    drafter: str = setting(
        "model",
        "drafter",
        choices=DRAFTERS,
        group="models",
        help="what proposes the drafts: the draft model, or n-gram lookup in the text so far",
    )
    gamma: int = setting(
        4,
        "gamma (drafts/round)",
        lo=1,
        hi="max_gamma",
        slider=(1, None, 1),
        elem_id="sv-gamma",
        help="tokens drafted per round",
    )
    adaptive_gamma: bool = setting(False, "adaptive gamma", help="grow/shrink gamma per round")
    temperature: float = setting(
        0.7,
        "temperature",
        lo=0,
        slider=(0, 2, 0.05),
        elem_id="sv-temperature",
        help="the sampling temperature of p and q, 0 for greedy",
    )
    # Temperature of the draft's q only (None: the target's). Under a lossless verification
    # the output stays exact: the rule corrects any q; the acceptance changes, either way.
    draft_temperature: float | None = setting(
        None,
        "draft temperature",
        lo=0,
        slider=(0.05, 3, 0.05),
        elem_id="sv-draft-temp",
        switch=Switch(
            "own_draft_temperature",
            "draft uses its own temperature (changes q only: exact under a lossless "
            "verification; acceptance changes)",
            1.5,
            elem_id="sv-own-draft-temp",
        ),
        help="changes q only; unset, the draft samples at the target's temperature",
    )
    top_p: float = setting(
        0.9,
        "top-p",
        lo=0,
        hi=1,
        lo_open=True,
        slider=(0.05, 1, 0.05),
        elem_id="sv-top-p",
        help="nucleus sampling: keep the smallest set of tokens holding this much of p and q",
    )
    top_k: int = setting(0, "top-k (0 = off)", lo=0, help="0 disables top-k")
    greedy: bool = setting(
        False, "greedy (argmax p and q)", help="argmax decoding (one-hot p and q)"
    )
    verification: str = setting(
        "rejection",
        "verification: rejection u < p/q or exact match (lossless); typical or top-k match "
        "(lossy: they keep drafts by a test on p alone, which changes the text's distribution)",
        choices=VERIFICATIONS,
        elem_id="sv-verification",
        help="rejection: u < p/q; exact-match: the target's own sample equals the draft "
        "(both lossless); typical, top-k-match: lossy",
    )
    max_new_tokens: int = setting(
        128,
        "max new tokens",
        lo=1,
        hi="max_new_tokens",
        slider=(1, 512, 1),
        elem_id="sv-max-new",
        help="tokens generated at most",
    )
    seed: int = setting(0, "seed", lo=0, hi=2**63 - 1, help="the seed of every random draw")
    top_n: int = setting(
        10, "tokens listed", lo=1, hi=100, fronts=("cli",), help="tokens listed per position"
    )
    ngram_size: int = setting(
        3,
        "n-gram size",
        lo=1,
        hi=16,
        fronts=(),
        help="the longest n-gram the n-gram drafter matches",
    )
    rule: str = setting(
        "rejection",
        "rule",
        choices=RULES,
        fronts=(),
        help="the rejection rule, or a broken variant",
    )
    trace_level: str = setting(
        "full", "trace level", choices=TRACE_LEVELS, fronts=(), help="what each round records"
    )
    # Children per depth of a drafted tree (specviz.tree), e.g. (2, 2, 1); None: a chain of
    # gamma. With a tree, gamma is its depth.
    tree: tuple[int, ...] | None = setting(
        None,
        "tree (children per depth, e.g. 2,2,1; empty: a chain of gamma)",
        lo=1,
        elem_id="sv-tree",
        help="draft a tree: children per depth, e.g. 2,2,1 (10 nodes); unset, a chain of gamma",
    )
    # The chain's confidence stop: no draft after a token whose own q (greedy: the draft's
    # softmax at temperature 1) is below this. None: draft gamma tokens.
    draft_confidence: float | None = setting(
        None,
        "draft confidence (stop drafting after a token the draft gives less than this)",
        lo=0,
        hi=1,
        lo_open=True,
        hi_open=True,
        slider=(0.05, 0.95, 0.05),
        elem_id="sv-draft-confidence",
        switch=Switch(
            "own_draft_confidence",
            "stop drafting when the draft is unsure (exact: a drafted token is never withdrawn)",
            0.4,
            elem_id="sv-own-draft-confidence",
        ),
        help="stop a round's drafting after a token whose q is below T",
    )
    # A dynamic tree's node budget (specviz.tree.draft_budget_tree): the nodes of highest
    # path confidence are expanded, depth by depth up to gamma. None: no dynamic tree.
    tree_budget: int | None = setting(
        None,
        "tree budget (nodes of a dynamic tree)",
        lo=1,
        hi=MAX_TREE_NODES,
        elem_id="sv-tree-budget",
        switch=Switch(
            "own_tree_budget",
            "draft a dynamic tree (expand the most confident paths, up to a node budget)",
            8,
            elem_id="sv-own-tree-budget",
        ),
        help="draft a dynamic tree of at most N nodes, depth up to gamma (EAGLE-2 style)",
    )
    # The lossy verifications' parameters (vLLM's defaults for typical acceptance).
    typical_threshold: float = setting(
        0.09,
        "typical threshold (lossy typical acceptance: keep x if p(x) > min(this, alpha e^-H))",
        lo=0,
        hi=1,
        lo_open=True,
        elem_id="sv-typical-threshold",
        help="typical acceptance (lossy): the posterior threshold, in (0, 1]",
    )
    typical_alpha: float = setting(
        0.3,
        "typical alpha (lossy typical acceptance: the entropy factor)",
        lo=0,
        hi=1,
        lo_open=True,
        elem_id="sv-typical-alpha",
        help="typical acceptance (lossy): the factor of exp(-H(p)), in (0, 1]",
    )
    match_top_k: int = setting(
        10,
        "top-k match k (lossy: keep a draft among the target's k most likely)",
        lo=1,
        hi=1_000_000,
        elem_id="sv-match-top-k",
        help="top-k-match (lossy): keep a draft among the target's k most likely tokens",
    )
    limits: Limits = field(default_factory=Limits, compare=False, repr=False)

    def __post_init__(self) -> None:
        for s in schema(type(self)):
            value = getattr(self, s.name)
            checked = s.check(value, self.limits)
            if checked is not value:
                object.__setattr__(self, s.name, checked)
        entry(self.verification, self.rule)  # refuses a wrong rule beside another verification
        _above_greedy("temperature", self.temperature)
        _above_greedy("draft_temperature", self.draft_temperature)
        self._check_tree()
        self._check_dynamic()

    def _check_dynamic(self) -> None:
        """The confidence stop and the dynamic tree: their ranges and what they combine with."""
        if self.draft_confidence is not None and self.drafts_tree:
            raise ValueError("draft confidence stops a chain: it cannot run on a tree")
        if self.tree_budget is None:
            return
        if self.tree is not None:
            raise ValueError("give --tree or --tree-budget, not both")
        self._check_tree_combination()

    def _check_tree_combination(self) -> None:
        """What a tree (fixed or dynamic) cannot combine with."""
        if self.drafter != "model":
            raise ValueError("a tree needs the model drafter (n-gram lookup proposes one chain)")
        if self.adaptive_gamma:
            raise ValueError("adaptive gamma changes a chain's length: it cannot run on a tree")
        if self.verification not in TREE_VERIFICATIONS:
            raise ValueError(
                f"{self.verification} verification is not supported on a tree "
                f"(only {', '.join(TREE_VERIFICATIONS)})"
            )
        if not entry(self.verification, self.rule).tree:
            raise ValueError(f"rule {self.rule!r} is not defined on a tree")

    @property
    def drafts_tree(self) -> bool:
        """Whether a round drafts a tree: a fixed shape or a dynamic one."""
        return self.tree is not None or self.tree_budget is not None

    def _check_tree(self) -> None:
        """Validate the tree shape and what combines with it; a tree sets gamma to its depth."""
        if self.tree is None:
            if self.rule in TREE_ONLY_RULES and self.tree_budget is None:
                raise ValueError(
                    f"rule {self.rule!r} differs from the exact rule only on a tree: "
                    "give a tree (--tree)"
                )
            return
        shape = self.tree
        if isinstance(shape, list):
            shape = tuple(shape)
        if not isinstance(shape, tuple) or not shape:
            raise ValueError(f"tree must be a non-empty list of children per depth, got {shape!r}")
        for b in shape:
            _int_range("tree branching", b, 1, MAX_TREE_NODES)
        _int_range("tree depth", len(shape), 1, self.limits.max_gamma)
        nodes = tree_nodes(shape)
        if nodes > MAX_TREE_NODES:
            raise ValueError(
                f"tree {shape_text(shape)} has {nodes} nodes; at most {MAX_TREE_NODES}"
            )
        self._check_tree_combination()
        object.__setattr__(self, "tree", shape)
        object.__setattr__(self, "gamma", len(shape))

    @property
    def is_greedy(self) -> bool:
        """Whether this decodes greedily: the greedy switch, or temperature 0."""
        return bool(self.greedy) or self.temperature == 0

    def target_warp(self) -> Warp:
        """The warp that defines p (and the output distribution)."""
        temperature = 0.0 if self.is_greedy else float(self.temperature)
        return Warp(temperature, int(self.top_k), float(self.top_p))

    def draft_warp(self) -> Warp:
        """The warp that defines q: the target's, except for an optional draft temperature."""
        if self.is_greedy or self.draft_temperature is None:
            return self.target_warp()
        return Warp(float(self.draft_temperature), int(self.top_k), float(self.top_p))

    def with_(self, **changes: Any) -> Settings:
        """A validated copy with some fields changed."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain values for the trace (limits are deployment state, not a setting)."""
        d = asdict(self)
        d.pop("limits")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], limits: Limits | None = None) -> Settings:
        """Inverse of to_dict; unknown keys are an error."""
        known = {f for f in cls.__dataclass_fields__ if f != "limits"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown setting(s): {', '.join(unknown)}")
        return cls(**d, limits=limits or Limits())

    @classmethod
    def from_trace(cls, d: Mapping[str, Any]) -> Settings:
        """A trace's stored settings, as today's fields spell them: a field the trace lacks
        (it was written before the field existed) takes its default, an old name is mapped
        ("exact" was the rejection rule's name), and a key no field has is dropped."""
        known = {f for f in cls.__dataclass_fields__ if f != "limits"}
        values = {k: v for k, v in d.items() if k in known}
        rule = values.get("rule")
        if isinstance(rule, str) and rule in OLD_RULE_NAMES:
            values["rule"] = OLD_RULE_NAMES[rule]
        if isinstance(values.get("tree"), list):
            values["tree"] = tuple(values["tree"])
        return cls(**values)


def tree_nodes(shape: tuple[int, ...]) -> int:
    """Nodes of a tree with shape[d] children under every node of depth d: 2,2,1 has 10."""
    total, width = 0, 1
    for b in shape:
        width *= b
        total += width
    return total


def shape_text(shape: tuple[int, ...]) -> str:
    """A tree shape as the command line writes it: "2,2,1"."""
    return ",".join(str(b) for b in shape)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _choice(name: str, value: Any, options: tuple[str, ...]) -> None:
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(options)}; got {value!r}")


def _int_range(name: str, value: Any, lo: int | None, hi: int | None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bound = f"{lo}..{hi}" if hi is not None and lo is not None else _one_side(lo, hi)
        raise ValueError(f"{name} must be in {bound}, got {value}")


def _one_side(lo: float | None, hi: float | None) -> str:
    return f">= {lo}" if lo is not None else f"<= {hi}"


def _number_range(
    name: str,
    value: Any,
    lo: float | None,
    hi: float | None,
    lo_open: bool = False,
    hi_open: bool = False,
) -> None:
    below = lo is not None and _is_number(value) and (value <= lo if lo_open else value < lo)
    above = hi is not None and _is_number(value) and (value >= hi if hi_open else value > hi)
    if _is_number(value) and not below and not above:
        return
    if lo is not None and hi is not None:
        raise ValueError(
            f"{name} must be in {'(' if lo_open else '['}{lo:g}, {hi:g}"
            f"{')' if hi_open else ']'}, got {value!r}"
        )
    if lo is not None:
        raise ValueError(
            f"{name} must be a number {'>' if lo_open else '>='} {lo:g}, got {value!r}"
        )
    if hi is not None:
        raise ValueError(f"{name} must be a number <= {hi:g}, got {value!r}")
    raise ValueError(f"{name} must be a number, got {value!r}")


def _above_greedy(name: str, value: float | None) -> None:
    """A temperature is 0 (greedy) or at least MIN_TEMPERATURE (None: unset)."""
    if value is not None and 0 < value < MIN_TEMPERATURE:
        raise ValueError(f"{name} must be 0 (greedy) or at least {MIN_TEMPERATURE}, got {value!r}")


def _int_or_none(x: float | None) -> int | None:
    return None if x is None else int(x)


def _bound(x: float) -> str:
    """An integer bound as text: 2^63-1 rather than its nineteen digits."""
    x = int(x)
    if x > 2**20 and (x + 1) & x == 0:
        return f"2^{(x + 1).bit_length() - 1}-1"
    return str(x)
