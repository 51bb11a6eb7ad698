"""The integrity guard's pieces in this process (fast: no kernel): snapshots see each kind of
change and nothing else, file trees are compared, and the sandbox choice is validated."""

from __future__ import annotations

import builtins
import json
import sys
import types

import pytest
import torch

import amp_edu.checks.core as core
import amp_edu.checks.l01 as l01
import amp_edu.plans.runner as runner
from amp_edu.course import integrity, sandbox


@pytest.fixture
def guard():
    g = integrity.Guard(None)
    return g, json.loads(g.snapshot())


def changes(g, base):
    return integrity.changes(base, json.loads(g.snapshot()))


def test_nothing_changed_is_nothing_found_even_after_torch_wraps_its_own(guard):
    g, base = guard
    import torch._dynamo  # noqa: F401 - wraps torch.manual_seed with functools.wraps on import
    x = torch.ones(3)
    assert torch.equal(x, x)
    assert changes(g, base) == []


@pytest.mark.parametrize("patch, found", [
    (lambda: setattr(l01, "check_decode", lambda f: None), "amp_edu.checks.l01.check_decode was replaced"),
    (lambda: setattr(runner.each, "__code__", (lambda c, f: None).__code__),
     "amp_edu.plans.runner.each was replaced"),
    (lambda: setattr(core, "same", lambda *a, **k: True), "amp_edu.checks.core.same was replaced"),
    (lambda: sys.modules.__setitem__("amp_edu.checks.l01", types.ModuleType("amp_edu.checks.l01")),
     "sys.modules['amp_edu.checks.l01'] was replaced"),
    (lambda: setattr(builtins, "isinstance", lambda o, t, _real=builtins.isinstance: t is float or _real(o, t)),
     "builtins.isinstance was replaced"),
    (lambda: setattr(torch, "equal", lambda a, b: True), "torch.equal was replaced"),
    (lambda: setattr(torch.Tensor, "__eq__", lambda a, b: True), "torch.Tensor.__eq__ was replaced"),
    (lambda: sys.settrace(lambda *a: None), "sys.gettrace() was replaced"),
], ids=["function", "code", "core", "sys.modules", "builtin", "torch", "Tensor", "settrace"])
def test_each_kind_of_patch_is_found_and_named(guard, patch, found):
    g, base = guard
    saved = (l01.check_decode, runner.each.__code__, core.same, sys.modules["amp_edu.checks.l01"],
             builtins.isinstance, torch.equal, torch.Tensor.__dict__.get("__eq__"), sys.gettrace())
    try:
        patch()
        assert found in changes(g, base)
    finally:
        sys.settrace(saved[7])
        l01.check_decode, core.same, builtins.isinstance, torch.equal = saved[0], saved[2], saved[4], saved[5]
        runner.each.__code__ = saved[1]
        sys.modules["amp_edu.checks.l01"] = saved[3]
        if saved[6] is None:
            torch.Tensor.__dict__.get("__eq__") and delattr(torch.Tensor, "__eq__")
        else:
            torch.Tensor.__eq__ = saved[6]
    assert changes(g, base) == []


def test_the_guard_runs_a_course_plan_with_the_runner_it_took(guard, tmp_path):
    from amp_edu.plans import byvalue

    g, _ = guard
    byvalue.save([(1.0,), (2.0,)], tmp_path / "in.bin")
    saved = runner.run
    try:
        runner.run = lambda *a: None                 # a later patch of the module changes nothing here
        g.run("amp_edu.plans.runner", "each", str(tmp_path / "in.bin"), str(tmp_path / "out.bin"), lambda x: x * 3)
    finally:
        runner.run = saved
    assert byvalue.load(tmp_path / "out.bin")["result"] == {"values": [3.0, 6.0], "raised": None}
    with pytest.raises(ValueError, match="not a course plan"):
        g.run("os", "system", "in", "out")


def test_tree_changes_name_added_removed_and_changed_files(tmp_path):
    (tmp_path / "a.py").write_text("x = 1")
    (tmp_path / "b.py").write_text("y = 1")
    before = integrity.tree_digest(tmp_path)
    (tmp_path / "a.py").write_text("x = 2")
    (tmp_path / "b.py").unlink()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.py").write_text("")
    assert integrity.tree_changes(before, integrity.tree_digest(tmp_path), "pkg") == [
        "pkg/a.py was changed", "pkg/b.py was removed", "pkg/sub/c.py was added"]


def test_sandbox_choice_is_validated():
    assert sandbox.choose("none").mode == "none"
    with pytest.raises(ValueError, match="auto"):
        sandbox.choose("docker")
    with pytest.raises(TypeError, match="sandbox"):
        sandbox.choose(None)
    iso = sandbox.choose("auto")
    assert iso.mode == ("none" if sandbox.bwrap_problem() else "bwrap")
    assert ("WITHOUT a sandbox" in sandbox.warning(iso)) == (not iso.sandboxed)
