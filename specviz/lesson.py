"""The guided lesson: seven steps, each a few sentences and one button that sets the controls
and runs on the current pair, and after each run a statement computed from that run's own
numbers (specviz.lesson_statements).

Pure: no gradio, no torch. The steps name the controls they set by the app's Form field
names (specviz.ui.state.Form); specviz.ui.lesson_tab lays the lesson out and runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specviz.config import Settings
from specviz.lesson_statements import (  # noqa: F401 - the lesson's public face
    STATUSES,
    RunNumbers,
    check_statement,
    first_rejection,
    greedy_statement,
    rejection_statement,
    run_key,
    status_counts,
    sweep_statement,
    temperature_statement,
    untouched_statement,
)

DEFAULTS = Settings()
# The controls an untouched page starts from (the CLI's defaults), as Form fields; every
# step starts from these, so that a step's run does not depend on what was touched before.
BASE: dict[str, Any] = {
    "drafter": DEFAULTS.drafter,
    "gamma": DEFAULTS.gamma,
    "adaptive_gamma": DEFAULTS.adaptive_gamma,
    "temperature": DEFAULTS.temperature,
    "own_draft_temperature": False,
    "draft_temperature": 1.5,
    "top_p": DEFAULTS.top_p,
    "top_k": DEFAULTS.top_k,
    "greedy": DEFAULTS.greedy,
    "verification": DEFAULTS.verification,
    "max_new_tokens": DEFAULTS.max_new_tokens,
    "seed": DEFAULTS.seed,
    "compare": True,
}
HOT_DRAFT = 1.5  # step 2's draft temperature
SWEEP_GAMMAS = (1, 2, 4, 8)
SWEEP_TOKENS = 16  # tokens per sweep run: the sweep stays short
SWEEP_REPS = 1
# The distribution check of step 6: the fewest samples the check accepts, one token per
# continuation (one view, so no Bonferroni split), and a draft sharper than the target, so
# that its rejections fall on tokens p makes likely: resampling from p then puts mass back
# where the residual has none. On the offline pair and the default prompt this moves the
# first token by TV 0.13 and the check catches it at N = 200 with power above 0.99
# (simulated from the exact p and q), while exact match accepts less (sum p q 0.67 against
# alpha 0.83). A hotter draft, as in step 2, moves it far less (TV 0.04 to 0.08).
CHECK_N = 200
CHECK_LENGTH = 1
CHECK_TEMPERATURE = 1.0
CHECK_DRAFT_TEMPERATURE = 0.7
WRONG_RULE = "resample-from-p"


@dataclass(frozen=True)
class Step:
    """One step of the lesson: a title, a few sentences, its button, the controls it sets
    (Form fields over BASE) and the tab it brings to the front (None: none)."""

    title: str
    text: str  # HTML, written here (no outside text)
    button: str
    controls: dict[str, Any] = field(default_factory=dict)
    tab: str | None = None

    def form_values(self) -> dict[str, Any]:
        """Every control this step sets: BASE with the step's own changes."""
        return {**BASE, **self.controls}


# The last step: the visitor plays the verifier on a round of their own run
# (specviz.ui.verifier_tab deals it; without a run to play, it runs with a hotter draft).
PLAY_STEP = Step(
    "Play the verifier",
    "Now you decide. The Decision tab deals a round of your own run: for each draft you see "
    "p(x) and q(x), and say how likely the rule keeps it (a number a(x), or K for likely "
    "kept, R for likely rejected). Your answer reveals the draw u and the true min(1, p/q); "
    "N shows the verdict and what replaced a rejected draft, N again the next draft. The "
    "score counts your numbers within 0.1 of a(x) and your calls the verdict bears out.",
    "Deal a round of my run",
    {"own_draft_temperature": True, "draft_temperature": HOT_DRAFT},
    tab="insp",
)

STEPS: tuple[Step, ...] = (
    Step(
        "An untouched Run",
        "Each round the draft proposes gamma tokens and <b>one</b> target call checks them "
        "all. Colours: <span class='sv-tok sv-accepted'>accepted</span> drafts, "
        "<span class='sv-tok sv-rejected'>rejected</span> ones (struck through), the "
        "<span class='sv-tok sv-resampled'>resampled</span> token that replaces a rejection, "
        "the <span class='sv-tok sv-bonus'>bonus</span> token a call adds when every draft "
        "passed. <i>Tokens per target call</i> is what one expensive call buys.",
        "Run the defaults (with the baseline)",
    ),
    Step(
        "A hotter draft",
        f"The draft samples at temperature {HOT_DRAFT:g} while the target keeps its own: q "
        "moves away from p, so more drafts are rejected and resampled. The rule corrects "
        "any q: the text is still distributed as the target's.",
        f"Run with draft temperature {HOT_DRAFT:g}",
        {"own_draft_temperature": True, "draft_temperature": HOT_DRAFT},
    ),
    Step(
        "One rejection, up close",
        "The Decision tab opens on the first rejected draft: p and q for that token, the "
        "draw u against min(1, p/q), and the residual norm(max(0, p − q)) its replacement "
        "was drawn from. It reads the stored run (without a rejection yet, step 2 runs "
        "first).",
        "Open the first rejection",
        {"own_draft_temperature": True, "draft_temperature": HOT_DRAFT},
        tab="insp",
    ),
    Step(
        "Greedy: the same text",
        "With Greedy on, p and q are one-hot: a draft is accepted exactly when it is the "
        "target's own argmax, so speculative decoding must give the autoregressive text "
        "token for token.",
        "Run greedy (with the baseline)",
        {"greedy": True},
    ),
    Step(
        "How many drafts?",
        f"A short sweep measures gamma {', '.join(map(str, SWEEP_GAMMAS))} "
        f"({SWEEP_TOKENS} tokens, {SWEEP_REPS} repetition) against Leviathan's formula and "
        "the refined prediction (Theory tab). Drafts pay only while they are accepted.",
        "Run the sweep",
        {"max_new_tokens": SWEEP_TOKENS},
        tab="theory",
    ),
    Step(
        "Breaking the rule",
        f"The distribution check draws {CHECK_N} one-token continuations twice (target at "
        f"temperature {CHECK_TEMPERATURE:g}, a sharper draft at {CHECK_DRAFT_TEMPERATURE:g}): "
        "with a wrong rule (after a rejection, resample from p instead of the residual) and "
        "with exact-match verification (keep a draft only if the target's own sample equals "
        "it). It must catch the first and pass the second (minutes on a CPU).",
        "Run both checks",
        {
            "temperature": CHECK_TEMPERATURE,
            "own_draft_temperature": True,
            "draft_temperature": CHECK_DRAFT_TEMPERATURE,
        },
        tab="exact",
    ),
    PLAY_STEP,
)


# --- the lesson's own state, per visitor ---------------------------------------------------


@dataclass
class Lesson:
    """Where a visitor is in the lesson, what each step said, and step 1's figures."""

    index: int = 0
    said: dict[int, str] = field(default_factory=dict)
    first: RunNumbers | None = None

    def move(self, by: int) -> None:
        self.index = max(0, min(len(STEPS) - 1, self.index + by))

    @property
    def step(self) -> Step:
        return STEPS[self.index]


def new_lesson() -> Lesson:
    return Lesson()
