"""The grader's second line of defence: did the learner's code change the kernel around a check?

No grade depends on this module. A check's verdict is reached outside the kernel, by value
(:mod:`amp_edu.course.judge`): the kernel only runs the check's *plan*, which calls the learner's
functions and writes what they returned to a file of plain values. A learner who patches torch, a
builtin or the plan itself can at most change what the plan writes — which is no more than a
wrong (or right) answer of their own. What this guard adds is a *report*: a notebook that rewires
the machinery is marked ``tampered`` (never ``pass``) and the finding is named, so an instructor
sees the attempt even where it gained nothing.

1. **Before the learner's first cell**, :func:`install` (run by the grader in the fresh kernel)
   creates a :class:`Guard` holding the plan runner and takes a :meth:`Guard.snapshot`: the
   identity of every ``amp_edu`` module in ``sys.modules``, of every function and class in them
   (and of each function's code, defaults and closure), of every builtin, of torch's functions and
   ``Tensor`` methods, of the IPython machinery that evaluates the check (its transformers, the
   shell's and kernel's methods), and of the trace/profile hooks. The grader keeps that snapshot.
2. **A check cell is not run from its source.** The grader evaluates the plan through the kernel
   protocol's ``user_expressions`` — plain ``eval``, which no input or AST transformer sees —
   calling the runner the guard holds (``guard.run(plan_module, plan, inputs, outputs, decode)``).
   A snapshot is taken right before and right after.
3. **The grader compares** (:func:`changes`) each snapshot with the first one, on its own side:
   anything replaced is a *finding* ("builtins.isinstance was replaced", ...) and the notebook's
   checks are ``tampered``.

Outside the kernel, where learner code cannot reach, :func:`tree_digest` hashes the course package
and the submissions before and after each notebook (the class grader compares them).

The guard lives in the kernel, so code written against it can fake its snapshots; that changes a
report, not a grade.
"""

from __future__ import annotations

import builtins
import hashlib
import inspect
import json
import os
import sys
import types
from pathlib import Path

# The guard's own builtins, bound when the grader imports this module (before any learner code), so a
# notebook that patches ``builtins.isinstance`` is reported instead of breaking the snapshot.
from builtins import (any, callable, dict, getattr, id, isinstance, len, list, map, next,  # noqa: E402,A004
                      range, sorted, str, type, vars)

HANDLE = "_amp_edu_grader_"          # + a random token: the guard's name in the learner's namespace


def _fn_id(fn) -> str:
    """Identity of a function and of what it runs: its code, defaults and closure contents."""
    parts = [id(fn), id(getattr(fn, "__code__", None)), id(getattr(fn, "__defaults__", None)),
             id(getattr(fn, "__kwdefaults__", None)), id(getattr(fn, "__globals__", None))]
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            parts.append(id(cell.cell_contents))
        except ValueError:              # an empty cell
            parts.append(0)
    return ":".join(map(str, parts))


def _value_id(v) -> str:
    if isinstance(v, types.FunctionType):
        return _fn_id(v)
    if isinstance(v, (staticmethod, classmethod)):
        return f"{id(v)}:{_value_id(v.__func__)}"
    if isinstance(v, property):
        return ":".join(str(id(f)) for f in (v, v.fget, v.fset, v.fdel))
    return str(id(v))


def _unwrap(v, library: str, depth: int = 8):
    """Follow ``__wrapped__`` through wrappers whose code is in ``library``'s own files."""
    for _ in range(depth):
        if not isinstance(v, types.FunctionType):
            break
        inner = v.__dict__.get("__wrapped__")
        if inner is None or not v.__code__.co_filename.startswith(library):
            break
        v = inner
    return v


def _watched(v) -> bool:
    """What a check can call or look up: functions, classes, modules, descriptors, builtins."""
    return callable(v) or isinstance(v, (types.ModuleType, staticmethod, classmethod, property))


