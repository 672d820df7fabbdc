"""The schema machinery: what the front ends know about each setting.

Each Settings field carries a :class:`Meta` in its metadata (made by :func:`setting`): its
label and help, its valid range or choices, which front ends offer it (the CLI's flags, the
app's form, the ``/generate`` API) and how the app shows it. :func:`schema` reads a
dataclass's fields back as :class:`Setting` records, and :meth:`Setting.check` validates a
value against its Meta with a one-line ValueError. Nothing here knows which settings exist:
specviz.config.settings declares them.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from dataclasses import dataclass, field, fields
from typing import Any

from specviz.config.deployment import Limits

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
        m = self.meta
        if m.choices:
            _choice(name, value, m.choices)
        elif kind is int:
            lo = None if m.lo is None else int(m.lo)
            _int_range(name, value, lo, _int_or_none(self.high(limits)))
        elif kind is float:
            _number_range(name, value, m.lo, self.high(limits), m.lo_open, m.hi_open)
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
def schema(cls: type) -> tuple[Setting, ...]:
    """The settings of cls (default :class:`Settings`, or a subclass), in field order: every
    field that carries a :class:`Meta`. A Meta that cannot work raises TypeError."""
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


def offered(front: str, cls: type) -> tuple[Setting, ...]:
    """The settings one front end (see :data:`FRONT_ENDS`) offers, in field order."""
    if front not in FRONT_ENDS:
        raise ValueError(f"front end must be one of {', '.join(FRONT_ENDS)}; got {front!r}")
    return tuple(s for s in schema(cls) if s.offered(front))


def form_defaults(cls: type) -> dict[str, Any]:
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
    number = _is_number(value)
    below = lo is not None and number and (value <= lo if lo_open else value < lo)
    above = hi is not None and number and (value >= hi if hi_open else value > hi)
    if number and not below and not above:
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


def _int_or_none(x: float | None) -> int | None:
    return None if x is None else int(x)


def _bound(x: float) -> str:
    """An integer bound as text: 2^63-1 rather than its nineteen digits."""
    x = int(x)
    if x > 2**20 and (x + 1) & x == 0:
        return f"2^{(x + 1).bit_length() - 1}-1"
    return str(x)
