"""Play the verifier, a mode of the Decision tab: the visitor decides each draft of a stored
round of their own run before the draw and the verdict are revealed (the game itself, its
score and its board are specviz.views.verifier_game).

The tab's mode switch shows either the decision inspector (inspector_tab's components, laid
out here inside a column of their own) or the game. The game is a per-visitor gr.State
("play_state", one of the page's views, so that the lesson can deal a round too). Keys,
while the board is on screen and no field has focus: K likely kept, R likely rejected, N
next (the draw, the verdict, the next draft, the next round); they press the buttons, in the
presentation mode as in the normal one. Reads stored traces only: no model call, except the
lesson's run when the session has nothing to play.

On a link (a shared run, a recorded lesson) the class plays together: each visitor's call or
number on a draft is pooled on the server, anonymously, per link (specviz.classpool, bounded),
and under the board every player sees how many answered, and once the draw is revealed how
the class called it against the true a(x) and the verdict; "Show the class's answers"
redraws that line as answers come in (the lecturer's screen).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from specviz.classpool import ClassPool, run_key
from specviz.trace import round_number
from specviz.ui.assets import script
from specviz.ui.page import INTERNAL, Page
from specviz.ui.present import FIELDS
from specviz.ui.state import Changes, Session
from specviz.views import recorded
from specviz.views.verifier_game import KEYS, Game, board_html, deal

INSPECT, PLAY = "Inspect a decision", "Play the verifier"
NEXT_LABELS = {
    "guess": "Next (N)",
    "drawn": "Show the verdict (N)",
    "verdict": "Next draft (N)",
    "last": "Finish the round (N)",
    "done": "Next round (N)",
}
BUTTONS = {"kept": "sv-play-kept", "rejected": "sv-play-rejected", "next": "sv-play-next"}
# The phases in which the token view is veiled (its colours would give the verdicts away),
# and the class that veils it (assets/specviz.css). The server sets the class on the token
# row as the mode and the game change: a stylesheet rule that found the phase itself (a
# `:has()` on the page) made the browser restyle the whole page on every update.
VEILED = ("guess", "drawn", "verdict")
VEIL_CLASS = "sv-veiled"
POOL = ClassPool()  # the class's answers, per link (anonymous, bounded, in memory)


def keys_js() -> str:
    """The board's js_on_load (assets/play-keys.js): the keys press the game's buttons while
    its board is on screen and no field has focus."""
    keys = {KEYS[k].lower(): button for k, button in BUTTONS.items()}
    return script("play-keys", KEYS=keys, FIELDS=FIELDS)


def layout(views: dict[str, Any], inspector: Callable[[dict[str, Any]], None]) -> None:
    """The Decision tab: the mode switch, the inspector (laid out by `inspector`) and the
    game, into the views by name."""
    views["play_mode"] = gr.Radio(
        [INSPECT, PLAY], value=INSPECT, show_label=False, elem_id="sv-play-mode"
    )
    with gr.Column(elem_id="sv-insp-view") as insp_view:
        inspector(views)
    views["insp_view"] = insp_view
    with gr.Column(visible=False, elem_id="sv-play-view") as play_view:
        views["play_state"] = gr.State(None, time_to_live=3600)
        with gr.Row(elem_id="sv-play-moves", equal_height=True):
            views["play_round"] = gr.Number(
                None,
                precision=0,
                minimum=0,
                label="round (0: first rejection)",
                scale=0,
                min_width=215,
                elem_id="sv-play-round",
            )
            views["play_deal"] = gr.Button("Deal", min_width=90, elem_id="sv-play-deal")
            views["play_guess"] = gr.Number(
                None,
                minimum=0,
                maximum=1,
                step=0.05,
                label="your a(x), 0 to 1",
                scale=0,
                min_width=150,
                elem_id="sv-play-guess",
            )
            views["play_say"] = gr.Button(
                "Say a(x)", interactive=False, min_width=100, elem_id="sv-play-say"
            )
            views["play_kept"] = gr.Button(
                f"Likely kept ({KEYS['kept']})",
                interactive=False,
                min_width=130,
                elem_id=BUTTONS["kept"],
            )
            views["play_rejected"] = gr.Button(
                f"Likely rejected ({KEYS['rejected']})",
                interactive=False,
                min_width=175,
                elem_id=BUTTONS["rejected"],
            )
            views["play_next"] = gr.Button(
                NEXT_LABELS["guess"],
                variant="primary",
                interactive=False,
                min_width=170,
                elem_id=BUTTONS["next"],
            )
        views["play_board"] = gr.HTML(
            board_html(None), js_on_load=keys_js(), elem_id="sv-play-board"
        )
        with gr.Row(elem_id="sv-play-class-row"):
            views["play_class"] = gr.HTML("", js_on_load=None, elem_id="sv-play-class")
            views["play_class_show"] = gr.Button(
                "Show the class's answers",
                size="sm",
                scale=0,
                min_width=200,
                visible=False,
                elem_id="sv-play-class-show",
            )
    views["play_view"] = play_view


def mode_changes(mode: str, game: Game | None = None) -> Changes:
    """The inspector or the game, as the mode switch says (the token view veiled while the
    game on the board is deciding a draft)."""
    play = mode == PLAY
    return {
        "play_mode": PLAY if play else INSPECT,
        "insp_view": gr.Column(visible=not play),
        "play_view": gr.Column(visible=play),
        "token_row": veil(play and game is not None and game.phase in VEILED),
    }


def veil(on: bool) -> Any:
    """The token row's update: veiled or not."""
    return gr.Row(elem_classes=[VEIL_CLASS] if on else [])


