"""Token spans, escaping, verdicts and decision lookup in specviz.views.markup."""

from __future__ import annotations

import re

import pytest

from specviz.trace import Added, Drafted, Round, Trace, decision_at, round_of
from specviz.verify.exact_match import ExactMatch
from specviz.verify.rejection import Rejection
from specviz.views import markup

NASTY = "<img src=x onerror=alert(1)><script>alert(1)</script>${1+1}{{x}}`"


def drafted(text: str, status: str, p: float, q: float, u: float | None) -> Drafted:
    top = [{"id": 1, "text": text, "p": p, "q": q}, {"id": 2, "text": "b", "p": 0.1, "q": 0.2}]
    return Drafted(1, text, p, q, min(1.0, p / q), u, status, 0.5, top)


def sample_trace() -> Trace:
    r0 = Round(
        index=0,
        start=0,
        gamma=3,
        drafted=[
            drafted("Hi", "accepted", 0.5, 0.4, 0.3),
            drafted(NASTY, "rejected", 0.1, 0.5, 0.9),
            drafted("x", "discarded", 0.1, 0.2, None),
        ],
        added=Added(
            3,
            " there\n",
            "resampled",
            0.3,
            0.6,
            [{"id": 3, "text": " there\n", "p": 0.3, "residual": 0.6}],
        ),
        draft_ms=3.0,
        verify_ms=5.0,
        t_s=0.01,
    )
    r1 = Round(
        1,
        2,
        1,
        [drafted("ok", "accepted", 0.3, 0.6, 0.1)],
        Added(4, "!", "bonus", 0.7, 0.7, [{"id": 4, "text": "!", "p": 0.7, "residual": 0.7}]),
        1.0,
        2.0,
        0.02,
    )
    return Trace(
        "spec",
        NASTY,
        [1],
        {"gamma": 3},
        {"target": NASTY},
        rounds=[r0, r1],
        token_ids=[1, 3, 1, 4],
        timeline=[[0.01, 2.0], [0.02, 4.0]],
    )


def test_every_text_is_escaped() -> None:
    html = markup.trace_tokens_html(sample_trace())
    assert "<img" not in html and "<script" not in html
    assert "&lt;img" in html and "&lt;script&gt;" in html
    assert "${" not in html and "{{" not in html and "`" not in html
    assert "<" not in markup.esc(NASTY) and '"' not in markup.esc('"')


def test_spans_carry_status_round_and_position() -> None:
    html = markup.trace_tokens_html(sample_trace())
    spans = re.findall(r'data-status="(\w+)" data-round="(\d+)" data-pos="(\d+)"', html)
    assert spans == [
        ("accepted", "0", "0"),
        ("rejected", "0", "1"),  # stays visible, at the position it was proposed for
        ("resampled", "0", "1"),
        ("accepted", "1", "2"),
        ("bonus", "1", "3"),
    ]
    assert "discarded" not in html  # never verified, never shown in the token view


def test_whitespace_is_visible() -> None:
    out = markup.visible_text(" a\tb\n")
    assert out.count("sv-ws") == 3 and "↵" in out and "→" in out and "·" in out
    assert "sv-ws" in markup.visible_text("")


def test_round_rows_show_discarded_drafts_and_the_added_token() -> None:
    row = markup.round_row(sample_trace().rounds[0])
    assert "sv-discarded" in row and "resampled" in row and "1/3" in row
    assert "<script" not in row


def test_verdicts_are_plain_sentences() -> None:
    t = sample_trace()
    acc = Rejection().keep_text(drafted("a", "accepted", 0.3, 0.4, 0.31))
    assert acc == "accepted: u = 0.31 < p/q = 0.75 (p = 0.300, q = 0.400)"
    assert "≥ 1" in Rejection().keep_text(t.rounds[0].drafted[0])
    rej = Rejection().keep_text(t.rounds[0].drafted[1])
    assert rej.startswith("rejected: u = 0.90 ≥ p/q = 0.20")
    assert "greedy" in Rejection().keep_text(drafted("a", "accepted", 1.0, 1.0, None))
    assert Rejection().replace_text(t.rounds[0].added).startswith("resampled:")
    assert Rejection().replace_text(t.rounds[1].added).startswith("bonus:")
    # close numbers get enough digits to tell them apart
    assert (
        Rejection()
        .keep_text(drafted("a", "accepted", 0.7445, 1.0, 0.7441))
        .startswith("accepted: u = 0.744 < p/q = 0.745")
    )