def _ours(name: str) -> bool:
    return name == "amp_edu" or name.startswith("amp_edu.")


class Guard:
    """Runs the check plans and takes snapshots; created by :func:`install` before any learner code."""

    def __init__(self, shell):
        self._shell = shell
        from amp_edu.plans import registry, runner      # before any learner code runs

        self._runner, self._plans = runner, registry
        self._run = self._runner.run
        self._keep: list = []           # what a snapshot names stays alive, so no id is reused
        self._torch_dir: str | None = None

    def run(self, plan_module: str, plan_name: str, inputs: str, outputs: str, *learner) -> None:
        """Run the plan ``plan_module.plan_name`` on the learner's functions (:func:`amp_edu.plans.runner.run`)."""
        self._run(self._plans.plan(plan_module, plan_name), inputs, outputs, *learner)

    # -- snapshots -----------------------------------------------------------------------------
    def _add(self, out: dict, key: str, value) -> None:
        self._keep.append(value)
        out[key] = _value_id(value)

    def _module(self, out: dict, name: str, mod) -> None:
        self._add(out, f"sys.modules[{name!r}]", mod)
        out[f"file {name}"] = str(getattr(mod, "__file__", None))
        mdict = getattr(mod, "__dict__", {})
        self._add(out, f"{name}.__builtins__", mdict.get("__builtins__"))
        for attr, v in list(mdict.items()):
            if attr.startswith("__") or not _watched(v):
                continue
            self._add(out, f"{name}.{attr}", v)
            if isinstance(v, type) and _ours(getattr(v, "__module__", "") or ""):
                for meth, m in list(vars(v).items()):
                    if _watched(m) and not meth.startswith("__dict"):
                        self._add(out, f"{name}.{attr}.{meth}", m)

    def _object(self, out: dict, label: str, obj, library: str = "") -> None:
        """Every watched attribute of ``obj`` — of a class, every one it has, inherited ones too
        (an override added to ``torch.Tensor`` hides ``TensorBase``'s); ``library``: a folder whose
        own wrappers are seen through (torch wraps some of its functions when a submodule is first
        imported: ``torch._dynamo`` replaces ``torch.manual_seed`` by a ``functools.wraps`` wrapper)."""
        if isinstance(obj, type):
            items = [(a, inspect.getattr_static(obj, a, None)) for a in dir(obj)]
        else:
            items = list(vars(obj).items())
        for attr, v in items:
            if _watched(v):
                self._add(out, f"{label}.{attr}", _unwrap(v, library) if library else v)

    def snapshot(self) -> str:
        """Everything a check depends on, as ``{what: identity}`` in JSON (compared by the grader).
        A patch that makes this raise (the JSON encoder calls ``isinstance`` too) is reported by
        the grader as a failed snapshot: tampered as well."""
        self._keep = []
        out: dict[str, str] = {}
        for name, mod in sorted(sys.modules.items()):
            if _ours(name) and mod is not None:
                self._module(out, name, mod)
        self._add(out, "the plan runner", self._run)
        self._add(out, "sys.modules['builtins']", sys.modules.get("builtins"))
        self._add(out, "builtins.__dict__", builtins.__dict__)
        for attr, v in list(vars(builtins).items()):
            if attr not in _BUILTINS_THAT_CHANGE:
                self._add(out, f"builtins.{attr}", v)
        torch = sys.modules.get("torch")
        if torch is not None:
            if self._torch_dir is None:       # found once, in the first (trusted) snapshot
                self._torch_dir = os.path.dirname(torch.__file__) + os.sep
            lib = self._torch_dir
            self._object(out, "torch", torch, lib)
            for sub in ("torch.nn.functional", "math", "operator"):
                if sys.modules.get(sub) is not None:
                    self._object(out, sub, sys.modules[sub], lib)
            for cls in (torch.Tensor, getattr(torch._C, "TensorBase", None)):
                if cls is not None:
                    self._object(out, f"{cls.__module__}.{cls.__name__}", cls, lib)
        for label, fn in (("sys.gettrace()", sys.gettrace()), ("sys.getprofile()", sys.getprofile())):
            self._add(out, label, fn)
        for cls in type(self).__mro__[:-1]:
            self._object(out, f"grader {cls.__name__}", cls)
        shell = self._shell
        if shell is not None:
            for attr in ("input_transformers_cleanup", "input_transformers_post", "ast_transformers"):
                seq = list(getattr(shell, attr, []) or [])
                self._keep.extend(seq)
                out[f"IPython {attr}"] = ",".join(str(id(t)) for t in seq)
            for obj in (shell, getattr(shell, "kernel", None), getattr(getattr(shell, "kernel", None), "session", None)):
                if obj is None:
                    continue
                for cls in type(obj).__mro__[:-1]:
                    self._object(out, f"{cls.__module__}.{cls.__qualname__}", cls)
                for attr, v in list(vars(obj).items()):            # an instance attribute hiding a method
                    if callable(v) and any(attr in vars(c) for c in type(obj).__mro__[:-1]):
                        self._add(out, f"{type(obj).__name__} instance .{attr}", v)
        return json.dumps(out, sort_keys=True)


