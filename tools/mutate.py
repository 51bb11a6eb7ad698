"""Mutation testing for the exercise graders: do they reject answers nobody wrote down?

A grader is tested by hand with a list of plausible wrong answers; such lists run out. This tool
writes the wrong answers systematically. For each solution notebook ``solutions/NN_*.ipynb`` it

1. finds the answer functions: every function whose body holds a ``### BEGIN SOLUTION`` ...
   ``### END SOLUTION`` block (only the statements between the markers, the learner's part, are
   mutated; nested helper functions inside the block too);
2. makes one *mutant* per small change of that code (:data:`OPERATORS`): arithmetic, comparison
   and boolean operators, constants (±1, ×2, 0), dtypes (float16/bfloat16/float32/float64 and
   ``.half()``/``.float()``/...), dropped statements, dropped casts and method calls, in-place
   methods made out-of-place, swapped and dropped arguments (keyword handling), ``if``/``with``/
   ``try``/``finally`` removed, ``while`` run once, swapped function names (``any``/``all``,
   ``isinf``/``isnan``/``isfinite``, ...);
3. runs each mutant through the notebook's own check cells (``# CHECK: ...``) in a worker
   process, the function's own check first: a check that fails kills the mutant. Each mutant has
   a time limit (an interval timer inside the worker, and a hard limit after which the parent
   kills the worker and starts a new one), so a mutant that loops or hangs cannot stop the sweep;
   the limit is a multiple of the time the solution itself took through the checks in the same
   run (:data:`RELATIVE_LIMIT`), so it follows the machine's speed and load;
4. reports per exercise: killed, survived, and *equivalent*. A surviving mutant counts as
   equivalent only when ``tools/mutation_equivalents.py`` claims it with a reason and a documented
   input set, and the original and the mutant give identical results (return value and every
   argument after the call, bit for bit) on every input of that set — checked on every run.
   Anything else that survives is a gap in the grader: add a case that rejects it.

Usage (from the checkout root)::

    .venv/bin/python tools/mutate.py                 # every solution notebook
    .venv/bin/python tools/mutate.py 01 05 --survivors --json /tmp/mutation.json
    .venv/bin/python tools/mutate.py 05 --function autocast_args --list   # only list the mutants

Exit status: 0 when every mutant of the chosen exercises is killed or proven equivalent, 1 when
some survive (or a claimed equivalence is refuted, or a solution fails its own checks), 2 for bad
usage.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import dataclasses
import io
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from amp_edu.course.cells import BEGIN, END      # the solution blocks' marker lines (one owner)

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"

# ------------------------------------------------------------------------------------------------
# reading a solution notebook


@dataclasses.dataclass
class Answer:
    """One answer function: the cell that defines it and its solution block's lines."""
    name: str
    cell: int
    first: int          # first line inside the solution block (1-based, in the cell)
    last: int           # last line inside it


@dataclasses.dataclass
class Exercise:
    lesson: str                       # "05"
    path: Path
    sources: dict[int, str]           # code cell index -> source
    setup: list[int]                  # cells whose imports / defs / constant assignments build the namespace
    answers: list[Answer]
    checks: list[tuple[int, str]]     # (cell index, check name), in notebook order
    own_check: dict[str, str]         # answer function -> the check that follows its cell