def next_label(game: Game) -> str:
    """What Next does from here."""
    last = game.phase == "verdict" and game.at == len(game.drafts) - 1
    return NEXT_LABELS["last" if last else game.phase]


def game_changes(game: Game, clear: bool = False) -> Changes:
    """The board and the buttons for a game: predictions only before the reveal."""
    guessing = game.phase == "guess"
    out: Changes = {
        "play_state": game,
        "play_board": board_html(game),
        "play_say": gr.Button(interactive=guessing),
        "play_kept": gr.Button(interactive=guessing),
        "play_rejected": gr.Button(interactive=guessing),
        "play_next": gr.Button(value=next_label(game), interactive=True),
        "play_round": round_number(game.index),
        "token_row": veil(game.phase in VEILED),  # the board is on screen
    }
    if clear:
        out["play_guess"] = None
    return out


def deal_changes(session: Session, shown_round: Any) -> Changes:
    """A new game on a round of the session's run (empty or 0: the first with a
    rejection; an empty number box sends 0)."""
    n = None if shown_round is None or shown_round == 0 else int(shown_round)
    game = deal(session.spec, n)
    return {
        **game_changes(game, clear=True),
        **mode_changes(PLAY, game),
        **class_changes(game, session),
    }


def draft_key(game: Game) -> tuple[str, int, int]:
    """The draft in play among a link's: its run, its round, its place among the tested."""
    return run_key(game.trace.token_ids, game.trace.prompt), game.index, game.at


def class_changes(game: Game | None, session: Session | None, note: str = "") -> Changes:
    """The class's answers on the draft in play, on a link's page (elsewhere nothing)."""
    link = session.shared_id if session is not None else None
    if game is None or not link or not game.drafts:
        return {"play_class": "", "play_class_show": gr.Button(visible=False)}
    tally = POOL.tally(link, draft_key(game))
    revealed = game.phase != "guess"
    keep = game.keep(game.at) if revealed else None
    verdict = None
    if game.phase in ("verdict", "done"):
        kept = game.kept(game.at)
        verdict = f"The draw {'kept' if kept else 'rejected'} it."
    html = recorded.class_html(tally, revealed, keep, verdict, note)
    return {"play_class": html, "play_class_show": gr.Button(visible=True)}


