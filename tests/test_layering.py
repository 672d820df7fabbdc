"""What the package's structure promises, read from its source with ast (nothing imported):
a module imports only modules listed before it in docs/architecture.md's table (type-checking
imports and a function's own imports included), so no import circle exists; and no module
outside specviz/verify and specviz/config asks a verification or a rule by its name."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from specviz.verify.registry import RULES, VERIFICATIONS

ROOT = Path(__file__).resolve().parents[1] / "specviz"
DOC = ROOT.parent / "docs" / "architecture.md"


def modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text(), str(path))
    return found


def imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The specviz modules a module imports anywhere in its body (a function's own import and
    a type-checking import included: a circle broken by importing late is still a circle).
    ``from package import module`` imports that module; ``from package import name``
    imports the package's __init__. The package specviz itself is no module of the order."""
    out: set[str] = set()
    is_package = any(k.startswith(name + ".") for k in known)
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in known else base)
    return {m for m in out if m in known and m not in (name, "specviz")}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def graph() -> dict[str, set[str]]:
    """Each specviz module and the specviz modules it imports (specviz itself left out)."""
    trees = modules()
    known = set(trees)
    return {n: imports(n, t, known) for n, t in trees.items() if n != "specviz"}


def test_specviz_has_no_import_circle() -> None:
    g = graph()
    assert cycle(g) is None, " -> ".join(cycle(g) or [])


def documented_rows() -> list[tuple[str, list[str]]]:
    """docs/architecture.md's table: each row's name and its modules, in the order listed."""
    rows: list[tuple[str, list[str]]] = []
    lines = iter(DOC.read_text().splitlines())
    for line in lines:
        if line.startswith("| row | modules |"):
            break
    for line in lines:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set(cells[0]) <= set("-: "):
            continue
        rows.append((cells[0], ["specviz." + m for m in re.findall(r"`([\w.]+)`", cells[1])]))
    return rows


def where_it_fits(
    name: str, g: dict[str, set[str]], position: dict[str, int], row: list[str]
) -> str:
    """The line a module missing from the table fails with: where in the order it fits."""
    after = [m for m in g[name] if m in position]
    before = [m for m in g if name in g[m] and m in position]
    lo = max(after, key=position.__getitem__, default=None)
    hi = min(before, key=position.__getitem__, default=None)
    where = f"{name} is not listed in {DOC.name}'s table: list it"
    if lo is not None:
        where += f" after {lo} (row {row[position[lo]]!r}, which it imports)"
    if hi is not None:
        where += f"{' and' if lo else ''} before {hi} (row {row[position[hi]]!r}, which imports it)"
    return where + ", and say what it owns"


def back_edges(g: dict[str, set[str]], position: dict[str, int], row: list[str]) -> list[str]:
    """Each import of a module listed after the importer (or at its place: itself)."""
    return [
        f"{a} (row {row[position[a]]!r}) imports {b} (row {row[position[b]]!r}), listed after it"
        for a in sorted(g)
        for b in sorted(g[a])
        if position[b] >= position[a]
    ]


def test_a_module_imports_only_modules_listed_before_it() -> None:
    """The order docs/architecture.md states, every module in it: a module added later fails
    here with the line that says where it fits, until the table lists it."""
    g = graph()
    position: dict[str, int] = {}
    row: list[str] = []
    for name, listed in documented_rows():
        for m in listed:
            assert m in g, f"{DOC.name}'s row {name!r} lists {m}, which is no specviz module"
            assert m not in position, f"{DOC.name} lists {m} twice"
            position[m] = len(row)
            row.append(name)
    missing = [where_it_fits(m, g, position, row) for m in sorted(set(g) - set(position))]
    assert not missing, "\n".join(missing)
    back = back_edges(g, position, row)
    assert not back, "\n".join(back)


def test_the_order_check_finds_a_back_edge_and_places_a_new_module() -> None:
    g = {"a": set(), "b": {"a"}, "c": {"b", "new"}, "new": {"a"}}
    position, row = {"a": 0, "b": 1, "c": 2}, ["ground", "middle", "top"]
    assert back_edges({"a": set(), "b": {"a"}, "c": {"b"}}, position, row) == []
    assert back_edges({"a": {"b"}, "b": set(), "c": set()}, position, row) == [
        "a (row 'ground') imports b (row 'middle'), listed after it"
    ]
    line = where_it_fits("new", g, position, row)
    assert "after a (row 'ground', which it imports)" in line
    assert "before c (row 'top', which imports it)" in line
    # and the import reader sees a type-checking import and resolves a module from a package
    probe = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specviz.tree import X\n"
        "from specviz.drafters import base\nfrom specviz.config import Settings\n"
    )
    known = {"specviz.tree", "specviz.drafters", "specviz.drafters.base", "specviz.config"}
    assert imports("specviz.x", probe, known) == known - {"specviz.drafters"}


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