def _keep(stmt: ast.stmt) -> bool:
    """What the namespace needs from a cell: imports, definitions, constant assignments — not the
    cells' demonstrations (training runs, prints, a check of the broken example)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
        return True
    return isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant)


def definitions(source: str) -> str:
    """The cell reduced to what :func:`_keep` keeps, as source."""
    tree = ast.parse(source)
    tree.body = [s for s in tree.body if _keep(s)]
    return ast.unparse(tree)


def load(lesson_or_path: str | Path) -> Exercise:
    path = Path(lesson_or_path)
    if not path.suffix:
        found = sorted(SOLUTIONS.glob(f"{lesson_or_path}_*.ipynb"))
        if not found:
            raise ValueError(f"no solution notebook solutions/{lesson_or_path}_*.ipynb")
        path = found[0]
    nb = json.loads(path.read_text())
    sources: dict[int, str] = {}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            src = cell["source"]
            sources[i] = "".join(src) if isinstance(src, list) else src
    answers, checks, setup, own = [], [], [], {}
    pending: list[str] = []
    for i, src in sources.items():
        first = src.lstrip().splitlines()[0] if src.strip() else ""
        if first.startswith("# CHECK:"):
            name = first.split(":", 1)[1].strip()
            checks.append((i, name))
            for fn in pending:
                own[fn] = name
            pending = []
            continue
        setup.append(i)
        lines = src.splitlines()
        marks = [n for n, line in enumerate(lines, 1) if line.strip() in (BEGIN, END)]
        if not marks:
            continue
        tree = ast.parse(src)
        for stmt in tree.body:
            if not isinstance(stmt, ast.FunctionDef):
                continue
            # the BEGIN marker is inside the def; the END marker, a comment, may follow its last line
            begins = [n for n in marks if stmt.lineno <= n <= stmt.end_lineno and lines[n - 1].strip() == BEGIN]
            if begins:
                end = next(n for n in marks if n > begins[0] and lines[n - 1].strip() == END)
                answers.append(Answer(stmt.name, i, begins[0] + 1, end - 1))
                pending.append(stmt.name)
    return Exercise(path.name[:2], path, sources, setup, answers, checks, own)


# ------------------------------------------------------------------------------------------------
# the mutation operators

_BINOP_SWAPS = {ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.Div], ast.Div: [ast.Mult, ast.FloorDiv],
                ast.FloorDiv: [ast.Div], ast.Pow: [ast.Mult], ast.Mod: [ast.FloorDiv], ast.MatMult: [ast.Mult],
                ast.BitAnd: [ast.BitOr], ast.BitOr: [ast.BitAnd]}
_NONCOMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Pow, ast.Mod, ast.MatMult)
_CMP_SWAPS = {ast.Lt: [ast.LtE, ast.Gt], ast.LtE: [ast.Lt, ast.GtE], ast.Gt: [ast.GtE, ast.Lt],
              ast.GtE: [ast.Gt, ast.LtE], ast.Eq: [ast.NotEq], ast.NotEq: [ast.Eq], ast.Is: [ast.IsNot],
              ast.IsNot: [ast.Is], ast.In: [ast.NotIn], ast.NotIn: [ast.In]}
_DTYPES = ["float16", "bfloat16", "float32", "float64"]
_CAST_METHODS = ["half", "bfloat16", "float", "double"]
_DROPPABLE_METHODS = {"to", "float", "double", "half", "bfloat16", "detach", "clone", "contiguous", "abs",
                      "item", "reshape", "flatten", "float", "reciprocal", "max", "sum", "all", "any"}
_DROPPABLE_BUILTINS = {"abs", "float", "int", "bool", "list", "tuple"}
_NAME_SWAPS = {"any": ["all"], "all": ["any"], "min": ["max"], "max": ["min"], "isfinite": ["isinf", "isnan"],
               "isinf": ["isnan", "isfinite"], "isnan": ["isinf", "isfinite"], "floor": ["ceil", "round"],
               "ceil": ["floor"], "amax": ["amin"], "amin": ["amax"], "sum": ["mean"], "mean": ["sum"],
               "enable_grad": ["no_grad"], "no_grad": ["enable_grad"]}


def _num_variants(v):
    out = []
    for w in (v + 1, v - 1, v * 2, 0 * v):
        if w != v and type(w) is type(v) and w not in out:
            out.append(w)
    return out


def _expr_mutants(node: ast.AST, strings: list[str]):
    """(operator name, replacement node) for one expression node."""
    if isinstance(node, ast.BinOp):
        for op in _BINOP_SWAPS.get(type(node.op), []):
            yield "operator", ast.BinOp(node.left, op(), node.right)
        if isinstance(node.op, _NONCOMMUTATIVE):
            yield "swap operands", ast.BinOp(node.right, node.op, node.left)
        if isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Pow)):
            yield "drop operand", node.left
            if not isinstance(node.op, ast.Pow):
                yield "drop operand", node.right
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        yield "drop unary", node.operand
    elif isinstance(node, ast.BoolOp):
        other = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield "boolean operator", ast.BoolOp(other(), node.values)
        for i in range(len(node.values)):
            rest = node.values[:i] + node.values[i + 1:]
            yield "drop condition", rest[0] if len(rest) == 1 else ast.BoolOp(node.op, rest)
    elif isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            for new in _CMP_SWAPS.get(type(op), []):
                ops = list(node.ops)
                ops[i] = new()
                yield "comparison", ast.Compare(node.left, ops, node.comparators)
    elif isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool):
            yield "constant", ast.Constant(not v)
        elif isinstance(v, (int, float)):
            for w in _num_variants(v):
                yield "constant", ast.Constant(w)
        elif isinstance(v, str):
            for s in strings:
                if s != v:
                    yield "constant", ast.Constant(s)
    elif isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "torch" and node.attr in _DTYPES:
            for d in _DTYPES:
                if d != node.attr:
                    yield "dtype", ast.Attribute(node.value, d, node.ctx)
        for new in _NAME_SWAPS.get(node.attr, []):
            yield "function", ast.Attribute(node.value, new, node.ctx)
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        for new in _NAME_SWAPS.get(node.id, []):
            yield "function", ast.Name(new, node.ctx)
    elif isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute):
            if f.attr in _CAST_METHODS and not node.args:
                for m in _CAST_METHODS:
                    if m != f.attr:
                        yield "dtype", ast.Call(ast.Attribute(f.value, m, f.ctx), [], node.keywords)
            if f.attr in _DROPPABLE_METHODS:
                yield "drop call", f.value
            if f.attr.endswith("_") and not f.attr.startswith("_"):
                yield "not in place", ast.Call(ast.Attribute(f.value, f.attr[:-1], f.ctx), node.args, node.keywords)
        elif isinstance(f, ast.Name) and f.id in _DROPPABLE_BUILTINS and len(node.args) == 1 and not node.keywords:
            yield "drop call", node.args[0]
        pos = node.args
        for i in range(len(pos) - 1):
            if not isinstance(pos[i], ast.Starred) and not isinstance(pos[i + 1], ast.Starred):
                args = list(pos)
                args[i], args[i + 1] = args[i + 1], args[i]
                yield "swap arguments", ast.Call(f, args, node.keywords)
        for i in range(len(node.keywords)):
            yield "drop keyword", ast.Call(f, pos, node.keywords[:i] + node.keywords[i + 1:])
    elif isinstance(node, ast.IfExp):
        yield "conditional", node.body
        yield "conditional", node.orelse
        yield "conditional", ast.IfExp(node.test, node.orelse, node.body)
    elif isinstance(node, ast.Dict) and len(node.keys) >= 2:
        for i in range(len(node.keys)):
            yield "drop entry", ast.Dict(node.keys[:i] + node.keys[i + 1:], node.values[:i] + node.values[i + 1:])
    elif isinstance(node, ast.Tuple) and isinstance(node.ctx, ast.Load) and len(node.elts) >= 2:
        for i in range(len(node.elts)):
            yield "drop element", ast.Tuple(node.elts[:i] + node.elts[i + 1:], node.ctx)


def _stmt_mutants(node: ast.stmt):
    """(operator name, replacement statement list) for one statement."""
    if not isinstance(node, ast.Pass):
        yield "drop statement", []
    if isinstance(node, ast.If):
        yield "if: always", node.body
        yield "if: never", node.orelse
    elif isinstance(node, ast.While):
        yield "while: once", [ast.If(node.test, node.body, node.orelse)]
    elif isinstance(node, ast.With):
        yield "drop with", node.body
    elif isinstance(node, ast.Try):
        if node.finalbody:
            yield "drop finally", node.body + node.orelse
            yield "finally not guaranteed", node.body + node.orelse + node.finalbody
        if node.handlers:
            yield "drop except", node.body + node.orelse + node.finalbody
    elif isinstance(node, ast.AugAssign):
        for op in _BINOP_SWAPS.get(type(node.op), []):
            yield "operator", [ast.AugAssign(node.target, op(), node.value)]
    elif isinstance(node, ast.Return) and node.value is not None:
        yield "return None", [ast.Return(None)]


@dataclasses.dataclass
class Mutant:
    lesson: str
    function: str
    line: int            # line in the solution cell
    operator: str
    original: str        # the changed node before ...
    replacement: str     # ... and after
    cell: int
    source: str          # the mutated cell, definitions only
    nth: int = 1         # the nth mutant with this function, line, operator, original and replacement

    @property
    def key(self) -> tuple:
        """How tools/mutation_equivalents.py names a mutant (line = line in the solution block)."""
        return (self.function, self.line, self.operator, self.original, self.replacement, self.nth)

    def describe(self) -> str:
        nth = f" (#{self.nth})" if self.nth > 1 else ""
        return (f"{self.function} line {self.line} [{self.operator}]: {self.original!r} -> "
                f"{self.replacement!r}{nth}")


def _children(node):
    """(parent, field, index, child) for every child, index None for a single-node field."""
    for field, value in ast.iter_fields(node):
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, ast.AST):
                    yield node, field, i, item
        elif isinstance(value, ast.AST):
            yield node, field, None, value


def _walk(node, path=()):
    for parent, field, i, child in _children(node):
        p = path + ((field, i),)
        yield p, parent, child
        yield from _walk(child, p)


def _at(tree, path):
    node = tree
    for field, i in path[:-1]:
        node = getattr(node, field) if i is None else getattr(node, field)[i]
    return node


def _short(node_or_list) -> str:
    if isinstance(node_or_list, list):
        if not node_or_list:
            return "<removed>"
        text = "\n".join(ast.unparse(n) for n in node_or_list)
    else:
        text = ast.unparse(node_or_list)
    lines = text.splitlines()
    return lines[0] + (" ..." if len(lines) > 1 else "")


def mutants(ex: Exercise, function: str | None = None) -> list[Mutant]:
    """Every distinct mutant of the exercise's answer functions (of ``function`` only if given)."""
    out, seen = [], set()
    for ans in ex.answers:
        if function and ans.name != function:
            continue
        # line numbers: mutate the full cell's tree, then keep its definitions
        tree = ast.parse(ex.sources[ans.cell])
        original = definitions(ast.unparse(tree))
        fn = next(s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == ans.name)
        strings = sorted({n.value for n in ast.walk(fn) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                          and ans.first <= n.lineno <= ans.last and len(n.value) < 20 and n.value.isidentifier()})
        for path, parent, node in list(_walk(tree)):
            lineno = getattr(node, "lineno", None)
            if lineno is None or not (ans.first <= lineno <= ans.last) or _inside_other(tree, path, ans.name):
                continue
            field, idx = path[-1]
            if isinstance(node, ast.stmt) and idx is not None:
                variants = [(op, new) for op, new in _stmt_mutants(node)]
            elif isinstance(node, ast.expr) and not (isinstance(node, ast.Constant) and _is_docstring(parent, node)):
                variants = [(op, new) for op, new in _expr_mutants(node, strings)]
                if isinstance(getattr(node, "ctx", None), (ast.Store, ast.Del)):
                    variants = []
            else:
                variants = []
            for op, new in variants:
                t2 = copy.deepcopy(tree)
                par = _at(t2, path)
                if isinstance(node, ast.stmt):
                    body = getattr(par, field)
                    body[idx:idx + 1] = copy.deepcopy(new)
                    if not body:
                        body.append(ast.Pass())
                else:
                    rep = copy.deepcopy(new)
                    if idx is None:
                        setattr(par, field, rep)
                    else:
                        getattr(par, field)[idx] = rep
                ast.fix_missing_locations(t2)
                try:
                    text = definitions(ast.unparse(t2))
                    compile(text, "<mutant>", "exec")
                except (SyntaxError, ValueError, TypeError, AttributeError):
                    continue
                if text == original or text in seen:
                    continue
                seen.add(text)
                m = Mutant(ex.lesson, ans.name, lineno - ans.first + 1, op, _short(node), _short(new), ans.cell, text)
                m.nth = 1 + sum(o.key[:5] == m.key[:5] for o in out)
                out.append(m)
    return out