def pooled(game: Game | None, session: Session | None, said: bool | float) -> str:
    """Pool the visitor's answer on the draft in play, on a link's page; a line when the
    link's pool is full ("" otherwise)."""
    link = session.shared_id if session is not None else None
    if game is None or not link or game.phase != "guess" or not game.drafts:
        return ""
    try:
        POOL.answer(link, draft_key(game), session.voter, said)
    except ValueError as exc:
        return str(exc).splitlines()[0]
    return ""


def _game(game: Game | None) -> Game:
    if game is None:
        raise ValueError("deal a round first: press Deal")
    return game


def say_changes(game: Game | None, value: Any, session: Session | None = None) -> Changes:
    """The visitor's number for a(x) (pooled on a link's page)."""
    after = _game(game).say(value)
    note = pooled(game, session, float(value)) if after.phase != game.phase else ""
    return {**game_changes(after), **class_changes(after, session, note)}


def call_changes(game: Game | None, kept: bool, session: Session | None = None) -> Changes:
    """The visitor's call: likely kept or likely rejected (pooled on a link's page)."""
    after = _game(game).call(kept)
    note = pooled(game, session, bool(kept)) if after.phase != game.phase else ""
    return {**game_changes(after), **class_changes(after, session, note)}


def next_changes(game: Game | None, session: Session | None = None) -> Changes:
    """Next: the draw's verdict, the next draft, or (once done) the next round."""
    before = _game(game)
    after = before.advance()
    moved = (after.index, after.at) != (before.index, before.at)
    return {**game_changes(after, clear=moved), **class_changes(after, session)}


def shown_class_changes(game: Game | None, session: Session) -> Changes:
    """The class's answers again, as they stand now (the lecturer's redraw)."""
    return class_changes(_game(game), session)


def wire(page: Page) -> None:
    """The mode switch, Deal, the predictions, Next (and Enter in the a(x) box)."""
    views = page.components
    game = views["play_state"]
    names = (
        "play_state",
        "play_board",
        "play_round",
        "play_guess",
        "play_say",
        "play_kept",
        "play_rejected",
        "play_next",
        "play_mode",
        "insp_view",
        "play_view",
        "play_class",
        "play_class_show",
        "token_row",
    )
    outputs = [views[k] for k in names]
    sess = page.session
    options = {**page.quiet, **INTERNAL}
    views["play_mode"].input(
        page.once(mode_changes),
        [views["play_mode"], game],
        [views["play_mode"], views["insp_view"], views["play_view"], views["token_row"]],
        **options,
    )
    views["play_deal"].click(
        page.once(deal_changes), [page.session, views["play_round"]], outputs, **options
    )
    for event in (views["play_say"].click, views["play_guess"].submit):
        event(page.once(say_changes), [game, views["play_guess"], sess], outputs, **options)
    for name, kept in (("play_kept", True), ("play_rejected", False)):
        views[name].click(
            page.once(lambda g, s, kept=kept: call_changes(g, kept, s)),
            [game, sess],
            outputs,
            **options,
        )
    views["play_next"].click(page.once(next_changes), [game, sess], outputs, **options)
    views["play_class_show"].click(page.once(shown_class_changes), [game, sess], outputs, **options)

    def clicked(evt: gr.EventData) -> dict[Any, Any]:  # gradio fills evt by this annotation
        return page.keyed(token_clicked(evt))

    for view in (views["tokens"], views["rounds"]):  # a click on a token opens the inspector
        view.click(clicked, None, outputs, **options)


def token_clicked(evt: gr.EventData) -> Changes:
    """A click on a token span (the token script sends its position) shows the inspector,
    which the inspector's own handler opens on that token."""
    data = getattr(evt, "_data", None) or {}
    return mode_changes(INSPECT) if "pos" in data else {}
