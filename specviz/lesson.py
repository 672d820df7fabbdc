"""The guided lesson: seven steps, each a few sentences and one button that sets the controls
and does the step's action on the current pair (a Run, opening a stored rejection, a sweep,
two distribution checks, a round the visitor plays), and after it a statement computed
from that action's own numbers (specviz.lesson_statements).

Pure: no gradio, no torch. The steps are data: each names the controls it sets by the
app's Form field names (specviz.ui.state.Form) and carries its action, which
specviz.ui.lesson_panel carries out with the page's own handlers; its HTML comes from
specviz.views.markup.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specviz.config import DEFAULT_GAMMAS, form_defaults, offered
from specviz.lesson_statements import (  # noqa: F401 - the lesson's public face
    RESIDUAL_SHARE,
    RESIDUAL_TOKENS,
    STATUSES,
    RunNumbers,
    check_statement,
    drew,
    first_rejection,
    greedy_statement,
    no_draw_sentence,
    rejection_statement,
    residual_tokens,
    run_key,
    status_counts,
    sweep_statement,
    teaching_rejection,
    temperature_statement,
    untouched_statement,
    which_moved,
)
from specviz.trace import Trace
from specviz.views.markup import status_word

# The controls an untouched page starts from (the CLI's defaults), as Form fields; every
# step starts from these, so that a step's run does not depend on what was touched before.
# Derived from config.Settings: each setting the app offers, and the baseline on.
BASE: dict[str, Any] = {**form_defaults(), "compare": True}
HOT_DRAFT = 1.5  # step 2's draft temperature
SWEEP_GAMMAS = DEFAULT_GAMMAS
SWEEP_TOKENS = 16  # tokens per sweep run: the sweep stays short
SWEEP_REPS = 2  # interleaved, about the time one sequential repetition took (docs/app.md)
# The distribution check of step 6: the fewest samples the check accepts, one token per
# continuation (one comparison, so no Bonferroni split), and a draft sharper than the target, so
# that its rejections fall on tokens p makes likely: resampling from p then puts mass back
# where the residual has none, which moves the first token's distribution further than a
# hotter draft (as in step 2) does, and so within reach of few samples. How far it moves it
# on the pair in use is what the check itself predicts (CheckResult.predicted_tv).
CHECK_N = 200
CHECK_LENGTH = 1
CHECK_TEMPERATURE = 1.0
CHECK_DRAFT_TEMPERATURE = 0.7
WRONG_RULE = "resample-from-p"
RIGHT_RULE = "rejection"  # the papers' rule (Algorithm 1), under rejection verification

Decode = Callable[[list[int]], str]
# Steps 3 and 7 run again, each time with the next seed, while a run has no example to show:
# at most this many runs in all. On the offline pair step 3's runs (step 2's controls with
# top-p 1) had a rejection the draw decided in 8 seeds of 8 (docs/app.md).
TRIES = 4
# Step 3 reruns with the target's whole distribution: under top-p's cut nearly every
# rejection is of a token with p = 0, which no draw could have kept (2 seeds of 8 had one
# the draw decided at step 2's controls, docs/app.md).
FULL_TOP_P = 1.0


# --- the controls a step leaves behind -----------------------------------------------------


def _shown(value: Any) -> str:
    """A control's value in words: on/off for a box, a number as it is read."""
    if value is None or isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if value != "" else "empty"


def _same(a: Any, b: Any) -> bool:
    """Equal as the widgets deliver them (a number box gives 4.0 for 4)."""
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool):
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))
    return a == b


def changed_controls(values: Mapping[str, Any], base: Mapping[str, Any] = BASE) -> list[str]:
    """The controls among base's whose value in `values` differs from base, each as "name
    value (default value)"; an optional number counts as off while its switch is off."""
    out = []
    for s in offered("app"):
        switch = s.meta.switch.name if s.meta.switch is not None else None
        if s.name not in base or s.name not in values:
            continue
        now, was = values[s.name], base[s.name]
        if switch is not None:
            now = now if values.get(switch) else None
            was = was if base[switch] else None
        if not _same(now, was):
            out.append(f"{s.words} {_shown(now)} (default {_shown(was)})")
    if "compare" in values and not _same(values["compare"], base["compare"]):
        out.append(f"compare {_shown(values['compare'])} (default {_shown(base['compare'])})")
    return out


