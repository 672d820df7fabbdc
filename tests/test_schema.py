"""One schema: config.Settings declares each setting once, and the CLI's flags, the app's
form and widgets, the /generate signature and the lesson's starting controls are derived
from it. A setting added to Settings (here: a subclass with one of each kind) reaches every
front end its Meta names, with its default, its range and its parsing, and no other."""

from __future__ import annotations

import argparse
import inspect
from dataclasses import dataclass, fields

import gradio as gr
import pytest

from specviz import config, lesson
from specviz.cli import args as cli
from specviz.config import Limits, Settings, Switch, setting
from specviz.ui import api, controls
from specviz.ui.context import AppContext
from specviz.ui.runners import LocalRunner
from specviz.ui.state import FORM_FIELDS, Form, form_class

# What users type today: these names must not move when the schema changes.
CLI_FLAGS = {
    "--drafter",
    "--gamma",
    "--adaptive-gamma",
    "--temperature",
    "--draft-temperature",
    "--top-p",
    "--top-k",
    "--greedy",
    "--max-new-tokens",
    "--seed",
    "--top-n",
    "--verification",
    "--tree",
    "--draft-confidence",
    "--tree-budget",
    "--typical-threshold",
    "--typical-alpha",
    "--match-top-k",
}
API_NAMES = {
    "prompt",
    "pair",
    "draft",
    "target",
    "drafter",
    "gamma",
    "adaptive_gamma",
    "temperature",
    "draft_temperature",
    "top_p",
    "top_k",
    "greedy",
    "max_new_tokens",
    "seed",
    "compare",
    "verification",
    "tree",
    "draft_confidence",
    "tree_budget",
    "typical_threshold",
    "typical_alpha",
    "match_top_k",
}
FORM_NAMES = {
    "prompt",
    "pair",
    "dtype",
    "custom_draft",
    "custom_target",
    "drafter",
    "gamma",
    "adaptive_gamma",
    "temperature",
    "own_draft_temperature",
    "draft_temperature",
    "top_p",
    "top_k",
    "greedy",
    "verification",
    "max_new_tokens",
    "seed",
    "tree",
    "own_draft_confidence",
    "draft_confidence",
    "own_tree_budget",
    "tree_budget",
    "typical_threshold",
    "typical_alpha",
    "match_top_k",
    "compare",
    "compile",
}
NOT_SETTINGS = ("prompt", "pair", "draft", "target", "compare")  # the API's other parameters


def sampling_parser(cls: type[Settings] = Settings) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    cli.add_sampling_args(p, cls)
    return p


def flags(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in p._actions if a.dest != "help"}


def test_every_field_but_the_limits_is_in_the_schema() -> None:
    names = [f.name for f in fields(Settings) if f.name != "limits"]
    assert [s.name for s in config.schema()] == names
    assert set(Settings().to_dict()) == set(names)  # the trace's JSON fields
    internal = {s.name for s in config.schema() if not s.meta.fronts}
    assert internal == {"method", "ngram_size", "rule", "trace_level"}


def test_the_cli_offers_what_the_schema_says_under_the_names_users_type() -> None:
    offered = config.offered("cli")
    got = flags(sampling_parser())
    assert set(got) == {s.name for s in offered}
    assert {a.option_strings[0] for a in got.values()} == CLI_FLAGS
    defaults = vars(sampling_parser().parse_args([]))
    assert defaults == {s.name: s.default for s in offered}
    gamma = next(s for s in offered if s.name == "gamma")
    assert "(1..32)" in got["gamma"].help and gamma.range_text(Limits()) == "1..32"
    # every command that runs builds its parser with the derived flags, without a clash
    from specviz.cli.main import build_parser

    args = build_parser().parse_args(["generate", "--prompt", "x"])
    assert cli.settings_from_args(args) == Settings(limits=Limits.from_env())


def test_the_api_offers_what_the_schema_says_with_the_same_defaults() -> None:
    sig = api.generate_signature()
    assert set(sig.parameters) == API_NAMES
    settings = [p for p in sig.parameters.values() if p.name not in NOT_SETTINGS]
    assert [p.name for p in settings] == [s.name for s in config.offered("api")]
    for p, s in zip(settings, config.offered("api"), strict=True):
        assert p.default == s.default, p.name
    # gradio describes the endpoint from the function's signature and type hints
    from gradio.utils import get_function_params

    endpoint = api.generate_endpoint(AppContext(lambda pair, dtype: None))
    described = {name: (has, default) for name, has, default, _ in get_function_params(endpoint)}
    assert described["prompt"] == (False, None) and described["compare"] == (True, False)
    assert described["draft_temperature"] == (True, None) and described["gamma"] == (True, 4)
    assert all(t is not None for *_, t in get_function_params(endpoint))


