"""Installed without ``-e`` (``pip install .`` on a hosted runtime) the course still grades and runs
``doctor`` from any folder, and the authoring tools say that they need a checkout."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from amp_edu.course import exercises

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """What ``pip install .`` leaves: the ``amp_edu`` package (with its package data) in a
    site-packages folder, and nothing else of the repository."""
    site = tmp_path_factory.mktemp("site-packages")
    shutil.copytree(ROOT / "amp_edu", site / "amp_edu", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return site


def _run(args, site, cwd, timeout=120):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)           # the copy comes first, as site-packages would
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_checkout_is_found_from_the_package_and_from_inside_it(tmp_path):
    assert exercises.checkout_root() == ROOT
    fake_site = tmp_path / "site-packages"
    (fake_site / "amp_edu" / "course").mkdir(parents=True)
    # installed elsewhere, but run from a folder inside a clone: the clone is the checkout
    assert exercises.checkout_root(fake_site, cwd=ROOT / "notebooks") == ROOT


def test_an_installed_package_without_a_checkout_says_what_to_do(tmp_path, monkeypatch):
    fake_site, away = tmp_path / "site-packages", tmp_path / "home"
    (fake_site / "amp_edu" / "course").mkdir(parents=True)
    away.mkdir()
    with pytest.raises(RuntimeError, match=r"checkout of the course.*pip install -e \.") as e:
        exercises.checkout_root(fake_site, cwd=away)
    assert str(fake_site.resolve()) in str(e.value) and "grade" in str(e.value)
    monkeypatch.setattr(exercises, "ROOT", fake_site)
    monkeypatch.chdir(away)
    for fn in (exercises.generate, exercises.stale, exercises.expected_exercises):
        with pytest.raises(RuntimeError, match="checkout"):
            fn()


@pytest.mark.parametrize("toml, dirs, ok", [
    ('[project]\nname = "amp_edu"\n', ("solutions", "amp_edu"), True),
    ('[project]\nname = "other"\n', ("solutions", "amp_edu"), False),     # another project
    ('[project]\nname = "amp_edu"\n', ("amp_edu",), False),               # no solutions/
    (None, ("solutions", "amp_edu"), False),                             # no pyproject.toml
])
def test_is_checkout(tmp_path, toml, dirs, ok):
    for d in dirs:
        (tmp_path / d).mkdir()
    if "amp_edu" in dirs:
        (tmp_path / "amp_edu" / "__init__.py").write_text("")
    if toml is not None:
        (tmp_path / "pyproject.toml").write_text(toml)
    assert exercises.is_checkout(tmp_path) is ok


def test_doctor_runs_from_any_folder_when_installed_without_e(installed, tmp_path):
    where = _run(["-c", "import amp_edu; print(amp_edu.__file__)"], installed, tmp_path)
    assert where.stdout.strip() == str(installed / "amp_edu" / "__init__.py"), where.stderr
    r = _run(["-m", "amp_edu", "doctor"], installed, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "torch" in r.stdout.lower() and "Traceback" not in r.stderr


def test_authoring_tools_refuse_clearly_without_a_checkout(installed, tmp_path, monkeypatch, capsys):
    r = _run(["-m", "amp_edu", "exercises"], installed, tmp_path)
    assert r.returncode == 2 and "checkout of the course" in r.stderr and "Traceback" not in r.stderr
    from amp_edu.course import nbtool
    monkeypatch.setattr(exercises, "ROOT", installed)
    monkeypatch.chdir(tmp_path)
    nb = tmp_path / "x.ipynb"
    shutil.copy(ROOT / "notebooks" / "00_setup.ipynb", nb)
    assert nbtool.main(["run", str(nb), "--smoke"]) == 2
    assert "checkout of the course" in capsys.readouterr().err
    assert nb.read_bytes() == (ROOT / "notebooks" / "00_setup.ipynb").read_bytes(), "nothing was run"


def test_grade_runs_from_any_folder_when_installed_without_e(installed, tmp_path):
    """A learner's solved notebook, graded in a folder outside any checkout: every check passes,
    and the report says so (the one grading run of solution 01; nbval runs it as a notebook)."""
    nb = tmp_path / "01_number_formats.ipynb"
    shutil.copy(ROOT / "solutions" / "01_number_formats.ipynb", nb)
    r = _run(["-m", "amp_edu", "grade", "--smoke", str(nb)], installed, tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"(\d+)/\1 checks passed", r.stdout), r.stdout
