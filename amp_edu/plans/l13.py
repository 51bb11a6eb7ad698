"""Kernel side of exercise 13: the exercise's model, the graphs the checks read, and the plans.

A ``torch.fx.GraphModule`` cannot travel between the judge and the learner's kernel, so a case of
``check_low_precision_ops`` names a graph (``"exercise"``, ``"views"``, ``"drawn"`` with a seed ...)
and :func:`graph` builds it, here in the kernel for the learner's function and in the judge's own
process for the reference, from the same lesson library. Most graphs are the forward ATen graph
AOTAutograd hands to Inductor (:func:`amp_edu.compile.capture`); two are traced with ``make_fx``
before Inductor's decompositions, the only graphs where the views ``t``, ``transpose``,
``_unsafe_view``, ``detach`` and ``reshape`` are still nodes (Inductor's decomposition table turns
the first four into ``permute``, ``view`` and ``alias``; ``reshape`` is a composite that only the
pre-dispatch trace keeps). Between them the graphs hold every op of :data:`amp_edu.compile.VIEW_OPS`
with a bf16 result.

:func:`low_precision_ops_plan` and :func:`kernel_kinds_plan` call the learner's functions and hand
back what they returned; they decide nothing (the references and the hints are the judge's,
``amp_edu.checks.l13``). :func:`exercise_kernels` and :func:`block_kernels` compile the exercise
model and the lesson's block with Inductor (seconds each: the check itself reads written-out
kernel names; the course's tests compare those with these).
"""

from __future__ import annotations

import functools
import random
import warnings
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .. import compile as comp
from .runner import call

__all__ = ["exercise_model", "exercise_step", "exercise_graph", "exercise_kernels", "block_kernels", "graph",
           "GRAPHS", "drawn_program", "low_precision_ops_plan", "kernel_kinds_plan"]

_D = 32


def exercise_model() -> nn.Module:
    """The exercise's model: LayerNorm → Linear → ReLU → Linear (seeded)."""
    torch.manual_seed(13)
    return nn.Sequential(nn.LayerNorm(_D), nn.Linear(_D, 2 * _D), nn.ReLU(), nn.Linear(2 * _D, _D))


def exercise_step(model: nn.Module):
    """``f(x)``: the model's forward under CPU bf16 autocast."""
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x)
    return f


def _input(*shape: int) -> torch.Tensor:
    return torch.randn(*(shape or (8, _D)), generator=torch.Generator().manual_seed(0))


@functools.lru_cache(maxsize=None)
def exercise_graph() -> torch.fx.GraphModule:
    """The exercise model's forward ATen graph (traced, not compiled)."""
    return comp.capture(exercise_step(exercise_model()), _input()).forward[0]


# --- the graphs of check_low_precision_ops ----------------------------------------------------------
def _residual_graph():
    torch.manual_seed(1)
    lin = nn.Linear(_D, _D)

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.tanh(x + lin(x))          # bf16 + fp32 → fp32 (type promotion)
    return comp.capture(f, _input()).forward[0]


def _elementwise_graph():
    torch.manual_seed(2)
    w = torch.randn(_D, _D)

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.relu(x @ w.t())
            return (y * 2 + y).t().sum(0), y.float().exp()
    return comp.capture(f, _input()).forward[0]


def _fp16_graph():
    """fp16 autocast (the CUDA default dtype, also CPU autocast's second), and an input that arrives
    in bf16: a placeholder node holds a low dtype but is not an op."""
    torch.manual_seed(3)
    lin = nn.Linear(_D, _D)

    def f(x, h):
        with torch.autocast("cpu", dtype=torch.float16):
            return torch.relu(lin(x)), h * 2
    return comp.capture(f, _input(), _input().bfloat16()).forward[0]


