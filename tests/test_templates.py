"""The views' templates (specviz/views/templates): each one parses, values are escaped on
their way into the page (quotes, ampersands and client-side template syntax too), HTML a
template made goes into another as it is, and a hostile token text comes out escaped in
every view built from them. No models, no gradio."""

from __future__ import annotations

import html

import jinja2
import pytest
from markupsafe import Markup

from specviz.trace import Added, Drafted, Round, Trace, decision_at
from specviz.views import markup, templating

HOSTILE = "<script>alert(1)</script>\"'&${x}{{y}}`"
ESCAPED = templating.esc(HOSTILE)
RAW = ("<script", "</script>", "\"'", "${", "{{", "`")


def assert_escaped(out: str, text: str = HOSTILE) -> None:
    """text appears escaped in out (at least once), and none of its raw markup does."""
    assert templating.esc(text) in out, out
    for raw in RAW:
        assert raw not in out, (raw, out)


def test_every_template_parses() -> None:
    env = templating.environment()
    names = templating.template_names()
    assert "markup.html.j2" in names
    for name in names:
        source = env.loader.get_source(env, name)[0]
        env.parse(source)  # a syntax error raises
        template = env.get_template(name)  # compiles
        if "{% macro" in source:  # a file of macros defines them all when loaded
            assert template.module is not None


def test_the_environment_escapes_and_refuses_undefined_values() -> None:
    env = templating.environment()
    assert env.autoescape is True and env.undefined is jinja2.StrictUndefined
    tpl = env.from_string("<b title='{{ v }}'>{{ v }}</b>{{ safe }}")
    out = tpl.render(v=HOSTILE, safe=Markup("<i>kept</i>"))
    assert out == f"<b title='{ESCAPED}'>{ESCAPED}</b><i>kept</i>"
    assert html.unescape(ESCAPED) == HOSTILE
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ missing }}").render()


def test_line_breaks_in_a_template_are_layout_only() -> None:
    env = templating.environment()
    out = env.from_string("<div>\n  <span>{{ v }}</span>\n  {% if v %} <b>x</b>{% endif %}\n</div>")
    assert out.render(v="a\nb") == "<div><span>a\nb</span> <b>x</b></div>"


def hostile_trace() -> Trace:
    def d(text: str, status: str, u: float | None) -> Drafted:
        top = [{"id": 1, "text": text, "p": 0.4, "q": 0.5}]
        return Drafted(1, text, 0.4, 0.5, 0.8, u, status, 0.7, top)

    rnd = Round(
        0,
        0,
        3,
        [d(HOSTILE, "accepted", 0.2), d(HOSTILE, "rejected", 0.9), d(HOSTILE, "discarded", None)],
        Added(2, HOSTILE, "resampled", 0.3, 0.6, [{"id": 2, "text": HOSTILE, "residual": 0.6}]),
        1.0,
        2.0,
        0.01,
        stop="confidence",
    )
    return Trace(
        "spec",
        HOSTILE,
        [1],
        {"gamma": 3},
        {"target": HOSTILE, "draft": HOSTILE},
        rounds=[rnd],
        token_ids=[1, 2],
        token_texts=[HOSTILE, HOSTILE],
        timeline=[[0.01, 2.0]],
    )


def test_markup_views_escape_a_hostile_token_text() -> None:
    t = hostile_trace()
    rnd = t.rounds[0]
    assert_escaped(markup.token_span(HOSTILE, "accepted", 0, 0, 0.5))
    assert_escaped(markup.trace_tokens_html(t))
    assert_escaped(markup.trace_tokens_html(t, shade_overlap=True))
    ar = Trace("ar", HOSTILE, [1], {}, {}, token_ids=[2], token_texts=[HOSTILE])
    assert_escaped(markup.trace_tokens_html(ar))
    assert_escaped(markup.tokens_html([], prompt=HOSTILE))
    assert_escaped(markup.round_row(rnd))
    assert_escaped(markup.rounds_html([markup.round_row(rnd)]))
    assert_escaped(markup.verdict_html(decision_at(t, 0, 1)), repr(HOSTILE))
    assert_escaped(markup.status_html(HOSTILE, HOSTILE))
    assert_escaped(markup.models_html(t.models))
    assert_escaped(markup.table_html([(HOSTILE, HOSTILE)], HOSTILE))
    assert_escaped(markup.status_word("bonus", HOSTILE))
    for view in (
        markup.legend_html(),
        markup.overlap_legend_html(),
        markup.exact_note_html(t.settings),
    ):
        assert all(raw not in view for raw in RAW)


def test_html_from_a_template_nests_as_it_is() -> None:
    row = markup.round_row(hostile_trace().rounds[0])
    table = markup.rounds_html([row])
    assert row in table and table.count("<tr>") == 2
    spans = markup.round_spans(hostile_trace().rounds[0])
    assert spans in markup.tokens_html([spans])
    said = "<p>a <code>b</code></p>"
    assert markup.lesson_said_html(said) == f'<div class="sv-lesson-said">{said}</div>'
    assert markup.lesson_said_html(None) == ""
    assert markup.lesson_card_html(said) == f'<div class="sv-lesson-card">{said}</div>'
    assert type(markup.status_html("x")) is str  # callers concatenate it as text


