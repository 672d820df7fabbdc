"""The report's prompts: the built-in set and JSON lines files, checked line by line.

A prompt file has one JSON object a line: ``prompt`` (a non-empty string), optional
``category`` (a string; kept as written, unknown ones included) and ``id`` (a string or an
integer). Blank lines are skipped; any other malformed line is refused with its line number
(ValueError, one line), and so is the whole file: nothing runs and nothing is written.

The built-in set was written for this project: six prompts in each of the six kinds of task
that Spec-Bench's table covers (multi-turn conversation, translation, summarisation,
question answering, mathematical reasoning, retrieval-augmented generation). The engine
takes one user message, so a multi-turn prompt carries its earlier turns as text inside
that message, and a retrieval-augmented one carries its retrieved passages.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BUILTIN = "builtin"
# The quick set: the first prompt of each category of the built-in set, each run for
# QUICK_TOKENS new tokens, so that a class sees every kind of task in minutes.
QUICK = "quick"
QUICK_TOKENS = 32
CATEGORIES = ("multi-turn", "translation", "summarisation", "qa", "math", "rag")
UNCATEGORISED = "uncategorised"  # the category of a line without one


@dataclass(frozen=True)
class PromptLimits:
    """What a prompt file may hold: lines (prompts) and characters per prompt."""

    max_prompts: int = 10_000
    max_chars: int = 50_000


CLI_LIMITS = PromptLimits()
APP_LIMITS = PromptLimits(max_prompts=200, max_chars=4_000)  # what the app accepts


@dataclass(frozen=True)
class Prompt:
    """One prompt of a set; index is its place in the whole set (shards keep it)."""

    index: int
    id: str
    category: str
    text: str
    line: int  # its line in the file (1-based); the built-in set numbers its prompts

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_jsonl(text: str, limits: PromptLimits = CLI_LIMITS) -> list[Prompt]:
    """The prompts of a JSON lines text; ValueError naming the first bad line."""
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if len(prompts) >= limits.max_prompts:
            raise ValueError(f"line {n}: more than {limits.max_prompts} prompts in the file")
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {n}: not JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"line {n}: expected a JSON object, got {type(obj).__name__}")
        prompt = obj.get("prompt")
        if not isinstance(prompt, str):
            raise ValueError(f"line {n}: 'prompt' must be a string")
        if not prompt.strip():
            raise ValueError(f"line {n}: the prompt is empty")
        if len(prompt) > limits.max_chars:
            raise ValueError(
                f"line {n}: the prompt is {len(prompt)} characters; at most {limits.max_chars}"
            )
        category = obj.get("category", UNCATEGORISED)
        if not isinstance(category, str) or not category.strip():
            raise ValueError(f"line {n}: 'category' must be a non-empty string")
        pid = obj.get("id", f"line-{n}")
        if isinstance(pid, bool) or not isinstance(pid, (str, int)) or not str(pid).strip():
            raise ValueError(f"line {n}: 'id' must be a non-empty string or an integer")
        pid = str(pid)
        if pid in seen:
            raise ValueError(f"line {n}: id {pid!r} repeats line {seen[pid]}")
        seen[pid] = n
        prompts.append(Prompt(len(prompts), pid, category.strip(), prompt, n))
    if not prompts:
        raise ValueError("the prompt file holds no prompts")
    return prompts


def read_prompts(source: str, limits: PromptLimits = CLI_LIMITS) -> list[Prompt]:
    """The built-in set ("builtin"), the quick set ("quick") or the prompts of a JSON lines
    file."""
    if source == BUILTIN:
        return builtin_prompts()
    if source == QUICK:
        return quick_prompts()
    path = Path(source)
    # a file far beyond the limits is refused before it is read whole
    most = limits.max_prompts * (limits.max_chars + 200) + 1
    try:
        with path.open("rb") as f:
            data = f.read(most + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {source}: {exc.strerror or exc}") from None
    if len(data) > most:
        raise ValueError(f"{source} is larger than the limits allow")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ValueError(f"line {line}: not UTF-8 text") from None
    return parse_jsonl(text, limits)


def prompts_digest(prompts: list[Prompt]) -> str:
    """A digest of the whole set (ids, categories, texts, order): a resumed or merged report
    must be over the same prompts."""
    h = hashlib.sha256()
    for p in prompts:
        h.update(json.dumps([p.id, p.category, p.text], ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def builtin_prompts() -> list[Prompt]:
    """The built-in set: six prompts in each of CATEGORIES, in that order."""
    out = []
    for category in CATEGORIES:
        for i, text in enumerate(BUILTIN_SET[category], start=1):
            out.append(Prompt(len(out), f"{category}-{i}", category, text, len(out) + 1))
    return out


def quick_prompts() -> list[Prompt]:
    """The quick set: the first prompt of each of CATEGORIES, with its built-in id."""
    first = [p for p in builtin_prompts() if p.id.endswith("-1")]
    return [Prompt(i, p.id, p.category, p.text, i + 1) for i, p in enumerate(first)]


BUILTIN_SET: dict[str, tuple[str, ...]] = {
    "multi-turn": (
        "User: I want to start running. Where do I begin?\n"
        "Assistant: Start with three short runs a week, mixing running and walking.\n"
        "User: My knees hurt after the second week. What should I change?",
        "User: Can you suggest a name for a small bakery?\n"
        "Assistant: How about 'The Warm Crust'?\n"
        "User: I like it, but it should sound friendlier. Give me three more ideas.",
        "User: What is a good first programming language?\n"
        "Assistant: Python is a common choice: its syntax is simple and it has many libraries.\n"
        "User: And after Python, what should I learn to build websites?",
        "User: I am planning a weekend trip to the mountains.\n"
        "Assistant: Lovely! Will you hike or stay in a cabin?\n"
        "User: Hike. What should I pack for two days?",
        "User: Explain what a budget is in one sentence.\n"
        "Assistant: A budget is a plan for how you will spend and save your money.\n"
        "User: Now give me a simple way to make one for a month.",
        "User: My tomato plants have yellow leaves.\n"
        "Assistant: That often means too much water or too little nitrogen.\n"
        "User: I water them every day. What should I do now?",
    ),
    "translation": (
        "Translate into French: The train to the coast leaves every morning at eight.",
        "Translate into Spanish: Please close the window before you leave the room.",
        "Translate into German: We have been waiting for the bus for twenty minutes.",
        "Translate into English: Le chat dort sur le canapé depuis ce matin.",
        "Translate into Italian: My grandmother grows lemons in her garden.",
        "Translate into English: Ich habe gestern ein neues Fahrrad gekauft.",
    ),
    "summarisation": (
        "Summarise in one sentence: The city council voted on Tuesday to close the old "
        "harbour bridge to cars from next spring. Cyclists and pedestrians will still be "
        "allowed to cross. Engineers found cracks in two of its supports last year, and "
        "repairs would cost more than building a new bridge further upstream, which the "
        "council plans to open within five years.",
        "Summarise in one sentence: A study of three hundred office workers found that "
        "those who took a ten-minute walk after lunch reported feeling less tired in the "
        "afternoon than those who stayed at their desks. The effect was strongest on days "
        "with good weather and weakest for people who already exercised every morning.",
        "Summarise in two sentences: The village school has had a vegetable garden for "
        "twenty years. Each class looks after one bed, and the children cook what they grow "
        "once a month. This year the garden won a regional prize, and the school will spend "
        "the money on a small greenhouse so that lessons can continue through the winter.",
        "Summarise in one sentence: After three dry summers, farmers in the valley have "
        "started planting crops that need less water, such as sorghum and chickpeas. Yields "
        "are lower than for maize, but the crops survive heat waves and prices for them have "
        "risen, so many farmers say their income has stayed about the same.",
        "Summarise in one sentence: The museum's new exhibition shows fifty clocks made "
        "between 1600 and 1900. Visitors can open some of the cases and see how the gears "
        "work, and every hour all the clocks that still run strike together.",
        "Summarise in two sentences: A software team moved its tests from one large server "
        "to many small machines in the cloud. The test suite now finishes in eight minutes "
        "instead of forty, but the monthly bill has doubled, and the team is now looking for "
        "tests that can be removed or merged.",
    ),
    "qa": (
        "Why do leaves change colour in autumn?",
        "What is the difference between weather and climate?",
        "How does a refrigerator keep food cold?",
        "Why does bread go stale?",
        "What causes the tides in the sea?",
        "How do bees make honey?",
    ),
    "math": (
        "A shop sells pencils at 3 for 45 cents. How much do 12 pencils cost? "
        "Explain step by step.",
        "Tom is 4 years older than his sister. In 6 years their ages will add up to 30. "
        "How old is Tom now? Show your reasoning.",
        "A train travels 180 km in 2 hours and 15 minutes. What is its average speed in km "
        "per hour? Work it out step by step.",
        "What is 15% of 240? Explain how you computed it.",
        "A rectangle has a perimeter of 36 cm and its length is twice its width. "
        "What is its area? Solve step by step.",
        "If 5 workers paint a fence in 6 hours, how long would 3 workers take at the same "
        "rate? Show your steps.",
    ),
    "rag": (
        "Use the passage to answer the question.\n"
        "Passage: The Larchwood Trail is 14 km long and climbs 600 m. It is closed from "
        "December to March because of snow. Dogs are allowed on a lead.\n"
        "Question: Can I walk the trail with my dog in January?",
        "Use the passage to answer the question.\n"
        "Passage: The Model K kettle holds 1.7 litres and boils a full load in about four "
        "minutes. It switches off by itself when the water boils or when the kettle is "
        "lifted from its base.\n"
        "Question: What happens if I lift the kettle while it is heating?",
        "Use the passage to answer the question.\n"
        "Passage: Orders placed before 2 pm on a weekday are shipped the same day. Delivery "
        "takes two to four working days. Returns are free within 30 days if the item is "
        "unused.\n"
        "Question: I ordered on Friday at 5 pm. When will my parcel be shipped?",
        "Use the passage to answer the question.\n"
        "Passage: The library is open from 9 am to 7 pm on weekdays and from 10 am to 4 pm "
        "on Saturdays. It is closed on Sundays. Members may borrow up to eight books for "
        "three weeks.\n"
        "Question: How many books can a member borrow, and for how long?",
        "Use the passage to answer the question.\n"
        "Passage: The river ferry carries up to 40 passengers and 6 bicycles. It runs every "
        "half hour in summer and every hour in winter. The crossing takes twelve minutes.\n"
        "Question: How long will I wait at most for a ferry in winter?",
        "Use the passage to answer the question.\n"
        "Passage: The plant needs bright light but no direct midday sun. Water it when the "
        "top two centimetres of soil are dry, and feed it once a month in spring and "
        "summer.\n"
        "Question: How often should I feed the plant in summer?",
    ),
}
