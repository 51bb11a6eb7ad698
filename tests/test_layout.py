"""tests/ mirrors the package, and every module of the package is named by a test.

* A test of ``amp_edu/<package>/`` lives in ``tests/<package>/test_<topic>.py``; a test of a
  top-level module ``amp_edu/<module>.py`` in ``tests/test_<module>.py`` (``test_tree_hooks.py``
  holds two small ones); ``tests/tools/`` tests the scripts in ``tools/``; the few files about the
  whole package (its layers, its tiers, its packaging, this layout) sit in ``tests/`` too.
* Every module of ``amp_edu`` is *named* by at least one test file — imported from its own path, or
  written out as ``amp_edu.x.y`` — so a maintainer changing a module finds the tests that speak
  for it with one search, even where the lessons reach it through a package's re-exports.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import amp_edu

TESTS = Path(__file__).resolve().parent
PACKAGE = Path(amp_edu.__file__).resolve().parent
WHOLE_PACKAGE = {"test_layering.py", "test_layout.py", "test_packaging.py", "test_tiers.py"}
TWO_MODULES = {"test_tree_hooks.py": ("tree", "hooks")}


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "data" not in p.relative_to(TESTS).parts)


def modules() -> list[str]:
    out = []
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def named_by(path: Path) -> set[str]:
    """The amp_edu modules (and names in them) that a test file imports or writes out."""
    text = path.read_text()
    found = set(re.findall(r"amp_edu(?:\.\w+)+", text))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "amp_edu":
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def test_test_files_sit_where_their_package_is():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()} | {"tools"}
    top_modules = {p.stem for p in PACKAGE.glob("*.py")}
    misplaced = []
    for path in _test_files():
        rel = path.relative_to(TESTS)
        if len(rel.parts) == 2 and rel.parts[0] in packages:
            continue
        if len(rel.parts) == 1 and (rel.name in WHOLE_PACKAGE or rel.name in TWO_MODULES
                                    or rel.stem.removeprefix("test_") in top_modules):
            continue
        misplaced.append(str(rel))
    assert not misplaced, ("test files outside tests/<package>/ that test no top-level module "
                           "(see this file's docstring):\n" + "\n".join(misplaced))


def test_every_module_is_named_by_a_test():
    # this file's own examples (test_the_checker_...) name modules without testing them: not counted
    named = set().union(*(named_by(p) for p in _test_files() if p != Path(__file__).resolve()))
    missing = [m for m in modules() if m not in named]
    assert not missing, "modules no test file imports or names:\n" + "\n".join(missing)


def test_the_checker_counts_an_import_and_a_written_name(tmp_path):
    f = tmp_path / "test_x.py"
    f.write_text("from amp_edu.formats import fields\nimport amp_edu.measure.stats\nX = 'amp_edu.plans.l02'\n")
    got = named_by(f)
    assert {"amp_edu.formats.fields", "amp_edu.measure.stats", "amp_edu.plans.l02"} <= got
    assert "amp_edu.formats.rounding" not in got
