"""amp_edu.distributed.byvalue: functions a fresh process cannot import (a notebook cell's, a
lambda, a closure) survive the trip by value; what cannot be sent is refused by name."""

import math
import subprocess
import sys
import threading
import types

import pytest

from amp_edu.distributed import byvalue


CELL = '''
import math
import torch
from amp_edu.distributed import progress
SCALE = 3.0
def helper(x):
    return x * SCALE
def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)
def rank_fn(rank, world_size, n=4, *, k=2):
    return helper(rank) + fact(n) + k + math.floor(torch.ones(1).sum().item())
def failing(rank, world_size):
    x = 1
    raise ValueError(f"rank {rank} failed on purpose")
class Local:
    pass
def uses_class(rank, world_size):
    return Local()
'''


def notebook_namespace(source=CELL, filename="/tmp/ipykernel_0/123456.py"):
    """Run ``source`` as IPython runs a cell: a ``__main__`` namespace, the code compiled from a
    file name that does not exist, its lines in linecache."""
    import linecache
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    exec(compile(source, filename, "exec"), ns)
    return ns


def test_which_functions_go_by_value():
    ns = notebook_namespace()
    assert byvalue.needs_value(ns["rank_fn"])
    assert byvalue.needs_value(lambda r, w: r)
    assert not byvalue.needs_value(byvalue.dumps)                 # importable: by name

    def inner(r, w):
        return r
    assert byvalue.needs_value(inner)


def _in_fresh_python(payload: bytes, expr: str) -> str:
    """Unpickle ``payload`` in a new interpreter (nothing of this process's __main__ there)."""
    code = ("import sys, pickle; from amp_edu.distributed import byvalue; "
            "obj = byvalue.loads(sys.stdin.buffer.read()); print(" + expr + ")")
    out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode().strip()


def test_a_notebook_function_runs_in_a_fresh_interpreter_with_its_globals_recursion_and_defaults():
    ns = notebook_namespace()
    payload = byvalue.dumps((ns["rank_fn"], (5,)))
    # helper (another cell function) by value, SCALE as data, fact recursive, math/torch imported by name
    want = ns["rank_fn"](1, 2, 5)
    assert _in_fresh_python(payload, "obj[0](1, 2, *obj[1])") == repr(want)


def test_a_failing_cell_function_shows_its_cell_lines_in_the_traceback():
    ns = notebook_namespace()
    payload = byvalue.dumps(ns["failing"])
    code = ("import sys, traceback; from amp_edu.distributed import byvalue; "
            "f = byvalue.loads(sys.stdin.buffer.read())\n"
            "try:\n    f(0, 2)\nexcept ValueError:\n    print(traceback.format_exc())")
    out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, timeout=120)
    assert 'raise ValueError(f"rank {rank} failed on purpose")' in out.stdout.decode(), out
    assert "/tmp/ipykernel_0/123456.py" in out.stdout.decode()


def test_closures_lambdas_and_shared_globals():
    counter = {"n": 0}
    base = 10

    def closure(r, w):
        counter["n"] += 1
        return base + r

    f, g = byvalue.loads(byvalue.dumps((closure, lambda r, w: r * w)))
    assert f(1, 2) == 11 and g(3, 4) == 12
    ns = notebook_namespace()
    a, b = byvalue.loads(byvalue.dumps((ns["rank_fn"], ns["helper"])))
    assert a.__globals__ is b.__globals__                # one module, one globals dict on arrival


def test_a_class_defined_in_the_notebook_is_refused_with_where_to_move_it(monkeypatch):
    ns = notebook_namespace()
    fake_main = types.ModuleType("__main__")             # a kernel's __main__ has no __file__
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    with pytest.raises(TypeError, match="class 'Local' is defined in the notebook.*move it into a module"):
        byvalue.dumps(ns["uses_class"])


def test_an_unpicklable_global_is_named():
    ns = notebook_namespace("import threading\nLOCK = threading.Lock()\n"
                            "def locked(rank, world_size):\n    with LOCK:\n        return rank\n")
    with pytest.raises(TypeError, match=r"cannot send locked to the ranks: .*global 'LOCK'"):
        byvalue.dumps(ns["locked"])


def test_attribute_names_are_not_mistaken_for_globals():
    # `x.plot` reads the attribute 'plot', not the (unpicklable) global named plot
    ns = notebook_namespace("import threading\nplot = threading.Lock()\n"
                            "def f(rank, world_size):\n    import types\n    x = types.SimpleNamespace(plot=rank)\n"
                            "    return x.plot\n")
    assert byvalue.loads(byvalue.dumps(ns["f"]))(3, 4) == 3
    assert math.isfinite(1.0) and threading.active_count() >= 1
