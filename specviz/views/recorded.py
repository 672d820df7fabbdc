"""A recorded lesson's HTML (specviz.lesson_record): the panel that shows the step played
above the tokens, the line every speed figure of a recorded lesson carries (when, and on
which machine), the lesson's link, and the class's pooled answers on the verifier's board
(specviz.classpool). Written in templates/recorded.html.j2: every value
escaped, the step's own sentences and statement (HTML the app wrote when it recorded them)
put in as they are. No gradio."""

from __future__ import annotations

from markupsafe import Markup

from specviz.classpool import Tally
from specviz.views.templating import macro


def _html(name: str, *args: object) -> str:
    return str(macro("recorded.html.j2", name)(*args))


def panel_html(
    lesson_id: str,
    number: int,
    total: int,
    title: str,
    card: str,
    said: str,
    measured: str,
    hint: str,
) -> str:
    """The step played: its number, title, sentences, statement, when and where its figures
    were measured, and what Step does next."""
    return _html(
        "panel", lesson_id, number, total, title, Markup(card), Markup(said), measured, hint
    )


def measured_html(text: str) -> str:
    """A speed figure's "measured <when> on <machine>" line."""
    return _html("measured", text)


def lesson_link_html(url: str, lesson_id: str) -> str:
    """The link to a recorded lesson: its address shown, a relative ``?lesson=ID`` followed."""
    return _html("lesson_link", url, lesson_id)


def class_html(
    tally: Tally, revealed: bool, keep: float | None, verdict: str | None, note: str = ""
) -> str:
    """The class's answers on the draft in play (specviz.classpool.Tally): before the draw
    how many answered, after it how they called it against the true keep probability a(x),
    and once shown the verdict (plain text)."""
    share = tally.kept_share
    mean = tally.mean_number
    return _html(
        "class_answers",
        tally.answers,
        revealed,
        tally.kept,
        tally.rejected,
        f"{share:.0%}" if share is not None else "",
        f"{(share or 0.0) * 100:.1f}",
        f"{mean:.2f}" if mean is not None else "",
        tally.numbers,
        f"{keep:.3f}" if keep is not None else "?",
        f"{(keep or 0.0) * 100:.1f}",
        verdict or "",
        note,
    )
