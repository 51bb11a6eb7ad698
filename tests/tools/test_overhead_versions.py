"""tools/overhead_versions.py: a revision's package is extracted under its own name and imports
without touching the working tree's amp_edu (the benchmarks themselves are tested in test_bench*)."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("overhead_versions", ROOT / "tools" / "overhead_versions.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode,
                    reason="needs a git checkout")
def test_a_revision_is_its_own_package(tmp_path, monkeypatch):
    tool = _tool()
    tool.extract("HEAD", "amp_rev_test", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        pkg = importlib.import_module("amp_rev_test.autocast")
        scaler = importlib.import_module("amp_rev_test.scaler")
        import amp_edu.autocast
        assert pkg.autocast is not amp_edu.autocast.autocast          # a separate copy
        assert Path(pkg.__file__).is_relative_to(tmp_path)
        assert scaler.GradScaler.__module__.startswith("amp_rev_test.scaler")     # the copy's own class
    finally:
        for name in [m for m in sys.modules if m.startswith("amp_rev_test")]:
            del sys.modules[name]