# --- the lesson's own state, per visitor ---------------------------------------------------


@dataclass
class Lesson:
    """Where a visitor is in the lesson, what each step said, and step 1's figures."""

    index: int = 0
    said: dict[int, str] = field(default_factory=dict)
    first: RunNumbers | None = None
    set_controls: bool = False  # a step set the controls, and they were not restored since

    def move(self, by: int) -> None:
        self.index = max(0, min(len(STEPS) - 1, self.index + by))

    @property
    def step(self) -> Step:
        return STEPS[self.index]


# --- what a step does ----------------------------------------------------------------------

# What a Run step states: from the lesson (which it may update), the run's traces and the
# pair's decoder.
RunStatement = Callable[[Lesson, Trace | None, Trace | None, Decode | None], str]


@dataclass(frozen=True)
class RunAction:
    """Press Run with the step's controls, then state the run."""

    statement: RunStatement


@dataclass(frozen=True)
class RejectionAction:
    """Open the stored run's first rejection in the Decision tab and state it (no model
    call); without a rejection stored, Run with the step's controls first."""


@dataclass(frozen=True)
class SweepAction:
    """The measured sweep at these gammas and repetitions (tokens: the step's max new
    tokens), then state what it measured."""

    gammas: tuple[int, ...]
    reps: int


@dataclass(frozen=True)
class CheckAction:
    """Two distribution checks of n continuations of `length` tokens: the wrong rule, then
    the right rule with the controls in `right` set; then state both."""

    n: int
    length: int
    wrong_rule: str
    right_rule: str
    right: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PlayAction:
    """Deal a round of the stored run in the Decision tab for the visitor to play the
    verifier on (no model call); without a round to play, Run with the step's controls
    first."""


Action = RunAction | RejectionAction | SweepAction | CheckAction | PlayAction


def _untouched(lesson: Lesson, spec: Trace | None, ar: Trace | None, _: Decode | None) -> str:
    """Step 1: its run's figures, kept for step 2 to compare against."""
    lesson.first = RunNumbers.of(spec, ar) if spec is not None and spec.rounds else None
    return untouched_statement(spec, ar)


def _hotter(lesson: Lesson, spec: Trace | None, ar: Trace | None, _: Decode | None) -> str:
    return temperature_statement(spec, ar, lesson.first)


def _greedy(_: Lesson, spec: Trace | None, ar: Trace | None, decode: Decode | None) -> str:
    return greedy_statement(spec, ar, decode)


@dataclass(frozen=True)
class Step:
    """One step of the lesson: a title, a few sentences, its button, its action, the
    controls it sets (Form fields over BASE) and the tab it brings to the front (None:
    none)."""

    title: str
    text: str  # HTML, written here (no outside text); its markup from views.markup
    button: str
    action: Action
    controls: dict[str, Any] = field(default_factory=dict)
    tab: str | None = None

    def form_values(self) -> dict[str, Any]:
        """Every control this step sets: BASE with the step's own changes."""
        return {**BASE, **self.controls}


