"""Drafters: what proposes the drafts a round verifies, each one a class in its own module
of this package, as the verifications are in specviz.verify.

The registry here is plain data (no torch): a drafter's name (Settings.drafter), where its
class lives, whether it needs the pair's draft model and whether it drafts trees.
:func:`drafter_for` builds the one a run's settings choose; the engine asks nothing else.
Settings (specviz.config) knows no drafter: the front ends offer the names of
:data:`CHOICES`, and the request check (:func:`check_drafter`, run by every Run)
refuses a name not registered.

Adding a drafter: one module with its class (the protocol of specviz.drafters.base, and a
``build(settings, pair, open_lm)`` class method), and one :func:`register` call with its
:class:`Entry`. A drafter that reads the target's features (EAGLE, Medusa) gets the
target's outputs of each verify call (its logit rows, and its last hidden state at every
position the call read where the backend gives it) through ``after_round``; its entry says
``reads_hidden``. The compiled path's ahead-of-time packages (``aoti``) return the hidden
state beside the logits, so such a run's target runs packaged there; torch.compile's
forwards give none, so a run whose target would run on them is refused before any model
call where the request named the backend, and opens its target eager where "auto" chose it
(:func:`gives_features`). The built-in one is "eagle" (specviz.drafters.head).

"auto" (:data:`AUTO`, the default) is no drafter of its own: a run resolves it on its pair
(:func:`resolve`) to the drafter the pair's measured draft choice picks (the offline pair's
record, specviz.backend.draft_choice: the EAGLE head where one is cached and its prediction
beats the draft's, else the draft model), to the draft model on a pair with no such record,
and to the n-gram drafter on a pair without a draft model. A run's trace keeps its settings
as asked ("auto") and names the drafter that drafted among its models.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specviz.drafters.base import Drafter


@dataclass(frozen=True)
class Entry:
    """One drafter: its setting, where its class lives, and what it needs and does."""

    name: str  # Settings.drafter
    cls: str  # "module:Class", the module's full dotted path
    needs_draft_model: bool  # it drafts with the pair's draft model
    tree: bool  # it drafts trees (propose_tree)
    reads_hidden: bool = False  # it reads the target's last hidden state of each verify call


ENTRIES: dict[str, Entry] = {}

# The compiled paths whose calls give the target's last hidden state beside its logits: the
# ahead-of-time packages (specviz.backend.packages; a shape without one runs eager, which
# gives it too). torch.compile's forwards return logits only.
FEATURE_BACKENDS = frozenset({"aoti"})


def gives_features(backend: str | None) -> bool:
    """Whether a target opened on this compiled path (None: the eager path) gives its last
    hidden state at every row it reads."""
    return backend is None or backend in FEATURE_BACKENDS


def register(entry: Entry) -> None:
    """Make a drafter known by its name (the built-in ones are registered below)."""
    ENTRIES[entry.name] = entry


register(Entry("model", "specviz.drafters.model:ModelDrafter", True, True))
register(Entry("ngram", "specviz.drafters.ngram:NgramDrafter", False, False))
register(Entry("eagle", "specviz.drafters.head:HeadDrafter", False, True, reads_hidden=True))


class Names(Sequence[str]):
    """The registered drafters' names, read live, after the fixed names `first`."""

    def __init__(self, first: tuple[str, ...] = ()) -> None:
        self.first = first

    def _all(self) -> tuple[str, ...]:
        return (*self.first, *ENTRIES)

    def __getitem__(self, i: Any) -> Any:
        return self._all()[i]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def __repr__(self) -> str:
        return repr(self._all())


DRAFTERS = Names()

AUTO = "auto"  # the drafter the pair's measurement picks (resolve)

# The settings whose values this registry names, as the front ends offer them (the CLI's
# choices, the app's radio buttons): AUTO, then the registered drafters
CHOICES: dict[str, Sequence[str]] = {"drafter": Names((AUTO,))}


def picked(pair: Any) -> str:
    """The drafter AUTO stands for on this pair: the n-gram drafter without a draft model,
    else what the draft's measured choice picks (its ``drafter``: "eagle" or "model"), else
    the draft model."""
    if pair.draft is None:
        return "ngram"
    name = getattr(getattr(pair.draft, "choice", None), "drafter", None)
    return name if isinstance(name, str) and name in ENTRIES else "model"


def auto_says(pair: Any) -> str:
    """What AUTO drafts with on this pair, and why, for the page's models table."""
    name = picked(pair)
    if pair.draft is None:
        return f"{name} (no draft model)"
    if getattr(pair.draft, "choice", None) is not None:
        return f"{name} (the set-up's measured pick)"
    return f"{name} (no measured pick for this pair)"


def resolve(settings: Any, pair: Any) -> Any:
    """The settings with AUTO replaced by the drafter it picks on this pair (picked);
    other settings as they are."""
    if settings.drafter != AUTO:
        return settings
    return settings.with_(drafter=picked(pair))


