"""The page's scripts live under assets/, one file each: every file there is on the built
page, every script on the page comes from one with each placeholder filled, node parses
each as gradio runs it, and no script is left written inside the Python."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from specviz import ui
from specviz.ui import assets

ROOT = Path(__file__).resolve().parent.parent
ON_LOAD_ARGS = "element, trigger, props, server, upload, watch"  # what gradio passes
NAMES = sorted(p.stem for p in assets.ASSETS.glob("*.js"))


def page_scripts() -> dict[str, str]:
    """Every script the built page runs, by where it runs: the components' js_on_load, the
    events' js, and the page script that launch() takes."""
    demo = ui.build_app(loader=lambda pair, dtype: None, pairs=["tiny"])
    found = {"launch": ui.launch_options()["js"]}
    for block in demo.blocks.values():
        if getattr(block, "js_on_load", None):
            found[f"js_on_load:{block.elem_id}"] = block.js_on_load
    for i, fn in demo.fns.items():
        if fn.js:
            found[f"event:{i}"] = fn.js
    return found


def code_of(name: str) -> list[str]:
    """The asset's code between its placeholders (what must appear where it is used)."""
    return [part.strip() for part in assets.PLACEHOLDER.split(assets.source(name))[::2]]


def test_every_asset_is_on_the_page_and_every_page_script_is_an_asset() -> None:
    assert {"pick", "play-keys", "present-from-url", "present-page", "present-toggle"} <= set(NAMES)
    scripts = page_scripts()
    for name in NAMES:
        parts = [p for p in code_of(name) if p]
        users = [where for where, js in scripts.items() if all(p in js for p in parts)]
        assert users, f"assets/{name}.js is on no part of the page"
    for where, js in scripts.items():
        assert not assets.PLACEHOLDER.search(js), f"{where}: a placeholder left unfilled"
        assert "//" not in js.replace("://", ""), f"{where}: comment lines go with the file"
        assert any(code_of(name)[0] in js for name in NAMES), f"{where}: not from assets/"
    # one file for the token view's and the tree's clicks; the token view and the round
    # table also follow their newest line
    on_load = {where: js for where, js in scripts.items() if where.startswith("js_on_load:")}
    picks = {w for w, js in on_load.items() if js.startswith(assets.script("pick"))}
    assert picks == {"js_on_load:sv-tokens", "js_on_load:sv-rounds", "js_on_load:sv-tree-view"}
    follows = {w for w, js in on_load.items() if assets.script("follow-end") in js}
    assert follows == {"js_on_load:sv-tokens", "js_on_load:sv-rounds"}


def test_a_placeholder_needs_its_value_and_a_value_its_placeholder() -> None:
    assert assets.placeholders("present-toggle") == {"ROOT_CLASS"}
    with pytest.raises(KeyError, match="ROOT_CLASS"):
        assets.script("present-toggle")
    with pytest.raises(KeyError, match="EXTRA"):
        assets.script("pick", EXTRA=1)
    filled = assets.script("present-toggle", ROOT_CLASS="a'b")
    assert 'toggle("a\'b", Boolean(on))' in filled  # data goes in as a JSON literal
    page = ui.launch_options()["js"]
    assert assets.script("present-from-url") in page  # a script goes in as code


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_parses_each_script_as_gradio_runs_it(tmp_path) -> None:
    for where, js in page_scripts().items():
        if where.startswith("js_on_load:"):  # a function body (gradio's HTML component)
            wrapped = f"function onLoad({ON_LOAD_ARGS}) {{\n{js}\n}}"
        else:  # an expression whose value gradio calls
            wrapped = f"const run = (\n{js}\n);"
        path = tmp_path / (re.sub(r"\W", "-", where) + ".js")
        path.write_text(wrapped, encoding="utf-8")
        done = subprocess.run(["node", "--check", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, f"{where}: {done.stderr}"


def test_no_script_is_written_in_the_python() -> None:
    for path in (ROOT / "specviz").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for sign in ("=> {", "addEventListener", "document.", "<script"):
            assert sign not in text, f"{path.relative_to(ROOT)}: {sign!r}; scripts go in assets/"


ROOT_HAS = re.compile(r"(?:^|[\s,>~+(}])(?:html|body|:root)(?:[.#\[:][^\s{,]*?)?:has\(")


def root_has_rules(css: str) -> list[str]:
    """The stylesheet's selectors with a `:has()` on the page's root (html, body, :root)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    return [m.group(0).strip() for m in ROOT_HAS.finditer(css)]


def test_no_style_rule_restyles_the_whole_page_on_each_update() -> None:
    """A `:has()` on the page's root makes the browser restyle the whole page each time an
    element its argument names changes, and gradio changes classes on every update: such a
    rule (the verifier game's veil, once) cost a run about a second of the browser's style
    recalculation. The veil is a class the server sets (specviz.ui.verifier_tab.veil); a
    `:has()` on one element restyles that element alone."""
    assert root_has_rules((ROOT / "assets" / "specviz.css").read_text(encoding="utf-8")) == []
    assert root_has_rules(ui.launch_options()["css"]) == []
    # the check finds such a rule where one is written
    assert root_has_rules("a {}\nbody:has(#x .y) #z { filter: blur(6px); }") == ["body:has("]
    assert root_has_rules("html.dark:has(.a) b {}") == ["html.dark:has("]
    assert root_has_rules("#sv-speedline:not(:has(.sv-speedline)) {}") == []
