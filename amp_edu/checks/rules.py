"""Rules an exercise states ("use plain tensor operations, not ``amp_edu.optim``"), enforced.

An exercise sometimes forbids the library function that *is* the answer — exercise 12's
``amp_edu.optim.stochastic_round``, exercise 13's ``comp.kernel_kind`` — because the check compares
with it. Comparing values cannot tell a learner's rounding from a call to the library's, so the
grader reads the code instead: :func:`violations` parses every code cell of a submission (``ast``)
and names each use of a forbidden name:

* ``from amp_edu.optim import stochastic_round`` (any alias), ``import amp_edu.optim as o`` then
  ``o.stochastic_round``, ``amp_edu.optim.stochastic_round``, ``from amp_edu import optim`` then
  ``optim.stochastic_round``, ``getattr(o, "stochastic_round")``;
* a rule with no names forbids the whole module: any import of it, or a string naming it (as
  ``importlib.import_module("amp_edu.optim")`` would need).

A use is a failure of the check the rule belongs to, naming the rule and the cell. What an AST scan
cannot see is code assembled at run time (``exec`` of a built string); the class grader reports
``exec``/``eval``/``compile`` of a non-literal string in an answer cell as a note for the instructor.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass

__all__ = ["Rule", "violations", "dynamic_code", "grader_internals", "GRADER_RULES"]


@dataclass(frozen=True)
class Rule:
    """Do not use ``names`` of ``module`` (all of ``module`` when ``names`` is empty, except the
    ``allowed`` names, ``fnmatch`` patterns: importing the module to use only those is no use);
    ``says`` is the rule as the exercise states it."""

    module: str
    names: tuple[str, ...] = ()
    says: str = ""
    allowed: tuple[str, ...] = ()

    def __post_init__(self):
        if not isinstance(self.module, str) or not re.fullmatch(r"[A-Za-z_][\w.]*", self.module):
            raise ValueError(f"Rule.module must be a dotted module name, got {self.module!r}")
        for field in ("names", "allowed"):
            value = getattr(self, field)
            if not isinstance(value, tuple) or not all(isinstance(n, str) for n in value):
                raise TypeError(f"Rule.{field} must be a tuple of strings")

    def allows(self, dotted: str) -> bool:
        """Is ``dotted`` the module itself, or does its last part match one of :attr:`allowed`?"""
        last = dotted.rpartition(".")[2]
        return bool(self.allowed) and (dotted == self.module or any(fnmatch.fnmatch(last, p) for p in self.allowed))

    def covers(self, dotted: str) -> bool:
        """Is ``dotted`` (a module, or module.attribute) this rule's module or inside it?"""
        return dotted == self.module or dotted.startswith(self.module + ".")


def _parse(source: str) -> ast.AST | None:
    """The cell's syntax tree; IPython's ``%magic`` / ``!shell`` lines are blanked first."""
    text = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines())
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _dotted(node) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else ``None``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


class _Scan(ast.NodeVisitor):
    def __init__(self, rule: Rule, aliases: dict[str, str]):
        self.rule, self.aliases, self.found = rule, aliases, []

    def _resolve(self, dotted: str) -> str:
        head, _, rest = dotted.partition(".")
        base = self.aliases.get(head, head)
        return f"{base}.{rest}" if rest else base

    def _use(self, full: str, how: str) -> None:
        r = self.rule
        if r.names:
            mod, _, name = full.rpartition(".")
            if name in r.names and r.covers(mod):
                self.found.append(how)
        elif r.covers(full) and not r.allows(full):
            self.found.append(how)

    def visit_Import(self, node):
        for a in node.names:
            self.aliases[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            if not self.rule.names and self.rule.covers(a.name) and not self.rule.allows(a.name):
                self.found.append(f"import {a.name}")

    def visit_ImportFrom(self, node):
        mod = node.module or ""
        for a in node.names:
            full = f"{mod}.{a.name}"
            self.aliases[a.asname or a.name] = full
            self._use(full, f"from {mod} import {a.name}")

    def visit_Attribute(self, node):
        dotted = _dotted(node)
        if dotted is not None:
            self._use(self._resolve(dotted), dotted)
        self.generic_visit(node)

    def _writes(self, target, how: str) -> None:
        """An assignment to an attribute of a forbidden module (``l01.check_decode = ...``) is a use
        even of an allowed name: it rewires the module instead of calling it."""
        dotted = _dotted(target)
        if dotted is not None and "." in dotted and not self.rule.names:
            full = self._resolve(dotted)
            if self.rule.covers(full.rpartition(".")[0]) or self.rule.covers(full) and full != self.rule.module:
                self.found.append(f"{how} {dotted.removesuffix('._')}")

    def visit_Assign(self, node):
        for t in node.targets:
            for el in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                self._writes(el, "assigns")
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._writes(node.target, "assigns")
        self.generic_visit(node)

    def visit_Delete(self, node):
        for t in node.targets:
            self._writes(t, "deletes")
        self.generic_visit(node)

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") and node.args:
            self._writes(ast.Attribute(value=node.args[0], attr="_"), node.func.id + " on")
        if isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            target = _dotted(node.args[0])
            if target is not None:
                self._use(f"{self._resolve(target)}.{node.args[1].value}", f"getattr({target}, {node.args[1].value!r})")
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str) and not self.rule.names and self.rule.module in node.value:
            self.found.append(f"the string {node.value[:60]!r}")


