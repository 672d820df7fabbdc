"""The views' HTML from Jinja2 templates (specviz/views/templates/*.html.j2).

One :class:`jinja2.Environment`, built on first use and kept: autoescape on, undefined
values an error (StrictUndefined), and every ``{{ value }}`` escaped by :func:`esc`
(html.escape, quotes included, plus the characters that client-side template syntax reads:
``{``, ``}``, ``$`` and the backtick). A value that is already HTML (a
:class:`markupsafe.Markup`, such as what :func:`render` returns) goes in as it is, and
nothing else does.

A template's line breaks, with the indentation after them, are for the reader: they are
dropped when the template is loaded, so the page gets the same compact HTML as if each
template were written on one line (token texts keep their own newlines: they are values).
So a template keeps each tag and each run of text on one line, and writes a space between
two tags where the page needs one (``{{ " " }}`` at the start of a line). No gradio.
"""

from __future__ import annotations

import functools
import html
import re
from typing import Any

import jinja2
from jinja2.ext import Extension
from markupsafe import Markup

from specviz.views.palette import show_whitespace

# Characters escaped beyond html.escape: client-side template syntax (${...}, {{...}}, `).
_EXTRA = str.maketrans({"{": "&#123;", "}": "&#125;", "$": "&#36;", "`": "&#96;"})
_LAYOUT = re.compile(r"\n[ \t]*")


def esc(text: object) -> str:
    """Escape any text for HTML content or a quoted attribute."""
    return html.escape(str(text), quote=True).translate(_EXTRA)


def visible_text(text: str) -> Markup:
    """Escaped token text with spaces, tabs and newlines made visible (carriage returns go);
    the templates' ``visible`` filter: a token's text, never broken inside."""
    return Markup(show_whitespace(esc(text).replace("\r", ""), _ws_span))


def visible_words(text: str) -> Markup:
    """As :func:`visible_text`, with a <wbr> after each space's mark: a long text (the
    prompt, the baseline's output) breaks between its words, not inside one; the templates'
    ``visible_words`` filter."""
    return Markup(show_whitespace(esc(text).replace("\r", ""), _ws_break))


@functools.cache
def _ws_span(glyph: str, char: str) -> str:
    """A whitespace glyph as a span; a tab or newline stays after it, for the layout."""
    return str(macro("text.html.j2", "ws")(glyph, "" if char == " " else char))


@functools.cache
def _ws_break(glyph: str, char: str) -> str:
    """A whitespace glyph as a span, and after a space's mark a <wbr>, where a line may
    break (the mark stands in for the space)."""
    return _ws_span(glyph, char) + ("<wbr>" if char == " " else "")


def _finalize(value: object) -> object:
    """Every template value on its way out: HTML stays, anything else is escaped."""
    return value if hasattr(value, "__html__") else Markup(esc(value))


class _DropLayout(Extension):
    """Drops each line break of a template's source and the indentation after it."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        return _LAYOUT.sub("", source)


@functools.cache
def environment() -> jinja2.Environment:
    """The views' template environment (built once)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("specviz.views", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_finalize,
        extensions=[_DropLayout],
        auto_reload=False,  # the templates ship with the code: read once
    )
    env.filters["visible"] = visible_text
    env.filters["visible_words"] = visible_words
    return env


def render(name: str, **values: Any) -> Markup:
    """templates/<name> filled with values, every plain value escaped."""
    return Markup(environment().get_template(name).render(**values))


@functools.cache
def macro(name: str, macro_name: str) -> Any:
    """A macro of templates/<name>, to call from Python (it returns Markup); looked up once."""
    return getattr(environment().get_template(name).module, macro_name)


def template_names() -> list[str]:
    """Every template the views have."""
    return sorted(environment().list_templates(extensions=["j2"]))
