"""Which cells of a notebook a given cell needs: a def-use graph over its code cells.

The browser test checks what only a browser can check, the widgets; nbval already runs every cell
of every lesson. So in the browser a lesson runs its first code cell (imports, the setup line), the
cells that display a widget, and every cell those need, found here: a cell *needs* the latest
earlier cell that binds or changes (``x = ...``, ``x.attr = ...``, ``x[i] = ...``, ``def x``,
``import x``, ``for x in``, ``with ... as x``) a name it reads, anywhere in its body, including
inside the functions it defines (they read globals when called); and so on, transitively.
A mutation through a method call (``model.train_()``) is not seen, nor a binding inside a line
magic (``%time r = f()``): a cell needed only for such an effect has to bind a name the later
cell reads, as lesson cells do.
"""

from __future__ import annotations

import ast
import builtins

from IPython.core.inputtransformer2 import TransformerManager

WIDGET = "application/vnd.jupyter.widget-view+json"
_IPY = TransformerManager()
_BUILTINS = set(dir(builtins))


def _tree(source: str) -> ast.AST:
    return ast.parse(_IPY.transform_cell(source))       # %magics and !shell lines become Python calls


def _base(node):
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def binds(source: str) -> set[str]:
    """The module-level names a cell binds or changes."""
    out = set()
    for node in ast.walk(_tree(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if (b := _base(node)) is not None:
                out.add(b)
    return out


def reads(source: str) -> set[str]:
    """Every name a cell reads (not builtins), in its top level or in the functions it defines."""
    return {n.id for n in ast.walk(_tree(source)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - _BUILTINS


def needed(cells: list[str], wanted: list[int]) -> list[int]:
    """The indices (into ``cells``, code sources in order) of ``wanted`` and every cell they need."""
    if any(not 0 <= w < len(cells) for w in wanted):
        raise ValueError(f"wanted cells {wanted} must index the {len(cells)} code cells")
    bound = [binds(s) for s in cells]
    todo, seen = list(wanted), set(wanted)
    while todo:
        j = todo.pop()
        for name in reads(cells[j]):
            i = next((i for i in range(j - 1, -1, -1) if name in bound[i]), None)
            if i is not None and i not in seen:
                seen.add(i)
                todo.append(i)
    return sorted(seen)


def widget_cells(nb: dict) -> list[int]:
    """Code-cell indices (counting code cells only) whose stored outputs display a widget."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    return [k for k, c in enumerate(code) if any(WIDGET in o.get("data", {}) for o in c.get("outputs", []))]


def browser_cells(nb: dict) -> list[int]:
    """What the browser test runs of a lesson: its first code cell, its widget cells, what they need."""
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    return needed(code, sorted({0, *widget_cells(nb)}))