def _inside_other(tree, path, name) -> bool:
    """True unless ``path`` lies inside the top-level function ``name``."""
    field, i = path[0]
    top = getattr(tree, field)[i]
    return not (isinstance(top, ast.FunctionDef) and top.name == name)


def _is_docstring(parent, node) -> bool:
    return isinstance(parent, ast.Expr) and isinstance(node.value, str)


# ------------------------------------------------------------------------------------------------
# the worker: runs a mutant's checks in a process of its own

class MutantTimeout(BaseException):
    """Raised in the worker when a mutant runs out of time (a BaseException, so a grader's
    ``except Exception`` cannot turn it into an ordinary failure)."""


class Runner:
    """An exercise compiled once in a worker: the setup namespace, the answer cells, the checks."""

    def __init__(self, ex: Exercise):
        self.ex = ex
        self.base: dict = {"__name__": "__main__"}
        answer_cells = {a.cell for a in ex.answers}
        for i in ex.setup:
            if i not in answer_cells:
                exec(compile(definitions(ex.sources[i]), f"<cell {i}>", "exec"), self.base)
        self.codes = {c: compile(definitions(ex.sources[c]), f"<cell {c}>", "exec") for c in sorted(answer_cells)}
        self.checks = {n: compile(ex.sources[i], f"<check {n}>", "exec") for i, n in ex.checks}

    def namespace(self, replaced: dict[int, str] | None = None) -> dict:
        """A fresh namespace with every answer cell run, ``replaced`` cells by their mutant."""
        ns = dict(self.base)
        for cell, code in self.codes.items():
            if replaced and cell in replaced:
                code = compile(replaced[cell], "<mutant>", "exec")
            exec(code, ns)
        return ns

    def run(self, replaced: dict[int, str] | None, order: list[str], timeout_s: float) -> dict:
        """Run the checks named in ``order``; stop at the first that fails; ``timeout`` past
        ``timeout_s`` seconds."""
        def alarm(signum, frame):
            raise MutantTimeout()
        previous = signal.signal(signal.SIGALRM, alarm)
        name = "(definition)"
        t0 = time.monotonic()
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
            ns = self.namespace(replaced)
            for name in order:
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        exec(self.checks[name], ns)
                except AssertionError as exc:
                    return {"status": "killed", "by": name, "detail": str(exc)}
                except Exception as exc:  # noqa: BLE001 - a grader that crashes rejects the answer too
                    return {"status": "killed", "by": name,
                            "detail": f"the check raised {type(exc).__name__}: {exc}"}
        except MutantTimeout:
            return {"status": "timeout", "by": name, "detail": f"over {timeout_s:g} s"}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        return {"status": "survived", "by": "", "detail": "", "check_s": round(time.monotonic() - t0, 3)}