def match_trace() -> Trace:
    """A round verified by exact match: 'Hi' matched the target's sample, 'blue' did not
    (the target sampled NASTY, which the round kept), 'x' was discarded."""

    def d(i: int, text: str, status: str, p: float, sample: int | None, sample_text: str | None):
        top = [{"id": i, "text": text, "p": p, "q": 0.4}]
        return Drafted(i, text, p, 0.4, p, None, status, 0.5, top, 0.3, sample, sample_text)

    rnd = Round(
        0,
        0,
        3,
        [
            d(1, "Hi", "accepted", 0.5, 1, "Hi"),
            d(2, "blue", "rejected", 0.1, 9, NASTY),
            d(3, "x", "discarded", 0.2, None, None),
        ],
        Added(
            9, NASTY, "resampled", 0.3, 0.3, [{"id": 9, "text": NASTY, "p": 0.3, "residual": 0.3}]
        ),
        3.0,
        5.0,
        0.01,
    )
    settings = {"gamma": 3, "verification": "exact-match"}
    return Trace("spec", "p", [1], settings, {}, rounds=[rnd], token_ids=[1, 9])


def test_exact_match_verdicts_are_one_escaped_sentence() -> None:
    t = match_trace()
    assert t.rounds[0].exact_match and not sample_trace().rounds[0].exact_match
    assert ExactMatch().keep_text(t.rounds[0].drafted[0]) == (
        "exact match: the target sampled 'Hi'; the draft proposed 'Hi': accepted "
        "(the target samples this draft with probability p = 0.50)"
    )
    rejected = markup.match_verdict(t.rounds[0].drafted[1])
    assert rejected.startswith(f"exact match: the target sampled {NASTY!r}; the draft proposed")
    assert rejected.endswith("'blue': rejected")
    html = markup.verdict_html(decision_at(t, 0, 1))
    assert "exact match: the target sampled" in html
    assert "the draft proposed &#x27;blue&#x27;" in html
    assert "keeps the target&#x27;s own sample" in html and "residual" not in html
    assert "<script" not in html and "<img" not in html and "${" not in html and "{{" not in html


def test_decision_lookup() -> None:
    t = sample_trace()
    d = decision_at(t, 0, 1)
    assert d.drafted is not None and d.drafted.status == "rejected" and d.added is not None
    assert decision_at(t, None, 3).added.status == "bonus"
    assert round_of(t, 2) == 1
    with pytest.raises(ValueError):
        decision_at(t, 5, 0)
    with pytest.raises(ValueError):
        decision_at(t, 0, 3)
    html = markup.verdict_html(d)
    assert "<script" not in html and "resampled" in html


def test_greedy_check() -> None:
    a = sample_trace()
    b = Trace("ar", "p", [1], {}, {}, token_ids=list(a.token_ids))
    assert markup.greedy_check(a, b).startswith("identical")
    b.token_ids[2] = 7
    msg = markup.greedy_check(a, b, decode=lambda ids: " ".join(map(str, ids)))
    assert msg.startswith("different from token 2") and "'1 4'" in msg


def test_panels_escape() -> None:
    assert "<script" not in markup.models_html({"target": NASTY})
    assert "<script" not in markup.table_html([(NASTY, NASTY)], NASTY)
    assert "<script" not in markup.status_html(NASTY)
    assert "--sv-accepted" in markup.css_variables()
    legend = markup.legend_html()
    assert all(s in legend for s in markup.TOKEN_STATUSES)


def test_rounds_are_numbered_from_one_wherever_a_person_reads_one() -> None:
    from specviz import metrics
    from specviz.views import figures, narration

    t = sample_trace()
    rows = "".join(markup.round_row(r) for r in t.rounds)
    assert re.findall(r'<td class="sv-rn">(\d+)</td>', rows) == ["1", "2"]
    spans = markup.trace_tokens_html(t)
    assert 'data-round="0"' in spans and "round 1 · position 0" in spans  # index stays 0-based
    assert "round 1, position 1" in markup.verdict_html(decision_at(t, 0, 1))
    assert "<b>Round 2</b>" in narration.narration_html(t.rounds[1])
    assert list(metrics.rounds_frame(t)["round"].unique()) == [1, 2]  # the CSV's round column
    assert figures.decision_figure(decision_at(t, 1, 3)).layout.title.text.startswith("round 2,")
    assert list(figures.acceptance_per_round_figure(t).data[0].x) == [1, 2]
    assert t.to_dict()["rounds"][0]["index"] == 0  # the JSON keeps its 0-based index
