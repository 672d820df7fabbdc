"""The glossary (docs/glossary.md) kept true, read from the package's source with ast
(nothing imported): the one-letter names c and v are the cost ratios only, no identifier
is the bare adjective "exact", and "view" names only what the page shows."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "specviz"
VIEW = re.compile(r"(^|_)views?($|_)|View")  # the word, not "overview"

# The functions where c (a draft step in target steps) and v (the verify call in target
# steps) are bound: the speedup formulas and their callers.
COST_NAMES = {
    "c": {
        ("analysis/sweep.py", "*"),
        ("cli/generate.py", "*"),
        ("costs.py", "*"),
        ("backend/draft_choice.py", "*"),
        ("gpucheck/measure.py", "*"),
        ("lesson_statements.py", "*"),
        ("metrics.py", "*"),
        ("report/handout.py", "*"),
        ("report/stats.py", "*"),
        ("ui/frames.py", "*"),
        ("ui/theory_tab.py", "*"),
        ("views/theory_figures.py", "*"),
    },
    "v": {
        ("costs.py", "*"),
        ("backend/draft_choice.py", "*"),
        ("metrics.py", "*"),
        ("report/stats.py", "*"),
    },
}


def sources() -> dict[str, ast.Module]:
    return {
        str(p.relative_to(ROOT)): ast.parse(p.read_text(), str(p))
        for p in sorted(ROOT.rglob("*.py"))
    }


def bindings(tree: ast.AST) -> list[tuple[str, int]]:
    """Every name bound in a module (assigned, a loop or comprehension target, an argument),
    with its line."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.append((node.id, node.lineno))
        elif isinstance(node, ast.arg):
            out.append((node.arg, node.lineno))
    return out


def test_c_and_v_are_the_cost_ratios_only() -> None:
    stray = [
        f"{path}:{line}: {name}"
        for path, tree in sources().items()
        for name, line in bindings(tree)
        if name in COST_NAMES and (path, "*") not in COST_NAMES[name]
    ]
    assert not stray, "c and v are the cost ratios (docs/glossary.md): " + ", ".join(stray)


def test_the_cost_modules_bind_c_and_v() -> None:
    """The list above stays short: a file that no longer binds c or v leaves it."""
    bound = {(name, path) for path, tree in sources().items() for name, _ in bindings(tree)}
    unused = [
        f"{name} in {path}"
        for name, places in COST_NAMES.items()
        for path, _ in places
        if (name, path) not in bound
    ]
    assert not unused, unused


def test_exact_is_an_adjective_only() -> None:
    """ "exact" means lossless; no name, argument, field or attribute is the bare word."""
    found = []
    for path, tree in sources().items():
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Name | ast.arg):
                name = node.id if isinstance(node, ast.Name) else node.arg
            elif isinstance(node, ast.Attribute):
                name = node.attr
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                name = node.name
            if name == "exact":
                found.append(f"{path}:{node.lineno}")
    assert not found, found


def test_view_names_what_the_page_shows() -> None:
    """No handler's output, check comparison or tree path is called a view: a function that
    returns Changes has no "view" in its name, and outside specviz/views and specviz/ui no
    identifier has "view" in it (the module path specviz.views aside; and torch's own
    Tensor.view called as a method, a name the project does not choose)."""
    found = []
    for path, tree in sources().items():
        inside = path.startswith(("views/", "ui/"))
        torch_view = {
            id(node.func)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "view"
        }
        for node in ast.walk(tree):
            if id(node) in torch_view:
                continue
            if isinstance(node, ast.FunctionDef):
                returns = ast.unparse(node.returns) if node.returns else ""
                if VIEW.search(node.name) and "Changes" in returns:
                    found.append(f"{path}:{node.lineno}: {node.name} returns Changes")
            if inside:
                continue
            names: list[str] = []
            if isinstance(node, ast.Name):
                names = [node.id]
            elif isinstance(node, ast.arg):
                names = [node.arg]
            elif isinstance(node, ast.Attribute):
                names = [node.attr]
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                names = [node.name]
            found += [f"{path}:{node.lineno}: {n}" for n in names if VIEW.search(n)]
    assert not found, found


def test_the_old_names_are_gone() -> None:
    """What each renamed thing was called, and is not any more."""
    text = "\n".join(p.read_text() for p in ROOT.rglob("*.py"))
    for old in ("CheckView", "make_view", "KeepRule", "path_view", "rule_text", "sv-present-view"):
        assert old not in text, old
