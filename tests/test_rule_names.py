"""The papers' rule is called "rejection" everywhere; its old name "exact" is still read."""

from __future__ import annotations

from specviz.cli.main import build_parser
from specviz.config import RULES, Settings
from specviz.trace import Trace


def test_the_rule_is_named_rejection() -> None:
    assert RULES[0] == "rejection" and "exact" not in RULES
    assert Settings().rule == "rejection"


def test_the_cli_takes_the_old_name_for_one_release() -> None:
    old = build_parser().parse_args(["check", "--break-rule", "exact"])
    new = build_parser().parse_args(["check", "--break-rule", "rejection"])
    assert old.break_rule == new.break_rule == "rejection"
    assert build_parser().parse_args(["check"]).break_rule == "rejection"


def test_an_old_trace_loads_under_the_new_name() -> None:
    t = Trace(method="spec", prompt="x", prompt_ids=[1], settings=Settings().to_dict(), models={})
    d = t.to_dict()
    d["settings"]["rule"] = "exact"
    loaded = Trace.from_dict(d)
    assert loaded.settings.rule == "rejection"
    assert loaded.settings == Settings()
    d["settings"]["rule"] = "resample-from-p"  # other names are left as they are
    assert Trace.from_dict(d).settings.rule == "resample-from-p"
