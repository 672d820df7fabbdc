"""Verifications: how a round decides which drafts to keep, each one a class.

``registry`` (no torch) lists them; :func:`verification_for` builds the one a run's
settings (or a trace's stored settings) choose. Every other module asks that object what
the verification does, what it emits and how to say so.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specviz.verify.registry import ENTRIES, Entry, entry, label

if TYPE_CHECKING:
    from specviz.verify.base import Verification

__all__ = ["ENTRIES", "Entry", "entry", "label", "verification_for", "verification_of_entry"]


def _cls(e: Entry) -> type:
    module, name = e.cls.split(":")
    return getattr(importlib.import_module(f"specviz.verify.{module}"), name)


def verification_of_entry(e: Entry, params: Mapping[str, Any]) -> Verification:
    """The verification of an entry, with the parameters it reads from params."""
    cls = _cls(e)
    args = {
        "typical_threshold": "threshold",
        "typical_alpha": "alpha",
        "match_top_k": "k",
    }
    return cls(**{args[f]: params[f] for f in e.reads})


def verification_for(settings: Any) -> Verification:
    """The verification a run's Settings (or a trace's stored settings) choose."""
    from specviz.config import Settings  # the settings' defaults fill an old trace's gaps

    if isinstance(settings, Mapping):
        defaults = Settings()
        get = lambda f: settings.get(f, getattr(defaults, f))  # noqa: E731
    else:
        get = lambda f: getattr(settings, f)  # noqa: E731
    e = entry(str(get("verification")), str(get("rule")))
    return verification_of_entry(e, {f: get(f) for f in e.reads})