def entry(name: str) -> Entry:
    """The entry of a drafter; ValueError (one line) for one not registered."""
    try:
        return ENTRIES[name]
    except KeyError:
        raise ValueError(f"unknown drafter {name!r} (known: {', '.join(ENTRIES)})") from None


def check_settings(settings: Any) -> None:
    """Refuse (ValueError, one line) a drafter the settings cannot run on any pair: one not
    registered, or a tree from a drafter that proposes chains (AUTO is checked once its
    pair has resolved it: check_drafter)."""
    if settings.drafter == AUTO:
        return
    e = entry(settings.drafter)
    if settings.drafts_tree and not e.tree:
        trees = [n for n, o in ENTRIES.items() if o.tree]
        raise ValueError(
            "a tree needs a drafter that drafts trees: "
            f"{' or '.join(f'the {t} drafter' for t in trees)} "
            f"({settings.drafter} proposes one chain)"
        )


def check_drafter(pair: Any, settings: Any) -> None:
    """Refuse (ValueError, one line) a drafter this pair cannot run: one check_settings
    refuses, one that needs a draft model on a pair without one, one that reads the
    target's hidden state where the target would run on a compiled path that gives none
    (torch.compile's; under "auto" the run opens its target eager instead, and its trace
    says so; the aoti packages give it), or
    one its own class refuses (a ``check(pair, settings)`` class method: the
    EAGLE drafter's head missing). Before any model call; AUTO is checked as the drafter
    it picks on this pair."""
    if settings.drafter == AUTO:
        settings = resolve(settings, pair)
        if settings.drafts_tree and not entry(settings.drafter).tree:
            raise ValueError(
                f"a tree needs a drafter that drafts trees: pair {pair.name!r} has no draft "
                f"model, so the drafter auto picks is {settings.drafter}, which proposes one "
                "chain"
            )
    check_settings(settings)
    e = entry(settings.drafter)
    if e.needs_draft_model and pair.draft is None:
        others = [n for n, o in ENTRIES.items() if not o.needs_draft_model]
        raise ValueError(
            f"pair {pair.name!r} has no draft model; use "
            f"{' or '.join(f'the {o} drafter' for o in others)}"
        )
    named = not getattr(pair, "compile_auto", False)  # a backend the request named
    backend = getattr(pair, "compile_backend", None)
    if (
        e.reads_hidden
        and named
        and _target_compiled(pair, settings)
        and not gives_features(backend)
    ):
        raise ValueError(
            f"the {e.name} drafter reads the target's hidden states, which the compiled "
            f"path ({backend}) does not give: run the pair eager (--compile off, or auto, "
            "which runs its target eager or on the aoti packages, which give them)"
        )
    check = getattr(_drafter_class(e), "check", None)
    if check is not None:
        check(pair, settings)


def _target_compiled(pair: Any, settings: Any) -> bool:
    """Whether a run of these settings opens the pair's target on the compiled path: the
    pair has one, the target is not left eager beside it, and the run drafts no tree (a
    tree runs eager). Whether its calls give the hidden state is gives_features's."""
    backend = getattr(pair, "compile_backend", None)
    eager = getattr(pair, "eager_models", None) or {}
    return backend is not None and not settings.drafts_tree and pair.target.name not in eager


def _drafter_class(e: Entry) -> Any:
    module, name = e.cls.split(":")
    return getattr(importlib.import_module(module), name)


def describe_drafter(settings: Any, pair: Any) -> str | None:
    """What drafts for these settings where it is not the pair's draft model, as a trace
    names it in the draft's place (the class's ``describe(pair, settings)``, or its name);
    None for a drafter that drafts with the draft model."""
    e = entry(settings.drafter)
    if e.needs_draft_model:
        return None
    describe = getattr(_drafter_class(e), "describe", None)
    what = f"the {e.name} drafter (no draft model)"
    return describe(pair, settings) if describe is not None else what


def drafter_for(settings: Any, pair: Any, open_lm: Callable[..., Any]) -> Drafter:
    """The drafter a run's settings choose (AUTO already resolved: Run resolves it once),
    built for this pair; open_lm(model, widths) opens a model's cache as the run opens the
    target's."""
    return _drafter_class(entry(settings.drafter)).build(settings, pair, open_lm)


def __getattr__(name: str) -> Any:
    # the protocol and the built-in classes, imported (with torch) on first use
    homes = {
        "Draft": "base",
        "Drafter": "base",
        "TargetOut": "base",
        "ModelDrafter": "model",
        "NgramDrafter": "ngram",
        "HeadDrafter": "head",
        "FeatureHead": "head",
    }
    if name in homes:
        return getattr(importlib.import_module(f"specviz.drafters.{homes[name]}"), name)
    raise AttributeError(name)
