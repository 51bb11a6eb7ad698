"""The site's generated configuration and the hosted-runtime install cell, in process (fast tier).

The built site in a browser is ``tests/course/test_site.py`` (course tier); ``make test-compat`` runs the
install cell for real in an environment that holds only another torch.
"""

import ast
import sys
from pathlib import Path

import nbformat
import pytest

from amp_edu.course import hosted, site
from amp_edu.course.lessons import LESSONS, Lesson

ROOT = Path(__file__).resolve().parents[2]
L04 = next(l for l in LESSONS if l.number == 4)


def test_toc_lists_every_lesson_in_order_from_the_lesson_list():
    toc = site.toc(site.lesson_pages())
    files = [c["file"] for c in toc["parts"][0]["chapters"]]
    assert files == [f"notebooks/{l.stem}" for l in sorted(LESSONS, key=lambda l: l.number)]
    assert toc["root"] == "intro"


def test_config_executes_nothing_and_loads_nothing_from_outside():
    cfg = site.config()
    assert cfg["execute"]["execute_notebooks"] == "off"
    sx = cfg["sphinx"]["config"]
    assert sx["nb_ipywidgets_js"] == {}
    assert ["html", site.WIDGET_MIME, None] in sx["nb_mime_priority_overrides"]
    assert not sx["mathjax_path"].startswith(("http:", "https:", "//"))
    assert cfg["launch_buttons"]["thebe"] is False and not cfg["launch_buttons"]["binderhub_url"]


def test_a_missing_notebook_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="without a notebook: notebooks/04_gradscaler_from_scratch.ipynb"):
        site.lesson_pages([L04], root=tmp_path)
    with pytest.raises(TypeError, match="Lesson"):
        site.lesson_pages(["04"])


def test_a_staged_lesson_shows_pictures_not_widgets():
    nb = nbformat.read(ROOT / L04.notebook, as_version=4)
    out = site.stage_notebook(nb, L04)
    assert "widgets" not in out.metadata and "widgets" in nb.metadata, "the input is not modified"
    assert out.cells[1].cell_type == "markdown" and "Run this lesson" in out.cells[1].source
    assert hosted.INSTALL_CELL.strip() in out.cells[1].source and L04.notebook in out.cells[1].source
    pictures = [c for c in out.cells if c.metadata.get("mystnb", {}).get("image", {}).get("classes") == site.EXPLORER_CLASS]
    assert pictures, "lesson 04 has an explorer with a static picture"
    for c in out.cells:
        for o in c.get("outputs", []):
            assert site.WIDGET_MIME not in o.get("data", {})
    assert all("caption" in c.metadata["mystnb"]["figure"] for c in pictures)


def test_a_widget_without_a_picture_becomes_a_note_and_long_outputs_scroll():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 99 · t"), nbformat.v4.new_code_cell("w")])
    nb.cells[1].outputs = [nbformat.v4.new_output("execute_result", data={
        site.WIDGET_MIME: {"model_id": "x"}, "text/plain": "VBox(...)"}),
        nbformat.v4.new_output("stream", text="line\n" * (site.LONG_OUTPUT_LINES + 1))]
    out = site.stage_notebook(nb, Lesson(99, "t", "t", "t", False))
    first = out.cells[2].outputs[0]
    assert "text/markdown" in first["data"] and "needs a" in first["data"]["text/markdown"]
    assert "output_scroll" in out.cells[2].metadata["tags"]


def test_intro_has_the_install_cell_every_lesson_and_the_reference_runs():
    text = site.intro(site.lesson_pages())
    assert hosted.INSTALL_CELL.strip() in text
    for l in LESSONS:
        assert f"notebooks/{l.stem}.ipynb" in text
    assert "stands for" in text and "$$" in text


def test_the_install_cell_is_python_and_keeps_torch_by_a_constraint():
    tree = ast.parse(hosted.INSTALL_CELL)
    assert tree.body
    assert "torch=={version('torch')}" in hosted.INSTALL_CELL, "pip's version, not torch.__version__"
    assert '"-c", keep.name' in hosted.INSTALL_CELL
    assert "COURSE = '/opt/course'" in hosted.install_cell("/opt/course")
    with pytest.raises(TypeError, match="path string"):
        hosted.install_cell("")


def test_the_install_cell_runs_pip_with_the_constraint(tmp_path, monkeypatch):
    import subprocess
    from importlib.metadata import version
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, check: calls.append(cmd))
    monkeypatch.setattr(sys, "path", list(sys.path))
    exec(hosted.install_cell(str(tmp_path)), {})
    (cmd,) = calls
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"] and cmd[-2:] == ["-e", str(tmp_path)]
    assert Path(cmd[cmd.index("-c") + 1]).read_text() == f"torch=={version('torch')}\n"
    assert sys.path[0] == str(tmp_path)


def test_torch_kept():
    hosted.torch_kept("2.14.1", "2.14.1")
    with pytest.raises(AssertionError, match="2.14.1 -> 2.13.0"):
        hosted.torch_kept("2.14.1", "2.13.0")
    with pytest.raises(TypeError, match="torch version string"):
        hosted.torch_kept(None, "2.14.1")


def test_readme_shows_the_install_cell():
    assert hosted.INSTALL_CELL.strip() in (ROOT / "README.md").read_text()


def _compat():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import compat
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return compat


def test_compat_constraints_swap_only_the_torch_pin():
    compat = _compat()
    text = "# pins\nnumpy==2.4.6\ntorch==2.13.0\ntorchao==0.18.0\n"
    assert compat.constraints_without_torch(text, "2.14.1") == "# pins\nnumpy==2.4.6\ntorchao==0.18.0\ntorch==2.14.1\n"
    with pytest.raises(ValueError, match="look like 2.14.1"):
        compat.constraints_without_torch(text, "latest")
    assert compat.lesson_notebooks(["04", 5]) == [L04.notebook, next(l for l in LESSONS if l.number == 5).notebook]
    with pytest.raises(ValueError, match="no lesson '99'"):
        compat.lesson_notebooks(["99"])