STEPS: tuple[Step, ...] = (
    Step(
        "An untouched Run",
        "Each round the draft proposes gamma tokens and <b>one</b> target call checks them "
        "all (the first round of the default pair is the target's alone: it reads the "
        "prompt, and the draft, the target's own weights at a lower precision, takes its "
        f"keys and values). Colours: {status_word('accepted')} drafts, "
        f"{status_word('rejected')} ones (struck through), the {status_word('resampled')} "
        "token that replaces a rejection, "
        f"the {status_word('bonus')} token a call adds when every draft passed. "
        "<i>Tokens per target call</i> is what one expensive call buys.",
        "Run the defaults (with the baseline)",
        RunAction(_untouched),
    ),
    Step(
        "A hotter draft",
        f"The draft samples at temperature {HOT_DRAFT:g} while the target keeps its own: q "
        "moves away from p, so more drafts are rejected and resampled. The rejection rule corrects "
        "any q: the text is still distributed as the target's.",
        f"Run with draft temperature {HOT_DRAFT:g}",
        RunAction(_hotter),
        {"own_draft_temperature": True, "draft_temperature": HOT_DRAFT},
    ),
    Step(
        "One rejection, up close",
        "The Decision tab opens on a rejection where the draw decided: p and q for that "
        "token, the draw u against a min(1, p/q) well inside 0 and 1, and the residual "
        f"norm(max(0, p − q)) its replacement was drawn from, with {RESIDUAL_TOKENS} tokens or "
        f"more above {100 * RESIDUAL_SHARE:g} % (of such rejections, the one whose residual is "
        "spread most evenly). It "
        "reads the stored run; without such a rejection it runs with step 2's controls and "
        f"top-p {FULL_TOP_P:g}, a new seed each time (at most {TRIES} runs): where top-p "
        "cuts the target's tail, nearly every rejected draft has p = 0, and no draw could "
        "have kept it.",
        "Open the first rejection",
        RejectionAction(),
        {"own_draft_temperature": True, "draft_temperature": HOT_DRAFT, "top_p": FULL_TOP_P},
        tab="insp",
    ),
    Step(
        "Greedy: the same text",
        "With Greedy on, p and q are one-hot: a draft is accepted exactly when it is the "
        "target's own argmax, so speculative decoding gives the autoregressive text token "
        "for token wherever the verify call sums each row as a one-token call does (the "
        "packaged CPU path); elsewhere, float32 included, the two calls differ in the last "
        "bits and a near tie can part the texts.",
        "Run greedy (with the baseline)",
        RunAction(_greedy),
        {"greedy": True},
    ),
    Step(
        "How many drafts?",
        f"A short sweep measures gamma {', '.join(map(str, SWEEP_GAMMAS))} "
        f"({SWEEP_TOKENS} tokens, {SWEEP_REPS} repetition{'s' if SWEEP_REPS != 1 else ''}, "
        "each gamma's run interleaved with the baseline's so that all meet the same load) "
        "against Leviathan's formula and the refined prediction (Theory tab). Drafts pay "
        "only while they are accepted.",
        "Run the sweep",
        SweepAction(SWEEP_GAMMAS, SWEEP_REPS),
        {"max_new_tokens": SWEEP_TOKENS},
        tab="theory",
    ),
    Step(
        "Breaking the rule",
        f"The distribution check draws {CHECK_N} one-token continuations twice (target at "
        f"temperature {CHECK_TEMPERATURE:g}, a sharper draft at {CHECK_DRAFT_TEMPERATURE:g}): "
        "with a wrong rule (after a rejection, resample from p instead of the residual) and "
        "with the rejection rule itself (Algorithm 1: keep a draft when u < min(1, p/q), "
        "else draw from the residual norm(max(0, p − q))). Both keep the same drafts; only "
        "what replaces a rejection differs. It must catch the first and pass the second "
        "(about 20 s for both on two CPU cores with the offline pair).",
        "Run both checks",
        CheckAction(CHECK_N, CHECK_LENGTH, WRONG_RULE, RIGHT_RULE, {"verification": "rejection"}),
        {
            "temperature": CHECK_TEMPERATURE,
            "own_draft_temperature": True,
            "draft_temperature": CHECK_DRAFT_TEMPERATURE,
        },
        tab="exact",
    ),
    Step(
        "Play the verifier",
        "Now you decide. The Decision tab deals a round of your own run where a draw decided "
        "(a greedy run has none: the step runs a sampled one first): for each draft you "
        "see p(x) and q(x), and say how likely the verification keeps it (a number a(x), or K for "
        "likely kept, R for likely rejected). Your answer reveals the draw u and the true "
        "keep probability (min(1, p/q) under the rejection rule); N shows the verdict and "
        "what replaced a rejected draft, N again the next draft. The score counts your "
        "numbers within 0.1 of a(x) and your calls the verdict bears out.",
        "Deal a round of my run",
        PlayAction(),
        {"own_draft_temperature": True, "draft_temperature": HOT_DRAFT},
        tab="insp",
    ),
)
