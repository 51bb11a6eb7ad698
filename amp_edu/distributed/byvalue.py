"""Send a function to a fresh Python process *by value*, so a rank can run code written in a
notebook cell.

``pickle`` sends a function **by name**: it writes ``module.qualname`` and the receiving process
imports the module and looks the name up. That works for ``amp_edu.distributed.basics.hello``,
and for a function of a script run as ``python train.py`` (a *spawned* child re-imports the
script as ``__mp_main__``). It cannot work for a function defined in a notebook cell: its
module is the kernel's ``__main__``, which exists only in the kernel, so a fresh process has
nothing to import it from. The same holds for a lambda or a function defined inside another
function.

There are two ways around that. ``accelerate.notebook_launcher`` *forks* the kernel
(``start_processes(..., start_method="fork")`` in accelerate's ``launchers.py``), so the child
inherits the function, along with the kernel's threads' locks in whatever state they were, and
fails if CUDA was initialised first. This module keeps the fresh (spawned) interpreter and sends
the function **by value** instead, as ``cloudpickle`` (which Ray uses) does:

* its **code object**, with :mod:`marshal` (the bytecode format of this very interpreter; the
  ranks run the same ``sys.executable``, so it loads unchanged);
* the **globals it reads** (the names its bytecode loads with ``LOAD_GLOBAL``, in it and in
  every function nested in it), each pickled in turn: a module as its name (the rank imports
  it), an importable function or class by name, another notebook function by value again,
  plain data as data;
* its defaults, keyword defaults, closure cells and ``__dict__``;
* the source lines of its cell (from :mod:`linecache`, where IPython keeps them), so a rank's
  traceback shows the lines of the cell that failed.

Functions from the same module share one globals dict on arrival, so two notebook functions
that call each other, or one that calls itself, still work. A function reaches the rank as it
was when :func:`dumps` ran: globals changed later in the notebook are not seen.

A class defined in the notebook is refused with a ``TypeError`` that says where to move it
(sending classes by value is what makes cloudpickle long); so is a value that cannot be
pickled, named by its global.
"""

from __future__ import annotations

import builtins
import dis
import importlib
import io
import linecache
import marshal
import os
import pickle
import sys
import types

__all__ = ["needs_value", "dumps", "loads", "CannotSend"]

_MAIN = ("__main__", "__mp_main__")
_GLOBAL_OPS = {"LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL"}
_EMPTY_CELL = "<amp_edu.byvalue: empty cell>"
_ARRIVED: dict[str, dict] = {}          # in the receiving process: one globals dict per sent module


class CannotSend(TypeError):
    """What :func:`dumps` raises for something a rank cannot receive; the message says what and why."""


def needs_value(fn: types.FunctionType) -> bool:
    """True when ``fn`` cannot be sent by name: defined in ``__main__`` (a notebook cell, or a
    script), a lambda, a function nested in another, or a name that does not lead back to it."""
    module = getattr(fn, "__module__", None)
    if module is None or module in _MAIN or "<locals>" in fn.__qualname__ or "<lambda>" in fn.__qualname__:
        return True
    target = sys.modules.get(module)
    for part in fn.__qualname__.split("."):
        target = getattr(target, part, None)
    return target is not fn


def _global_names(code: types.CodeType) -> set[str]:
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in _GLOBAL_OPS}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _source_lines(filename: str) -> list[str]:
    """The cell's lines, when the code was not read from a file a rank can open (a notebook cell)."""
    if os.path.exists(filename):
        return []
    return list(linecache.getlines(filename))


def _make_function(code, name, qualname, module, token, n_cells, filename, lines):
    """Receiving side, step 1: the function with empty globals and cells (filled by :func:`_fill`)."""
    g = _ARRIVED.setdefault(token, {"__builtins__": builtins, "__name__": module})
    if lines and filename not in linecache.cache:
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
    closure = None if n_cells is None else tuple(types.CellType() for _ in range(n_cells))
    fn = types.FunctionType(code, g, name, None, closure)
    fn.__qualname__, fn.__module__ = qualname, module
    return fn


def _fill(fn, state):
    """Receiving side, step 2: globals, defaults, cells. A separate step so that a function that
    refers to itself (recursion, through a global) finds itself in pickle's memo."""
    fn.__globals__.update(state["globals"])
    fn.__defaults__, fn.__kwdefaults__ = state["defaults"], state["kwdefaults"]
    for cell, value in zip(fn.__closure__ or (), state["closure"]):
        if value != _EMPTY_CELL:
            cell.cell_contents = value
    fn.__dict__.update(state["dict"])
    return fn


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        if isinstance(obj, types.FunctionType) and needs_value(obj):
            return self._function(obj)
        if isinstance(obj, types.CodeType):
            return marshal.loads, (marshal.dumps(obj),)
        if isinstance(obj, types.ModuleType):
            if obj.__name__ in _MAIN:
                raise CannotSend("the notebook's (or script's) __main__ module itself cannot be sent to a rank")
            return importlib.import_module, (obj.__name__,)
        if isinstance(obj, type) and obj.__module__ in _MAIN and not getattr(sys.modules.get("__main__"), "__file__", None):
            raise CannotSend(f"class {obj.__qualname__!r} is defined in the notebook, and a rank cannot import it: "
                            "move it into a module (a .py file next to the notebook) and import it from there")
        return NotImplemented

    def _function(self, fn):
        code = fn.__code__
        names = _global_names(code)
        g = {n: fn.__globals__[n] for n in sorted(names) if n in fn.__globals__}
        cells = []
        for cell in fn.__closure__ or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:                     # a cell not assigned yet
                cells.append(_EMPTY_CELL)
        token = f"{os.getpid()}:{id(fn.__globals__)}"
        n_cells = None if fn.__closure__ is None else len(fn.__closure__)
        args = (code, fn.__name__, fn.__qualname__, fn.__module__, token, n_cells, code.co_filename,
                _source_lines(code.co_filename))
        state = {"globals": g, "defaults": fn.__defaults__, "kwdefaults": fn.__kwdefaults__, "closure": cells,
                 "dict": dict(fn.__dict__)}
        return _make_function, args, state, None, None, _fill


def _culprit(fn) -> str:
    """On a pickling error: which global or closure value of ``fn`` (or of the values) failed."""
    if not isinstance(fn, types.FunctionType):
        return ""
    for n in sorted(_global_names(fn.__code__)):
        if n in fn.__globals__:
            try:
                _dump(fn.__globals__[n])
            except Exception as e:  # noqa: BLE001 - we are naming the failure
                return f" (global {n!r}, a {type(fn.__globals__[n]).__name__}: {e})"
    return ""


def _dump(obj) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def dumps(obj) -> bytes:
    """Pickle ``obj`` with functions that cannot be sent by name sent by value (see the module
    docstring). Raises :class:`CannotSend` (a ``TypeError``) naming what cannot be sent."""
    try:
        return _dump(obj)
    except CannotSend:
        raise
    except Exception as e:  # noqa: BLE001 - pickle raises several kinds; one clear error
        fn = obj[0] if isinstance(obj, tuple) and obj else obj
        raise CannotSend(f"cannot send {getattr(fn, '__qualname__', type(fn).__name__)} to the ranks: "
                        f"{type(e).__name__}: {e}{_culprit(fn)}") from e


def loads(data: bytes):
    """The inverse of :func:`dumps`, in the receiving process."""
    return pickle.loads(data)