def violations(sources: list[tuple[str, str]], rules) -> list[str]:
    """``"<where>: <what> (<rule>)"`` for every use of a forbidden name in ``sources``, a list of
    ``(where, cell source)``. Imports made in one cell are known in the later ones."""
    out = []
    for rule in rules:
        aliases: dict[str, str] = {}
        for where, source in sources:
            tree = _parse(source)
            if tree is None:
                continue
            scan = _Scan(rule, aliases)
            scan.visit(tree)
            for how in dict.fromkeys(scan.found):
                out.append(f"{where}: {how} ({rule.says or 'not allowed in this exercise'})")
    return out


def dynamic_code(sources: list[tuple[str, str]]) -> list[str]:
    """Where ``exec``/``eval``/``compile``/``__import__`` get a non-literal argument: code an AST
    scan cannot read."""
    out = []
    for where, source in sources:
        tree = _parse(source)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("exec", "eval", "compile", "__import__") and node.args \
                    and not isinstance(node.args[0], ast.Constant):
                out.append(f"{where}: {node.func.id}() of code built at run time")
    return out


# What no answer needs, and every cheat on record used: the grader's own modules, loading code by
# file path, reading other frames or every live object, rewiring torch's dispatch or Python's hooks.
# In a cell the learner wrote (not one the exercise hands out) any of these marks the notebook
# ``tampered``: the values are judged outside the kernel either way; this names the attempt.
GRADER_RULES = (
    Rule("amp_edu.course", (), "the grader's machinery"),
    Rule("amp_edu.plans", (), "the grader's plans"),
    Rule("importlib.util", ("spec_from_file_location", "module_from_spec"), "loading code by file path"),
    Rule("importlib.machinery", (), "loading code by file path"),
    Rule("runpy", (), "running code by file path"),
    Rule("sys", ("_getframe", "settrace", "setprofile", "meta_path", "modules"), "reading frames or rewiring imports"),
    Rule("inspect", ("currentframe", "stack", "getouterframes", "getsource"), "reading other frames"),
    Rule("gc", ("get_objects", "get_referrers", "get_referents"), "searching every live object"),
    Rule("torch.overrides", ("TorchFunctionMode", "TorchFunctionMode.__enter__"), "rewiring torch's dispatch"),
    Rule("torch.utils._python_dispatch", (), "rewiring torch's dispatch"),
    Rule("torch.library", (), "registering kernels for torch's operators"),
    Rule("builtins", (), "patching Python's builtins"),
)
SUSPICIOUS_STRINGS = ("amp_edu/checks", "amp_edu/course", "amp_edu/plans", "__editable__", "_amp_edu_grader_")


def grader_internals(sources: list[tuple[str, str]], exercise_names: tuple[str, ...] = ()) -> list[str]:
    """Uses of :data:`GRADER_RULES`, of ``amp_edu.checks`` beyond ``exercise_names`` (the check
    functions and helpers the exercises import: ``fnmatch`` patterns of the last name), strings
    naming the grader's files, and code built at run time."""
    checks = Rule("amp_edu.checks", (), "the course's checks are the grader's, not an answer's",
                  allowed=exercise_names)
    found = violations(sources, (checks, *GRADER_RULES))
    for where, source in sources:
        for s in SUSPICIOUS_STRINGS:
            if s in source:
                found.append(f"{where}: names {s!r} (the grader's own files)")
    return found + dynamic_code(sources)