def hostile_tree_round() -> Round:
    """Tree 2,1: the first root child rejected, the second accepted (2nd try), its child
    rejected, then a token resampled; every text hostile."""
    from specviz.trace import Node

    nodes = [
        Node(5, HOSTILE, -1, 1, 0.6, 0.7, "rejected", 0, 0.7, 0.4, 0.9),
        Node(6, HOSTILE, -1, 1, 0.4, 0.5, "accepted", 1, 0.5, 1.0, 0.2),
        Node(7, HOSTILE, 1, 2, 0.5, 0.9, "rejected", 0, 0.9, 0.3, 0.8),
    ]
    drafted = [
        Drafted(6, HOSTILE, 0.4, 0.5, 1.0, 0.2, "accepted", 0.6, []),
        Drafted(7, HOSTILE, 0.5, 0.9, 0.3, 0.8, "rejected", 0.6, []),
    ]
    added = Added(12, HOSTILE, "resampled", 0.3, 0.5, [])
    return Round(0, 0, 2, drafted, added, 1.0, 2.0, 0.05, [2, 1], nodes)


def test_tree_views_escape_a_hostile_token_text() -> None:
    from specviz.views import tree_view

    rnd = hostile_tree_round()
    svg = tree_view.tree_svg(rnd)
    assert svg.count("<g ") == 5 and svg.count("<path ") == 4  # root, 3 nodes, the added one
    for text in ("<title>", 'data-node="2"', 'data-pos="1"', "2nd try", "↻ resampled"):
        assert text in svg
    # the box shows the text cut to its width, the tooltip its repr
    assert_escaped(svg, tree_view._short(HOSTILE))
    assert_escaped(svg, repr(HOSTILE))
    assert_escaped(tree_view.tree_html(rnd), repr(HOSTILE))
    assert_escaped(tree_view.node_verdict_html(rnd, rnd.nodes[2]), repr(HOSTILE))
    assert tree_view.tree_html(None) == (
        f'<div class="sv-tree sv-tree-empty">{templating.esc(tree_view.NO_TREE)}</div>'
    )


def test_narration_and_race_replay_escape_a_hostile_token_text() -> None:
    from specviz.views import narration, race_replay

    t = hostile_trace()
    said = narration.narration_html(t.rounds[0], t.settings)
    assert said.startswith('<div class="sv-narration"><b>Round 1</b><ol><li>')
    assert_escaped(said, repr(HOSTILE))
    assert_escaped(narration.narration_html(hostile_tree_round()), repr(HOSTILE))
    ar = Trace(
        "ar", HOSTILE, [1], {}, {}, token_ids=[2], token_texts=[HOSTILE], timeline=[[0.02, 1.0]]
    )
    race = race_replay.replay_animation_html(t, ar, 0.25, nonce=7)
    assert race.count('class="sv-race-tok"') == 3 and 'data-replay="7"' in race
    assert 'style="animation-delay: 0.040s"' in race  # 0.01 s measured, at 0.25x
    assert_escaped(race)


def test_the_verifier_board_escapes_a_hostile_token_text() -> None:
    from specviz.views import verifier_game as vg

    game = vg.deal(hostile_trace())
    boards = [vg.board_html(game)]
    for move in (lambda g: g.say(0.5), vg.Game.advance, vg.Game.advance, lambda g: g.call(False)):
        game = move(game)
        boards.append(vg.board_html(game))
    while game.phase != "done":
        game = game.advance()
    boards.append(vg.board_html(game))
    assert [b.split('data-phase="')[1].split('"')[0] for b in boards] == [
        "guess",
        "drawn",
        "verdict",
        "guess",
        "drawn",
        "done",
    ]
    for board in boards:
        assert_escaped(board)
    assert 'data-points="' in boards[-1] and "sv-play-final" in boards[-1]
    assert_escaped(vg.score_table(game))
    assert vg.lesson_line(game).startswith("<p>Round 1 of your run")
    assert "<script" not in vg.board_html(None)


def test_the_tabs_progress_text_and_tables_escape() -> None:
    assert markup.progress_html(3, 10) == (
        '<progress value="3" max="10" style="width: 100%"></progress>'
    )
    assert markup.pre_html(HOSTILE, "sv-check") == f"<pre class='sv-check'>{ESCAPED}</pre>"
    grid = markup.grid_html(["gamma", HOSTILE], [[HOSTILE, "1"]], "sv-table", HOSTILE)
    assert grid.startswith("<table class='sv-table'><thead><tr><th>gamma</th>")
    assert grid.count(ESCAPED) == 3 and grid.endswith(f"</tbody></table><p>{ESCAPED}</p>")
    assert_escaped(grid)


def test_the_bench_page_escapes_its_table_and_keeps_its_figures() -> None:
    page = templating.render("bench_report.html.j2", table=HOSTILE, figures=Markup("<div>f</div>"))
    assert page == (
        "<!doctype html><meta charset='utf-8'><title>specviz bench</title>"
        f"<pre>{ESCAPED}</pre><div>f</div>"
    )
