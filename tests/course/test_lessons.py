"""Every lesson has the course's shape, and the lesson list (amp_edu.course.lessons) is the one place.

The shape (CONTRIBUTING / the course design): a title ``# NN · ...`` and 3-5 learning goals; a
setup cell printing ``amp_edu.device.setup_line()``; a "Try it" section with a widget; a
"Pitfalls" section; a Summary (with the link to ``exercises/NN_....ipynb`` where the lesson has an
exercise); further reading with sources. Lessons are checked once their notebook exists, so a
lesson listed before its notebook lands (10, 11) is checked from the moment it does.
"""

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

import amp_edu
from amp_edu.course.lessons import LESSONS, readme_table

ROOT = Path(__file__).resolve().parents[2]
WIDGET = "application/vnd.jupyter.widget-view+json"
GOAL = re.compile(r"^\s*(\d+\.|[-*])\s+\S")


def _nb(lesson):
    return nbformat.read(ROOT / lesson.notebook, as_version=4)


def _headings(nb) -> list[tuple[int, int, str]]:
    """(cell index, line index, text) of every markdown heading, in notebook order."""
    return [(i, j, line.lstrip("#").strip()) for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
            for j, line in enumerate(c.source.splitlines()) if re.match(r"^#{1,3}\s", line)]


def _find(heads, pattern):
    return next((h for h in heads if re.match(pattern, h[2], re.I)), None)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.stem)
def test_title_and_goals(lesson):
    first = _nb(lesson).cells[0]
    assert first.cell_type == "markdown", "the first cell is the lesson's title"
    title = first.source.splitlines()[0]
    assert re.match(rf"^# {lesson.number:02d} · \S", title), f"first line {title!r}: want '# {lesson.number:02d} · <title>'"
    goals = [ln for ln in first.source.splitlines() if GOAL.match(ln)]
    assert 3 <= len(goals) <= 5, f"{len(goals)} learning goals in the first cell, want 3-5 (a list)"


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.stem)
def test_setup_cell_prints_the_setup_line(lesson):
    code = [c for c in _nb(lesson).cells if c.cell_type == "code"]
    assert code and "setup_line()" in code[0].source, "the first code cell prints amp_edu.device.setup_line()"
    text = "".join(o.get("text", "") for o in code[0].outputs if o.output_type == "stream")
    assert text.strip(), "the setup cell is stored executed, with the setup line in its output"


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.stem)
def test_try_it_pitfalls_summary_further_reading_in_order(lesson):
    nb = _nb(lesson)
    heads = _headings(nb)
    found = {name: _find(heads, pat) for name, pat in
             [("Try it", r"try it\b"), ("Pitfalls", r"pitfalls\b"), ("Summary", r"summary\b"),
              ("Further reading", r"further reading\b")]}
    missing = [n for n, h in found.items() if h is None]
    assert not missing, f"missing sections: {missing}"
    order = [found[n][:2] for n in ("Try it", "Pitfalls", "Summary", "Further reading")]
    assert order == sorted(order), f"sections out of order: {list(found)} at {order}"
    # the Try it section displays a widget (stored executed, so its view is in the outputs)
    start, end = found["Try it"][0], found["Summary"][0]
    views = [c for c in nb.cells[start:end] if c.cell_type == "code"
             for o in c.outputs if WIDGET in o.get("data", {})]
    assert views, "the Try it section displays no widget"
    reading = "\n".join(c.source for c in nb.cells[found["Further reading"][0]:] if c.cell_type == "markdown")
    reading = reading.split("Further reading", 1)[-1]
    assert any(GOAL.match(ln) for ln in reading.splitlines()), "further reading lists no source"


@pytest.mark.parametrize("lesson", [l for l in LESSONS if l.exercise], ids=lambda l: l.stem)
def test_summary_links_the_exercise(lesson):
    nb = _nb(lesson)
    summary = _find(_headings(nb), r"summary\b")
    assert summary is not None, "no Summary"
    after = "\n".join(c.source for c in nb.cells[summary[0]:] if c.cell_type == "markdown")
    assert f"exercises/{lesson.stem}.ipynb" in after, f"the Summary does not link exercises/{lesson.stem}.ipynb"
    assert (ROOT / lesson.solution).exists() and importlib.util.find_spec(lesson.checks_module)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.stem)
def test_no_private_source_wording(lesson):
    """Corrections are framed as "a widely copied tutorial says ..."; the course's private
    background texts are never named."""
    text = "\n".join(c.source for c in _nb(lesson).cells)
    hits = re.findall(r".{0,30}(?:seed texts?|\bseeds'(?=\s))(?:.{0,30})", text, re.I)   # not SIZE['seeds']
    assert not hits, f"names the private background texts: {hits[:3]}"


def test_the_lesson_list_and_the_files_agree():
    """Every notebook, solution and exercise on disk is a listed lesson's, and every listed lesson's
    files exist (the other tests take their files from the list, so none can be skipped)."""
    for folder, wanted in (("notebooks", {l.notebook for l in LESSONS}),
                           ("solutions", {l.solution for l in LESSONS if l.exercise}),
                           ("exercises", {f"exercises/{l.stem}.ipynb" for l in LESSONS if l.exercise})):
        on_disk = {f"{folder}/{p.name}" for p in (ROOT / folder).glob("*.ipynb")}
        assert on_disk == wanted, (f"{folder}/ and amp_edu.course.lessons.LESSONS disagree: on disk only "
                                   f"{sorted(on_disk - wanted)}, listed only {sorted(wanted - on_disk)}")
    for l in LESSONS:
        if l.exercise:
            checks = ROOT / "amp_edu" / "checks" / f"l{l.number:02d}"          # a module, or a package
            assert checks.with_suffix(".py").exists() or (checks / "__init__.py").exists(), l.checks_module
    assert [l.number for l in LESSONS] == list(range(len(LESSONS))), "lessons are numbered 0, 1, 2, ..."
    assert len({l.slug for l in LESSONS}) == len(LESSONS)


def test_readme_table_is_generated_from_the_lesson_list():
    """README.md holds exactly ``readme_table()`` (regenerate it: ``make readme``)."""
    readme = (ROOT / "README.md").read_text()
    assert readme_table() in readme, ("README.md's lesson table differs from amp_edu.course.lessons: "
                                      "run `make readme`")


def test_package_docstring_names_real_modules_and_lessons():
    numbers = {l.number for l in LESSONS}
    rows = [ln for ln in amp_edu.__doc__.splitlines() if re.match(r"^[a-z_]+\s{2,}\S", ln)]
    assert rows, "the package docstring's module table is gone"
    for row in rows:
        name = row.split()[0]
        assert importlib.util.find_spec(f"amp_edu.{name}"), f"the package docstring lists amp_edu.{name}, which does not exist"
        for ref in re.findall(r"\((\d\d)(?:-(\d\d))?\)\s*$", row):
            for n in filter(None, ref):
                assert int(n) in numbers, f"{row.strip()!r} refers to lesson {n}, which is not in LESSONS"