def worker_main() -> int:
    """Read JSON jobs from stdin, answer one JSON line each on the original stdout."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
    import torch
    torch.set_num_threads(1)
    runners: dict[str, Runner] = {}
    for line in sys.stdin:
        job = json.loads(line)
        replaced = {int(k): v for k, v in job["replaced"].items()}
        try:
            if job["nb"] not in runners:
                runners[job["nb"]] = Runner(load(job["nb"]))
            res = runners[job["nb"]].run(replaced, job["order"], job["timeout"])
        except BaseException as exc:  # noqa: BLE001 - a mutant that breaks the namespace itself
            res = {"status": "killed", "by": "(definition)", "detail": f"{type(exc).__name__}: {exc}"}
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        proto.write(json.dumps(res) + "\n")
        if res["status"] == "timeout":
            return 0          # threads a hung mutant left behind must not meet the next one
    return 0


class Worker:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker"], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})

    def run(self, job: dict, hard_s: float) -> dict:
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return {"status": "killed", "by": "(worker)", "detail": "the worker died"}
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(hard_s)
        sel.close()
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            if not ready:
                return {"status": "timeout", "by": "", "detail": f"hard limit {hard_s:.0f} s: worker killed"}
            return {"status": "killed", "by": "(worker)", "detail": "the worker process died (crash)"}
        res = json.loads(line)
        if res["status"] == "timeout":
            self.close()          # it is leaving anyway (threads a hung mutant started may remain): don't race it
        return res

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self):
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(Exception):
                f.close()


# ------------------------------------------------------------------------------------------------
# the sweep

RELATIVE_LIMIT = 4.0   # a mutant's time limit, in multiples of its solution's time through the same checks
FLOOR_S = 5.0          # ... but never under this many seconds (a cold cache, a load spike on a short check)


def _order(ex: Exercise, function: str) -> list[str]:
    own = ex.own_check.get(function)
    return ([own] if own else []) + [n for _, n in ex.checks if n != own]


def sweep(lessons, *, function=None, timeout_s=20.0, workers=2, progress=None,
          relative=RELATIVE_LIMIT, floor_s=FLOOR_S) -> list[dict]:
    """Run every mutant of the lessons through their checks; return one record per mutant, one
    ``baseline`` record per exercise (the unmutated solution must pass every check) and one record
    per equivalence claim of these lessons that matched no surviving mutant (a stale claim).

    The baselines run first. Each exercise's mutants then get a time limit of ``relative`` times
    the time its solution took through all its checks in this run (at least ``floor_s``, at most
    ``timeout_s``): a ratio measured side by side on the same machine, so a busy machine stretches
    both. A mutant still running then (in practice one that loops forever) is a ``timeout``,
    counted as killed and shown in its own column of :func:`table`."""
    exs = [load(lesson) for lesson in lessons]
    base_jobs = [({"nb": str(ex.path), "replaced": {}, "order": [n for _, n in ex.checks], "timeout": timeout_s * 3},
                  {"lesson": ex.lesson, "function": "(solution)", "mutant": "baseline", "key": None}) for ex in exs]
    pool = [Worker() for _ in range(max(1, workers))]
    found = {}
    try:
        records = _dispatch(pool, base_jobs, progress)
        limit = {r["lesson"]: min(timeout_s, max(floor_s, relative * r.get("check_s", timeout_s))) for r in records}
        jobs = []
        for ex in exs:
            for m in mutants(ex, function):
                jobs.append(({"nb": str(ex.path), "replaced": {str(m.cell): m.source},
                              "order": _order(ex, m.function), "timeout": limit[ex.lesson]},
                             {"lesson": m.lesson, "function": m.function, "mutant": m.describe(), "key": list(m.key)}))
                found[(m.lesson,) + m.key] = m
        records += _dispatch(pool, jobs, progress)
    finally:
        for w in pool:
            w.close()
    for r in records:
        if r["mutant"] == "baseline" and r["status"] == "survived":
            r["status"] = "passed"            # the unmutated solution passes every check
            r["limit_s"] = round(limit[r["lesson"]], 2)     # the time limit its mutants ran under
    return records + apply_claims(records, found, lessons, function)


def apply_claims(records, found, lessons, function=None) -> list[dict]:
    """Turn each survivor that ``mutation_equivalents.CLAIMS`` names into ``equivalent`` if the
    original and the mutant agree on the claim's whole input set; a survivor whose claim fails stays
    ``survived`` (with why); returns records for the claims that name no surviving mutant."""
    import torch
    from mutation_equivalents import CLAIMS, verify   # beside this file
    claims = {(c.lesson, c.function, c.line, c.operator, c.original, c.replacement, c.nth): c for c in CLAIMS
              if c.lesson in {str(x)[:2] for x in lessons} and (not function or c.function == function)}
    runners: dict = {}
    used = set()
    threads = torch.get_num_threads()
    # one thread, as the workers run the mutants (worker_main): the claims' inputs are small (a tiny model's
    # training runs at most), and on a busy machine more threads only wait on each other (lesson 14's claims
    # take 7x longer on two)
    torch.set_num_threads(1)
    try:
        for r in records:
            if not r["key"]:
                continue
            k = (r["lesson"],) + tuple(r["key"])
            if k not in claims:
                continue
            used.add(k)
            if r["status"] != "survived":
                r["claim"] = f"claimed equivalent, but {r['by']} tells it apart"
                continue
            m = found[k]
            runner = runners.get(m.lesson) or runners.setdefault(m.lesson, Runner(load(m.lesson)))
            ok, detail = verify(claims[k], runner.namespace()[m.function],
                                runner.namespace({m.cell: m.source})[m.function])
            r["status"], r["detail"] = ("equivalent", claims[k].reason) if ok else ("survived", f"claim refuted: {detail}")
    finally:
        torch.set_num_threads(threads)
    stale = []
    for k, c in claims.items():
        if k not in used:
            stale.append({"lesson": c.lesson, "function": c.function, "key": None, "claim": "stale",
                          "mutant": f"{c.function} line {c.line} [{c.operator}]: {c.original!r} -> {c.replacement!r}",
                          "status": "stale", "detail": "no mutant of the current solution matches this claim"})
    return stale


def _dispatch(pool, jobs, progress):
    """Hand the jobs to the workers, one thread per worker; start a new worker where one timed out
    or died."""
    import threading
    results: list = [None] * len(jobs)
    pending = list(range(len(jobs)))
    lock = threading.Lock()

    def serve(slot):
        while True:
            with lock:
                if not pending:
                    return
                j = pending.pop(0)
            job, meta = jobs[j]
            if not pool[slot].alive():
                pool[slot].close()
                pool[slot] = Worker()
            t0 = time.monotonic()
            res = pool[slot].run(job, job["timeout"] + 60.0)
            res["seconds"] = round(time.monotonic() - t0, 2)
            with lock:
                results[j] = {**meta, **res}
                if progress:
                    progress(results[j], sum(r is not None for r in results), len(jobs))

    threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in range(len(pool))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def table(records) -> str:
    """Per exercise and answer function: mutants, killed, survived, equivalent."""
    rows: dict = {}
    for r in records:
        if r["mutant"] == "baseline" or r["status"] == "stale":
            continue
        row = rows.setdefault((r["lesson"], r["function"]),
                              {"mutants": 0, "killed": 0, "timeout": 0, "survived": 0, "equivalent": 0})
        row["mutants"] += 1
        row["killed" if r["status"] == "timeout" else r["status"]] += 1
        row["timeout"] += r["status"] == "timeout"
    cols = ("mutants", "killed", "timeout", "survived", "equivalent")
    lines = [f"{'exercise':8} {'function':22} " + " ".join(f"{c:>10}" for c in cols)
             + "    (timeout: killed by the time limit, counted in killed)"]
    for lesson in sorted({k[0] for k in rows}):
        tot = dict.fromkeys(cols, 0)
        for (les, fn), row in sorted(rows.items()):
            if les != lesson:
                continue
            lines.append(f"{les:8} {fn:22} " + " ".join(f"{row[c]:10}" for c in cols))
            for k in tot:
                tot[k] += row[k]
        lines.append(f"{lesson:8} {'(all)':22} " + " ".join(f"{tot[c]:10}" for c in cols))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tools/mutate.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lessons", nargs="*", help="two-digit lesson numbers (default: every solution notebook)")
    ap.add_argument("--function", help="only the mutants of this answer function")
    ap.add_argument("--timeout", type=float, default=20.0,
                    help=f"most seconds per mutant (default 20); the limit is {RELATIVE_LIMIT:g}x the solution's "
                         f"time through the same checks, at least {FLOOR_S:g} s")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--json", help="write every record here")
    ap.add_argument("--survivors", action="store_true", help="print each surviving mutant")
    ap.add_argument("--list", action="store_true", help="only list the mutants, run nothing")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main()
    lessons = args.lessons or sorted(p.name[:2] for p in SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))
    try:
        exs = [load(les) for les in lessons]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for ex in exs:
            for m in mutants(ex, args.function):
                print(f"{ex.lesson} {m.describe()}")
        return 0
    t0 = time.monotonic()

    def progress(r, done, total):
        if (r["status"] == "survived") != (r["mutant"] == "baseline"):    # a survivor, or a failing solution
            print(f"[{done}/{total}] {r['lesson']} {r['status']}: {r['mutant']} {r.get('detail', '')[:80]}",
                  file=sys.stderr, flush=True)
        elif done % 25 == 0:
            print(f"[{done}/{total}] {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)

    records = sweep(lessons, function=args.function, timeout_s=args.timeout, workers=args.workers, progress=progress)
    print(table(records))
    bad = 0
    for r in records:
        if r["mutant"] == "baseline" and r["status"] != "passed":
            print(f"SOLUTION FAILS its checks: {r['lesson']}: {r['detail']}")
            bad += 1
        elif r.get("claim") and r["status"] != "equivalent":
            print(f"EQUIVALENCE CLAIM WRONG ({r['claim']}): {r['lesson']} {r['mutant']}")
            bad += 1
    surv = [r for r in records if r["status"] == "survived" and r["mutant"] != "baseline"]
    if args.survivors:
        for r in surv:
            print(f"SURVIVED {r['lesson']} {r['mutant']}")
    print(f"{len(surv)} surviving mutants in {time.monotonic() - t0:.0f} s "
          f"(per mutant at most {RELATIVE_LIMIT:g}x its solution's time, {FLOOR_S:g}-{args.timeout:g} s; "
          f"{args.workers} workers)")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 1 if surv or bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