def _views_graph():
    """bf16 views as the graph Inductor receives has them: view (from reshape), permute (from t),
    expand, unsqueeze, squeeze, alias (from detach), slice, select, as_strided, and getitem (var_mean's
    two bf16 outputs)."""
    torch.manual_seed(5)
    w = torch.randn(_D, _D)

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            a = (y.reshape(4, 2 * _D) * 2).reshape(8, _D)
            b = (y.unsqueeze(0).expand(2, 8, _D) - 1).sum(0)
            c = y.unsqueeze(0).squeeze(0) + b
            d = c.detach() * a
            e = d[1:5] * 2 + d[3]
            var, mean = torch.var_mean(e, dim=0)
            return var * mean, torch.as_strided(y, (4, 4), (1, 8)) * 2, y.t()
    return comp.capture(f, _input()).forward[0]


def _before_decompositions_graph():
    """``make_fx``'s ATen graph, before Inductor's decompositions: ``t``, ``transpose``, ``detach``
    and the ``view``/``mm``/``_unsafe_view`` of a 3-d matmul are still nodes."""
    from torch.fx.experimental.proxy_tensor import make_fx

    torch.manual_seed(6)
    w = torch.randn(_D, _D)

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w                                  # (2, 8, 32) @ (32, 32)
            return y[0].t() + 1, torch.sigmoid(y.transpose(1, 2)), y.detach() * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_fx(f)(_input(2, 8, _D))


def _pre_dispatch_graph():
    """``make_fx(pre_dispatch=True)``: the level ``torch.export`` records, where autocast is still a
    region (two nodes that produce no tensor), casts are not nodes yet, and ``reshape`` is one."""
    from torch.fx.experimental.proxy_tensor import make_fx

    torch.manual_seed(7)
    w = torch.randn(_D, _D)

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.relu(x @ w)
            return y.reshape(4, 2 * _D) * 2, x - 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_fx(f, pre_dispatch=True)(_input())


#: the named graphs, in the check's order: name → (builder, what the check calls it)
GRAPHS: dict[str, tuple[Callable[[], torch.fx.GraphModule], str]] = {
    "exercise": (exercise_graph, "the exercise model's graph"),
    "residual": (_residual_graph, "a bf16 + fp32 residual"),
    "elementwise": (_elementwise_graph, "bf16 elementwise ops after a matmul"),
    "fp16": (_fp16_graph, "fp16 autocast, and an input that arrives in bf16"),
    "views": (_views_graph, "bf16 views: view, permute, expand, unsqueeze, squeeze, alias, slice, select, "
                            "as_strided, getitem"),
    "before decompositions": (_before_decompositions_graph, "make_fx's ATen graph before Inductor's "
                                                            "decompositions: t, transpose, detach, _unsafe_view"),
    "pre-dispatch": (_pre_dispatch_graph, "a pre-dispatch graph (make_fx(pre_dispatch=True)): reshape, and "
                                          "autocast as a region"),
}

# the drawn graph's steps: each maps y (8×32) to y (8×32); x is the fp32 input, w and b fp32 weights
_STEPS: dict[str, Callable] = {
    "x @ w": lambda y, x, w, b, dt: y @ w,
    "linear": lambda y, x, w, b, dt: F.linear(y, w, b),
    "relu": lambda y, x, w, b, dt: torch.relu(y),
    "gelu": lambda y, x, w, b, dt: F.gelu(y),
    "tanh": lambda y, x, w, b, dt: torch.tanh(y),
    "sigmoid": lambda y, x, w, b, dt: torch.sigmoid(y),
    "* 2": lambda y, x, w, b, dt: y * 2,
    "+ 1": lambda y, x, w, b, dt: y + 1,
    "+ x (fp32 residual)": lambda y, x, w, b, dt: y + x,
    "softmax": lambda y, x, w, b, dt: y.softmax(-1),
    "layer_norm": lambda y, x, w, b, dt: F.layer_norm(y, (_D,)),
    ".float()": lambda y, x, w, b, dt: y.float(),
    ".to(low dtype)": lambda y, x, w, b, dt: y.to(dt),
    "(y.t() * 3).t()": lambda y, x, w, b, dt: (y.t() * 3).t(),
    "cat(y[:, :16] * 2, y[:, 16:])": lambda y, x, w, b, dt: torch.cat([y[:, :16] * 2, y[:, 16:]], 1),
    "(y.reshape(16, 16) - 1).reshape(8, 32)": lambda y, x, w, b, dt: (y.reshape(16, 16) - 1).reshape(8, _D),
    "y - y.mean(-1)": lambda y, x, w, b, dt: y - y.mean(-1, keepdim=True),
}


