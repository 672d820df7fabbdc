"""What the package's structure promises, read from its source with ast (nothing imported):
no import circle among specviz's modules, and no module outside specviz/verify and
specviz/config asking a verification or a rule by its name."""

from __future__ import annotations

import ast
from pathlib import Path

from specviz.verify.registry import RULES, VERIFICATIONS

ROOT = Path(__file__).resolve().parents[1] / "specviz"


def modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text(), str(path))
    return found


def imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The specviz modules a module imports anywhere in its body (a function's own import
    included: a circle broken by importing late is still a circle)."""
    out: set[str] = set()
    package = name if name in known and any(k.startswith(name + ".") for k in known) else name
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if m in known and m != name}


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


def test_specviz_has_no_import_circle() -> None:
    trees = modules()
    known = set(trees)
    # a package's __init__ importing its own submodules is how a package is built, not a
    # circle between modules; an edge from a submodule to its package's __init__ is kept
    graph = {
        n: {m for m in imports(n, t, known) if not m.startswith(n + ".")} for n, t in trees.items()
    }
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])


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


def test_the_engine_names_no_backend():
    """The engine and the rounds open their caches through the pair
    (ModelPair.open_cache): neither imports anything of specviz.compiled, anywhere in its
    body, so a new backend touches the pair and the compiled path only."""
    found = modules()
    for name in ("specviz.engine", "specviz.rounds"):
        touched = {
            m for m in imports(name, found[name], set(found)) if m.startswith("specviz.compiled")
        }
        assert not touched, f"{name} imports {sorted(touched)}"
    # and the check can see such an import
    probe = ast.parse("def f():\n    from specviz.compiled.packages import packaged\n")
    assert imports("specviz.engine", probe, set(found)) >= {"specviz.compiled.packages"}