# Names the interactive machinery itself rebinds while cells run (IPython's display hook sets ``_``).
_BUILTINS_THAT_CHANGE = frozenset({"_", "__", "___"})


def install(shell, token: str) -> Guard:
    """Create the guard in a fresh kernel and bind it as ``_amp_edu_grader_<token>`` there."""
    guard = Guard(shell)
    (shell.user_ns if shell is not None else globals())[HANDLE + token] = guard
    return guard


# -- the grader's side ------------------------------------------------------------------------
def changes(base: dict, now: dict) -> list[str]:
    """What changed between two snapshots, in words (empty when nothing did)."""
    found = []
    modules = sorted((k[len("sys.modules['"):-len("']")] for k in base if k.startswith("sys.modules['")),
                     key=len, reverse=True)
    swapped = {m for m in modules if now.get(f"sys.modules[{m!r}]") != base[f"sys.modules[{m!r}]"]}

    def owner(key: str) -> str | None:          # the module an attribute key belongs to
        if key.startswith("file "):
            return key[len("file "):]
        return next((m for m in modules if key.startswith(m + ".")), None)

    for key, was in base.items():
        got = now.get(key)
        if owner(key) in swapped:
            continue                     # a module swapped whole: said once, not per function
        if got == was:
            continue
        if got is None:
            found.append(f"{key} was removed")
        elif key.startswith("file "):
            found.append(f"{key.split(' ', 1)[1]} now comes from {got} (was {was})")
        elif key.startswith("IPython "):
            found.append(f"the notebook changed IPython's {key.split(' ', 1)[1]} (code is rewritten before it runs)")
        else:
            found.append(f"{key} was replaced")
    return sorted(dict.fromkeys(found))


def tree_digest(root, *, skip_dirs=("__pycache__",)) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root`` (hidden files included); an
    unreadable file's digest is the error, so a change of permissions shows too."""
    root = Path(root)
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip_dirs)
        for f in sorted(filenames):
            p = Path(dirpath) / f
            rel = str(p.relative_to(root))
            try:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            except OSError as exc:
                out[rel] = f"unreadable: {exc.strerror}"
    return out


def tree_changes(before: dict[str, str], after: dict[str, str], where: str) -> list[str]:
    """``["amp_edu/checks/l06.py was changed", ...]`` for files changed, added or removed."""
    out = []
    for rel in sorted(before.keys() | after.keys()):
        if rel not in after:
            out.append(f"{where}/{rel} was removed")
        elif rel not in before:
            out.append(f"{where}/{rel} was added")
        elif before[rel] != after[rel]:
            out.append(f"{where}/{rel} was changed")
    return out
