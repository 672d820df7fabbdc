"""The page's scripts: one file each under assets/ (assets/<name>.js), read when the app is
built and kept (without their ``//`` comment lines, which are for the reader).

A script names the Python values it needs as ``__NAME__`` placeholders (the presentation
view's class, the selector of fields that keep their keys, ...), so that each value has one
place, in the module that owns it. :func:`script` fills them in: a :class:`Js` value (another
script) goes in as it is, anything else as its JSON literal. A placeholder left without a
value, or a value the script does not name, is a KeyError.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

ASSETS = Path(__file__).resolve().parent.parent.parent / "assets"
PLACEHOLDER = re.compile(r"\b__([A-Z][A-Z0-9_]*)__\b")


class Js(str):
    """JavaScript source: put into another script as code, not as a string literal."""


@functools.cache
def source(name: str) -> str:
    """assets/<name>.js without its comment lines (read once): what the page runs."""
    text = (ASSETS / f"{name}.js").read_text(encoding="utf-8")
    return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("//")).strip()


def placeholders(name: str) -> set[str]:
    """The ``__NAME__`` placeholders of assets/<name>.js, by NAME."""
    return set(PLACEHOLDER.findall(source(name)))


def script(name: str, **values: Any) -> Js:
    """assets/<name>.js with each ``__NAME__`` replaced by values[NAME]: a Js value as code,
    any other as JSON. KeyError for a placeholder without a value or a value not used."""
    wanted = placeholders(name)
    if missing := wanted - values.keys():
        raise KeyError(f"assets/{name}.js needs {', '.join(sorted(missing))}")
    if unused := values.keys() - wanted:
        raise KeyError(f"assets/{name}.js has no placeholder {', '.join(sorted(unused))}")

    def fill(m: re.Match[str]) -> str:
        value = values[m.group(1)]
        return value if isinstance(value, Js) else json.dumps(value)

    return Js(PLACEHOLDER.sub(fill, source(name)))