def drawn_program(seed: int) -> tuple[str, list[str]]:
    """The autocast dtype (``"bfloat16"`` or ``"float16"``) and the steps of the graph drawn from
    ``seed``: a matmul or a linear first, then five steps of :data:`_STEPS`, none twice in a row."""
    rng = random.Random(seed)
    steps = [rng.choice(["x @ w", "linear"])]
    while len(steps) < 6:
        step = rng.choice(sorted(_STEPS))
        if step != steps[-1]:
            steps.append(step)
    return rng.choice(["bfloat16", "bfloat16", "float16"]), steps


def _drawn_graph(seed: int) -> torch.fx.GraphModule:
    dtype_name, steps = drawn_program(seed)
    dt = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(seed % (1 << 63))
    w, b = torch.randn(_D, _D, generator=g) / _D ** 0.5, torch.randn(_D, generator=g)

    def f(x):
        with torch.autocast("cpu", dtype=dt):
            y = x
            for step in steps:
                y = _STEPS[step](y, x, w, b, dt)
            return y
    return comp.capture(f, _input()).forward[0]


@functools.lru_cache(maxsize=16)
def graph(name: str, seed: int | None = None) -> torch.fx.GraphModule:
    """The graph a case names: one of :data:`GRAPHS`, or ``"drawn"`` with the ``seed`` of
    :func:`drawn_program` (built once per process)."""
    if name == "drawn":
        if type(seed) is not int:
            raise TypeError(f"a drawn graph needs an int seed, got {type(seed).__name__}")
        return _drawn_graph(seed)
    if name not in GRAPHS:
        raise ValueError(f"no graph named {name!r}: one of {sorted(GRAPHS)} or 'drawn'")
    return GRAPHS[name][0]()


def low_precision_ops_plan(cases: list[dict], low_precision_ops: Callable) -> list[dict]:
    """``low_precision_ops(gm)`` on each case's graph: ``{"outcome", "set"}`` per case, where a
    returned set (or frozenset) travels as the list of its items and ``"set"`` names its type
    (``None`` for anything else, which travels as it is)."""
    out = []
    for case in cases:
        outcome = call(low_precision_ops, graph(case["graph"], case.get("seed")))
        value, kind = outcome.get("ok"), None
        if type(value) is set or type(value) is frozenset:
            kind, outcome = type(value).__name__, {"ok": list(value)}
        out.append({"outcome": outcome, "set": kind})
    return out


def kernel_kinds_plan(cases: list[dict], kernel_kinds: Callable) -> list[dict]:
    """``kernel_kinds(names)`` on each case's list of kernel names: one outcome per case."""
    return [call(kernel_kinds, list(case["names"])) for case in cases]


# --- Inductor's real kernels (compiled: seconds) -----------------------------------------------------
def _kernels_of(f, gm) -> tuple[comp.Kernel, ...]:
    torch._dynamo.reset()
    try:
        _, codes = comp.run_and_get_code(torch.compile(f), _input())
    finally:
        torch._dynamo.reset()
    vocab = {str(n.meta["original_aten"]._overloadpacket).split(".")[-1] for n in gm.graph.nodes
             if n.meta.get("original_aten") is not None}
    return tuple(comp.kernels(codes[0], vocab))


@functools.lru_cache(maxsize=None)
def exercise_kernels() -> tuple[comp.Kernel, ...]:
    """Inductor's kernels for the exercise model's forward (compiled once per process)."""
    return _kernels_of(exercise_step(exercise_model()), exercise_graph())


@functools.lru_cache(maxsize=None)
def block_kernels() -> tuple[comp.Kernel, ...]:
    """The lesson's block (Linear → GELU → Linear → LayerNorm → softmax): all four kinds of kernel."""
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(_D, 2 * _D), nn.GELU(), nn.Linear(2 * _D, _D), nn.LayerNorm(_D))

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return m(x).softmax(-1)
    return _kernels_of(f, comp.capture(f, _input()).forward[0])