def test_the_form_and_the_lesson_start_from_the_schema() -> None:
    assert set(FORM_FIELDS) == FORM_NAMES
    starts = config.form_defaults()
    assert {k: getattr(Form(), k) for k in starts} == starts
    assert Form().settings(Limits()) == Settings()  # an untouched page runs the defaults
    assert starts["own_draft_temperature"] is False and starts["draft_temperature"] == 1.5
    assert lesson.BASE == {**starts, "compare": True} and set(lesson.BASE) <= set(FORM_FIELDS)


def test_the_widgets_start_at_the_form_defaults() -> None:
    with gr.Blocks():
        c = controls.layout(["default"], config.Deployment(), LocalRunner())
    assert set(FORM_FIELDS) <= set(c)
    starts = config.form_defaults()
    for name, value in starts.items():
        assert c[name].get_config()["value"] == value, name
    assert isinstance(c["gamma"], gr.Slider) and c["gamma"].elem_id == "sv-gamma"
    assert isinstance(c["verification"], gr.Radio) and isinstance(c["seed"], gr.Number)
    assert c["own_draft_temperature"].elem_id == "sv-own-draft-temp"
    assert c["draft_temperature"].elem_id == "sv-draft-temp" and not c["draft_temperature"].visible


# --- a setting of each kind, added in one place ----------------------------------------------


@dataclass(frozen=True)
class Wider(Settings):
    """Settings with one new setting of each kind the features to come need."""

    style: str = setting("plain", "style", choices=("plain", "fancy"), help="a choice")
    threshold: float = setting(
        0.09, "threshold", lo=0, hi=1, slider=(0, 1, 0.01), elem_id="sv-threshold"
    )
    match_k: int = setting(10, "match top-k", lo=1, hi=100, help="an int with a range")
    budget: int | None = setting(
        None, "budget", lo=1, hi=64, switch=Switch("use_budget", "limit the budget", 16)
    )
    confidence: float | None = setting(
        None,
        "confidence",
        lo=0,
        hi=1,
        lo_open=True,
        slider=(0.05, 1, 0.05),
        switch=Switch("use_confidence", "stop below a confidence", 0.5),
    )
    tree: tuple[int, ...] | None = setting(None, "tree shape", lo=1, hi=8, help="a tree")
    eager: bool = setting(False, "eager", help="a flag")
    lazy: bool = setting(True, "lazy", help="a flag that starts on")
    cli_only: int = setting(3, "cli only", lo=0, fronts=("cli",))
    api_only: float = setting(0.5, "api only", lo=0, hi=1, fronts=("api",))


NEW = {f.name for f in fields(Wider)} - {f.name for f in fields(Settings)}


def test_a_new_setting_is_a_flag_of_the_cli() -> None:
    p = sampling_parser(Wider)
    assert NEW - set(flags(p)) == {"api_only"}
    assert cli.settings_from_args(p.parse_args([]), cls=Wider) == Wider()
    argv = "--style fancy --threshold 0.2 --match-k 3 --budget 5 --confidence 0.3".split()
    argv += ["--tree", "2,2,1", "--eager", "--no-lazy", "--cli-only", "4"]
    s = cli.settings_from_args(p.parse_args(argv), cls=Wider)
    assert (s.style, s.threshold, s.match_k, s.budget, s.confidence) == ("fancy", 0.2, 3, 5, 0.3)
    assert (s.tree, s.eager, s.lazy, s.cli_only) == ((2, 2, 1), True, False, 4)
    assert "(entries 1..8)" in flags(p)["tree"].help and "(1..100)" in flags(p)["match_k"].help
    bad = [
        (["--tree", "2,x"], "tree must be comma-separated integers, got '2,x'"),
        (["--tree", "2,0"], "tree entries must be in 1..8, got 0"),
        (["--threshold", "2"], "threshold must be in [0, 1], got 2.0"),
        (["--confidence", "0"], "confidence must be in (0, 1], got 0.0"),
        (["--match-k", "0"], "match_k must be in 1..100, got 0"),
        (["--budget", "65"], "budget must be in 1..64, got 65"),
    ]
    for extra, message in bad:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
            cli.settings_from_args(p.parse_args(extra), cls=Wider)
    with pytest.raises(SystemExit):
        p.parse_args(["--style", "loud"])  # choices stay argparse's own


