"""The package's imports point down the layer table in ``amp_edu/__init__.py``, with no cycles.

The table (one row per top-level package or module, highest first) is the single statement of
the order; this test parses it and every ``.py`` file under ``amp_edu/`` with :mod:`ast`, so lazy
imports inside functions count as much as top-level ones. Three rules:

* **down only**: a module of row *r* imports only its own package or rows below *r*;
* **no cycles**: the module graph (each import an edge to the most specific module it names) has
  no strongly connected component of more than one module — inside a package too;
* **no string imports**: no ``importlib.import_module(...)`` or ``__import__(...)`` call, whose
  target a reader (and this test) could not see.

Run it alone with ``pytest tests/test_layering.py``; a failure names each offending import with
its file and line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import amp_edu

ROOT = Path(amp_edu.__file__).parent


@dataclass(frozen=True)
class Import:
    source: str      # importing module, e.g. "amp_edu.measure.timing"
    target: str      # the most specific amp_edu module the import names
    line: int


def layer_table() -> list[str]:
    """The rows of the package docstring's table, highest layer first."""
    rows, inside = [], 0
    for line in (amp_edu.__doc__ or "").splitlines():
        if re.fullmatch(r"=+ +=+", line.strip()):
            inside += 1
            continue
        if inside == 1 and line.strip():
            rows.append(line.split()[0])
    return rows


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(name: str) -> str:
    """The most specific module of the package that ``name`` (a module or a name in one) is."""
    while name not in MODULES:
        name = name.rsplit(".", 1)[0]
    return name


def imports_of(module: str, source: str | None = None) -> tuple[list[Import], list[tuple[int, str]]]:
    """Every import of ``module`` into amp_edu (lazy ones too), and its string-import calls;
    ``source`` replaces the file's text (the checker's own tests)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found, strings = [], []
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, str(path))):
        if isinstance(node, ast.Import):
            found += [Import(module, _resolve(a.name), node.lineno) for a in node.names
                      if a.name.split(".")[0] == "amp_edu"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "amp_edu":
                found += [Import(module, _resolve(f"{target}.{a.name}"), node.lineno) for a in node.names]
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("import_module", "__import__"):
                strings.append((node.lineno, ast.unparse(node)))
    return found, strings


GRAPH = {m: imports_of(m) for m in MODULES}


def row_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_the_table_names_every_top_level_package_once():
    rows = layer_table()
    assert len(rows) == len(set(rows)), rows
    tops = {row_of(m) for m in MODULES} - {"__init__"}
    assert sorted(tops - set(rows)) == [], "packages missing from the layer table in amp_edu/__init__.py"
    assert sorted(set(rows) - tops) == [], "rows of the layer table that name no package"


def upward_imports() -> list[str]:
    rank = {row: i for i, row in enumerate(reversed(layer_table()))}      # bottom row: 0
    bad = []
    for module, (found, _) in GRAPH.items():
        for imp in found:
            a, b = row_of(imp.source), row_of(imp.target)
            if a != b and b != "__init__" and rank.get(a, -1) < rank.get(b, -1):
                bad.append(f"{MODULES[module].relative_to(ROOT.parent)}:{imp.line}: {a} imports {imp.target} "
                           f"(row {b!r} is above {a!r})")
    return sorted(set(bad))


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    edges = {m: sorted({i.target for i in found if i.target != m}) for m, (found, _) in GRAPH.items()}
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def string_imports() -> list[str]:
    return [f"{MODULES[m].relative_to(ROOT.parent)}:{line}: {code}"
            for m, (_, strings) in GRAPH.items() for line, code in strings]


def test_imports_point_down_the_layer_table():
    bad = upward_imports()
    assert not bad, "imports that point up the layer table:\n" + "\n".join(bad)


def test_no_import_cycles_between_modules():
    found = cycles()
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_string_imports():
    found = string_imports()
    assert not found, "imports by string:\n" + "\n".join(found)


# The checker itself must be able to fail: each rule on made-up source and a made-up graph.
def test_the_checker_sees_a_lazy_upward_import_and_a_string_import():
    src = "def f():\n    from ..course import grade\n    import importlib\n    importlib.import_module('x')\n"
    found, strings = imports_of("amp_edu.formats.grid", src)
    assert [i.target for i in found] == ["amp_edu.course.grade"]
    assert strings == [(4, "importlib.import_module('x')")]


def test_the_checker_finds_a_cycle(monkeypatch):
    fake = {"amp_edu.a": ([Import("amp_edu.a", "amp_edu.b", 1)], []),
            "amp_edu.b": ([Import("amp_edu.b", "amp_edu.a", 1)], []),
            "amp_edu.c": ([Import("amp_edu.c", "amp_edu.a", 1)], [])}
    monkeypatch.setitem(globals(), "GRAPH", fake)
    assert cycles() == [["amp_edu.a", "amp_edu.b"]]