NAMES = set(VERIFICATIONS) | set(RULES)


def name_comparisons(tree: ast.Module) -> list[int]:
    """Lines where a value is compared with a verification's or rule's name."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for side in [node.left, *node.comparators]:
            consts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            if any(isinstance(c, ast.Constant) and c.value in NAMES for c in consts):
                lines.append(node.lineno)
    return lines


def test_only_the_registry_and_config_ask_a_verification_by_name() -> None:
    found = {
        n: lines
        for n, t in modules().items()
        if not (n.startswith("specviz.verify") or n == "specviz.config")
        and (lines := name_comparisons(t))
    }
    assert found == {}


def test_the_name_finder_finds_a_comparison() -> None:
    tree = ast.parse('if s.verification == "exact-match" or rule in ("resample-from-p",): pass')
    assert name_comparisons(tree) == [1, 1]


ALGORITHM = (
    "specviz.sampling",
    "specviz.verify",
    "specviz.lm",
    "specviz.tree",
    "specviz.drafters",
    "specviz.record",
    "specviz.trace",
    "specviz.metrics",
    "specviz.updates",
    "specviz.rounds",
    "specviz.engine",
)  # and their submodules


def algorithm_modules(found: dict[str, ast.Module]) -> list[str]:
    return sorted(n for n in found if any(n == a or n.startswith(a + ".") for a in ALGORITHM))


def test_the_algorithm_imports_nothing_of_the_backend():
    """The algorithm's modules (the rule, the draws, the caches, the drafters, the round and
    its records) reach the CPU path only through the pair (ModelPair.open_cache): none
    imports anything of specviz.backend, anywhere in its body, so the backend can change
    without touching the rule."""
    found = modules()
    names = algorithm_modules(found)
    assert {"specviz.sampling", "specviz.rounds", "specviz.drafters.model"} <= set(names)
    for name in names:
        touched = {
            m for m in imports(name, found[name], set(found)) if m.startswith("specviz.backend")
        }
        assert not touched, f"{name} imports {sorted(touched)}"
    # and the check can see such an import
    probe = ast.parse("def f():\n    from specviz.backend.packages import packaged\n")
    assert imports("specviz.engine", probe, set(found)) >= {"specviz.backend.packages"}


def test_importing_the_algorithm_loads_no_backend_module():
    """The same, as a fresh process sees it: importing every algorithm module (and running
    a warp with top-p) leaves specviz.backend unloaded."""
    names = algorithm_modules(modules())
    code = (
        "import importlib, sys, torch\n"
        f"for n in {names!r}: importlib.import_module(n)\n"
        "from specviz.config import Warp\n"
        "from specviz.sampling import warp\n"
        "warp(torch.randn(3, 50), Warp(temperature=0.8, top_k=0, top_p=0.9))\n"
        "print(sorted(m for m in sys.modules if m.startswith('specviz.backend')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT.parent,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout


def _said(tree: ast.Module) -> set[str]:
    """Which of the things said once a module says: Leviathan's alpha ** (gamma + 1), a
    device sync before a clock read, the default gamma list, a Markdown table's rule."""
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Pow)
            and isinstance(node.right, ast.BinOp)
            and isinstance(node.right.op, ast.Add)
            and isinstance(node.right.right, ast.Constant)
            and node.right.right.value == 1
        ):
            found.add("formula")
        elif isinstance(node, ast.Attribute) and node.attr == "synchronize":
            found.add("clock")
        elif isinstance(node, ast.Tuple) and [getattr(e, "value", None) for e in node.elts] == [
            1,
            2,
            4,
            8,
        ]:
            found.add("gammas")
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and "---|" in node.value
        ):
            found.add("table")
    return found


def test_the_formula_the_clock_the_gammas_and_the_table_writer_are_said_once() -> None:
    homes = {
        "formula": {"specviz.metrics"},
        "clock": {"specviz.clock"},
        "gammas": {"specviz.config.settings"},
        "table": {"specviz.outfiles"},
    }
    where: dict[str, set[str]] = {k: set() for k in homes}
    for name, tree in modules().items():
        for thing in _said(tree):
            where[thing].add(name)
    assert where == homes
    probe = ast.parse("a = (1 - x ** (g + 1))\ntorch.cuda.synchronize()\nG = (1, 2, 4, 8)\n")
    assert _said(probe) == {"formula", "clock", "gammas"}