def test_a_new_setting_is_a_field_and_a_widget_of_the_app() -> None:
    form = form_class(Wider)
    names = {f.name for f in fields(form)}
    assert NEW - names == {"cli_only", "api_only"} and {"use_budget", "use_confidence"} <= names
    assert form().settings(Limits()) == Wider()
    starts = config.form_defaults(Wider)
    assert starts["tree"] == "" and starts["use_budget"] is False and starts["budget"] == 16
    typed = form(
        tree="2, 2,1",
        use_budget=True,
        budget=8.0,
        use_confidence=True,
        confidence=0.25,
        match_k=4.0,
        lazy=False,
    )
    s = typed.settings(Limits())
    assert (s.tree, s.budget, s.confidence, s.match_k, s.lazy) == ((2, 2, 1), 8, 0.25, 4, False)
    assert isinstance(s.budget, int) and isinstance(s.match_k, int)
    assert form(budget=8.0).settings(Limits()).budget is None  # its switch is off
    with pytest.raises(ValueError, match="budget is empty"):
        form(use_budget=True, budget=None).settings(Limits())
    with pytest.raises(ValueError, match="tree must be comma-separated integers"):
        form(tree="2;2").settings(Limits())

    c: dict = {}
    with gr.Blocks():
        controls.setting_widgets(c, Limits(), "sampling", Wider)
    kinds = {
        "style": gr.Radio,
        "threshold": gr.Slider,
        "match_k": gr.Number,
        "use_budget": gr.Checkbox,
        "budget": gr.Number,
        "use_confidence": gr.Checkbox,
        "confidence": gr.Slider,
        "tree": gr.Textbox,
        "eager": gr.Checkbox,
        "lazy": gr.Checkbox,
    }
    for name, kind in kinds.items():
        assert isinstance(c[name], kind), name
        assert c[name].get_config()["value"] == starts[name], name
    assert not c["budget"].visible and c["use_budget"].label == "limit the budget"
    assert c["threshold"].elem_id == "sv-threshold" and c["threshold"].step == 0.01
    assert (c["match_k"].minimum, c["match_k"].maximum, c["match_k"].precision) == (1, 100, 0)
    assert "cli_only" not in c and "api_only" not in c


def test_a_new_setting_is_a_parameter_of_the_api() -> None:
    form = form_class(Wider)
    sig = api.generate_signature(form)
    assert NEW - set(sig.parameters) == {"cli_only"}
    assert list(sig.parameters)[-1] == "compare"
    for s in config.offered("api", Wider):
        assert sig.parameters[s.name].default == s.default, s.name
    assert sig.parameters["tree"].annotation == (list[int] | None)
    assert sig.parameters["budget"].annotation == (int | None)
    assert sig.parameters["style"].annotation is str

    values = {
        **{name: p.default for name, p in sig.parameters.items()},
        "prompt": "1 2",
        "tree": [2, 2, 1],
        "budget": 5,
        "api_only": 0.25,
        "gamma": 3.0,
    }
    made, extra = api.api_form(form, values)
    assert made.use_budget and not made.use_confidence and extra == {"api_only": 0.25}
    s = made.settings(Limits()).with_(**extra)
    assert (s.tree, s.budget, s.confidence, s.api_only, s.gamma) == ((2, 2, 1), 5, None, 0.25, 3)

    from gradio_client.utils import python_type_to_json_schema

    schema = python_type_to_json_schema(sig.parameters["tree"].annotation)
    assert {"type": "array", "items": {"type": "integer"}} in schema["oneOf"]
    endpoint = api.generate_endpoint(AppContext(lambda pair, dtype: None), form)
    assert inspect.signature(endpoint) == sig
    assert "tree: a tree" in (endpoint.__doc__ or "")


def test_a_new_setting_is_checked_and_kept_in_the_trace() -> None:
    s = Wider(tree=[3, 1], budget=4)
    assert s.tree == (3, 1)  # a JSON list comes back a tuple
    assert Wider.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError, match="tree must be a non-empty list of numbers"):
        Wider(tree=())
    with pytest.raises(ValueError, match="style must be one of plain, fancy; got 'loud'"):
        Wider(style="loud")


def test_a_meta_that_cannot_work_is_refused() -> None:
    @dataclass(frozen=True)
    class NoSwitch(Settings):
        budget: int | None = setting(None, "budget", lo=1)

    @dataclass(frozen=True)
    class ChoiceOfInts(Settings):
        width: int = setting(2, "width", choices=("1", "2"))

    @dataclass(frozen=True)
    class Elsewhere(Settings):
        width: int = setting(2, "width", fronts=("tui",))

    @dataclass(frozen=True)
    class Untyped(Settings):
        width: complex = setting(2j, "width")

    for cls, message in (
        (NoSwitch, "an optional number in the app needs a Switch"),
        (ChoiceOfInts, "choices need a str setting"),
        (Elsewhere, "unknown front end"),
        (Untyped, "bool, int, float, str or tuple"),
    ):
        with pytest.raises(TypeError, match=message):
            config.schema(cls)
