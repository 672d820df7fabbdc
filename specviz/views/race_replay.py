"""The race replay: a compared run's speculative and autoregressive texts filling side by
side on one clock, from their measured timelines.

Each trace's ``timeline`` holds [seconds since its start, tokens so far] after every round
(spec) or token (ar); both clocks start at their own run's start. At replay time t and
speed s (1x real time, 0.25x slower, 2x faster), a side shows the tokens it had at measured
time t * s. Nothing is re-run: this is a replay of measured timings, and says so.

``replay_animation_html(spec, ar, speed)`` is one page update whose tokens appear by CSS
animation delays, so a long run replays without further updates. The HTML comes from
templates/race_replay.html.j2, which escapes every token text. No gradio.
"""

from __future__ import annotations

import math

from markupsafe import Markup

from specviz.trace import Trace
from specviz.views.templating import macro

SPEEDS = (0.25, 1.0, 2.0)
MAX_SPEED = 100.0
SIDES = ("speculative", "autoregressive")


def check_pair(spec: Trace, ar: Trace) -> None:
    """Raise ValueError unless spec is speculative and ar autoregressive, both with texts."""
    if spec.method != "spec" or ar.method != "ar":
        raise ValueError("a race replay needs a speculative and an autoregressive trace")
    for t in (spec, ar):
        if len(t.token_texts) != len(t.token_ids):
            raise ValueError(f"the {t.method} trace has no text for some of its tokens")


def check_speed(speed: float) -> float:
    ok = isinstance(speed, (int, float)) and not isinstance(speed, bool) and math.isfinite(speed)
    if not ok or not 0 < speed <= MAX_SPEED:
        raise ValueError(f"replay speed must be in (0, {MAX_SPEED:g}], got {speed!r}")
    return float(speed)


def token_times(timeline: list[list[float]]) -> list[float]:
    """The measured time at which each token appeared: [tokens]."""
    times: list[float] = []
    for t_s, n in timeline:
        times.extend([t_s] * (int(n) - len(times)))
    return times


def _note(speed: float) -> str:
    return (
        f"Replay of measured timings at {speed:g}x: each side fills as its run produced "
        "tokens, on one clock from the start of each run. Nothing is re-run."
    )


def _side(
    trace: Trace, label: str, shown: int, head_time: str, tokens: list[tuple[str, str]]
) -> Markup:
    """One text's column: tokens are (text, animation delay in seconds)."""
    head = f"{label} · {shown}/{len(trace.token_ids)} tokens · {head_time}"
    return macro("race_replay.html.j2", "side")(trace.method, shown, head, tokens)


def replay_animation_html(spec: Trace, ar: Trace, speed: float = 1.0, nonce: int = 0) -> str:
    """The whole replay in one update: each token appears after its replay delay, by the
    sv-race-tok animation of assets/specviz.css (without that stylesheet every token shows
    at once). A new nonce makes a new page value, which restarts the replay."""
    check_pair(spec, ar)
    speed = check_speed(speed)
    sides = []
    for label, trace in zip(SIDES, (spec, ar), strict=True):
        times = token_times(trace.timeline)
        tokens = [
            (text, f"{ts / speed:.3f}") for text, ts in zip(trace.token_texts, times, strict=False)
        ]
        end = trace.timeline[-1][0] if trace.timeline else 0.0
        sides.append(_side(trace, label, len(times), f"measured {end:.2f} s", tokens))
    race = macro("race_replay.html.j2", "race")
    return str(race(f"{speed:g}", int(nonce), _note(speed), sides))
