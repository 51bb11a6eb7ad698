"""Graders for lesson 13 (torch.compile and mixed precision): read a compiled graph.

Part A, ``low_precision_ops(gm)``: the learner's function reads an ATen graph (as AOTAutograd hands
it to Inductor) and returns the ops that compute a bf16/fp16 result. It is run on three graphs
(the exercise model's, one with a bf16 + fp32 residual, one with bf16 elementwise ops after a
matmul) and compared with :func:`amp_edu.compile.low_precision_ops`.

Part B, ``kernel_kinds(names)``: the learner's function reads the kernel names of Inductor's output
code (one kind per kernel call, in call order, from :data:`amp_edu.compile.KINDS`). The grader
compiles the exercise model and the lesson's block itself (once per process; Inductor's on-disk
cache makes a second process fast) and classifies their kernels with
:func:`amp_edu.compile.kernel_kind`.

Each wrong answer a learner is likely to give has its own hint.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from .. import compile as comp
from .core import call_learner, fail, passed, require_callable

__all__ = ["exercise_model", "exercise_step", "exercise_graph", "exercise_kernels", "check_low_precision_ops",
           "check_kernel_kinds"]

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


def _input() -> torch.Tensor:
    return torch.randn(8, _D, generator=torch.Generator().manual_seed(0))


@functools.lru_cache(maxsize=None)
def exercise_graph() -> torch.fx.GraphModule:
    """The exercise model's forward ATen graph (traced, not compiled)."""
    return comp.capture(exercise_step(exercise_model()), _input()).forward[0]


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


@functools.lru_cache(maxsize=None)
def _graphs():
    return (("the exercise model's graph", exercise_graph()), ("a bf16 + fp32 residual", _residual_graph()),
            ("bf16 elementwise ops after a matmul", _elementwise_graph()),
            ("fp16 autocast, and an input that arrives in bf16", _fp16_graph()))


def _nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def _slips(gm) -> dict[str, set]:
    """What the plausible wrong readings of ``gm`` return, each with its hint."""
    low = comp.LOW_DTYPES
    names = lambda pred: {comp.op_name(n) for n in _nodes(gm) if pred(n)}  # noqa: E731
    in_low = lambda n: any(isinstance(a, torch.fx.Node) and comp.node_dtype(a) in low for a in n.args)  # noqa: E731
    right = comp.low_precision_ops(gm)
    return {
        "a cast (convert_element_type) only converts; it computes nothing. Leave the casts out":
            names(lambda n: comp.node_dtype(n) in low and comp.op_name(n) not in comp.VIEW_OPS),
        "views (permute, t, view, alias, getitem) only re-describe memory; they compute nothing. Leave them out":
            names(lambda n: comp.node_dtype(n) in low and comp.op_name(n) not in comp.CAST_OPS),
        "read the dtype a node *produces* (node.meta['val'].dtype), not its inputs': bf16 + fp32 promotes to fp32, "
        "and an upcast's input is bf16 but its math is not":
            names(lambda n: in_low(n) and comp.op_name(n) not in comp.CAST_OPS | comp.VIEW_OPS),
        "not only matmuls: an op that consumes a bf16 tensor and is not decomposed with an upcast (relu, add, "
        "mul) computes a bf16 result too":
            {op for op in right if "mm" in op},
        "most of the graph computes in fp32: the decomposed LayerNorm/GELU/softmax upcast first. Keep only the "
        "nodes whose output dtype is bfloat16 or float16":
            names(lambda n: comp.op_name(n) not in comp.CAST_OPS | comp.VIEW_OPS),
    }


def _answer_hint(gm, got) -> str:
    if isinstance(got, (list, tuple)):
        return "return a set of op names (duplicates do not count twice): set(...)"
    if isinstance(got, set) and any(isinstance(g, str) and ("." in g or "aten" in g) for g in got):
        return "return bare op names ('addmm', 'relu'), as amp_edu.compile.op_name(node) gives them, not 'aten.addmm.default'"
    if isinstance(got, set) and got and not all(isinstance(g, str) for g in got):
        return "return op *names* (strings), not nodes: amp_edu.compile.op_name(node)"
    right = comp.low_precision_ops(gm)
    for hint, value in _slips(gm).items():
        if got == value and value != right:
            return hint
    if isinstance(got, set) and any(n.op == "placeholder" and n.name in got for n in gm.graph.nodes):
        return ("count only call_function nodes: a graph input (a placeholder) that arrives in bf16 is data, "
                "not an op that computes")
    return ("a node counts when it is a call_function, is not a cast or a view, and its output "
            "(node.meta['val']) is bfloat16 or float16 (fp16 too: autocast's dtype may be either)")


def check_low_precision_ops(fn) -> str:
    """``fn(gm)`` must return the set of ATen op names in ``gm`` that compute a bf16/fp16 result."""
    require_callable("low_precision_ops", fn)
    for label, gm in _graphs():
        expected = comp.low_precision_ops(gm)
        got = call_learner("low_precision_ops", fn, (gm,), input=label, expected=sorted(expected))
        if got != expected:
            raise fail("low_precision_ops", input=label, expected=sorted(expected),
                       got=sorted(got) if isinstance(got, set) and all(isinstance(g, str) for g in got) else got,
                       hint=_answer_hint(gm, got))
    return passed("low_precision_ops", f"{len(_graphs())} graphs")


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
def _block_kernels() -> tuple[comp.Kernel, ...]:
    """The lesson's block (Linear → GELU → Linear → LayerNorm → softmax): all four kinds of kernel."""
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(_D, 2 * _D), nn.GELU(), nn.Linear(2 * _D, _D), nn.LayerNorm(_D))

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return m(x).softmax(-1)
    return _kernels_of(f, comp.capture(f, _input()).forward[0])


def _kind_hint(kernel: comp.Kernel, expected: str, got) -> str:
    if got not in comp.KINDS:
        return f"each entry is one of {list(comp.KINDS)}"
    if expected == "library call":
        return ("extern_kernels.* are library calls (oneDNN/ATen matmuls): Inductor calls them but does not "
                "generate them, so (at Inductor's default settings, max_autotune off) no cast is fused into them")
    if got == "library call":
        return "a cpp_fused_* kernel is generated by Inductor; only extern_kernels.* (and torch.ops.*) are library calls"
    if expected == "cast only":
        return ("this kernel's name lists only _to_copy: it fuses several casts (weights, bias, input) with "
                "each other, but no computation")
    if expected == "compute only":
        return ("no _to_copy in its name: the up- and downcasts inside a decomposed op carry that op's name "
                "(native_layer_norm, _softmax); only autocast's own casts appear as _to_copy")
    return ("its name lists _to_copy *and* a computing op: the cast shares the kernel with that computation, "
            "so the tensor is converted on its way in or out and never stored in the other dtype")


def check_kernel_kinds(fn) -> str:
    """``fn(names)``: for a list of kernel names as Inductor's output code calls them, one of
    :data:`amp_edu.compile.KINDS` per name, in order. Run on the exercise model's kernels and on
    the lesson block's."""
    require_callable("kernel_kinds", fn)
    n = 0
    # a cast fused with the copy_ that writes an updated buffer back (a model that mutates its input):
    # Inductor names a kernel after its ATen ops, and `copy` is computed work beside the cast
    update = [comp.Kernel("cpp_fused__to_copy_copy_0", ("_to_copy", "copy"), True)]
    for label, ks in (("the exercise model's kernels", exercise_kernels()), ("the lesson block's kernels", _block_kernels()),
                      ("a cast fused with an in-place update's copy", update)):
        names = [k.name for k in ks]
        expected = [comp.kernel_kind(k) for k in ks]
        got = call_learner("kernel_kinds", fn, (list(names),), input=names, expected=expected)
        if not isinstance(got, (list, tuple)):
            raise fail("kernel_kinds", input=names, expected=expected, got=got,
                       hint="return a list with one kind per kernel name, in the same order")
        if len(got) != len(names):
            raise fail("kernel_kinds", input=names, expected=expected, got=list(got),
                       hint=f"{len(names)} names in, {len(names)} kinds out: one per call, library calls included "
                            "(the same extern kernel called twice is two entries)")
        for i, (k, e, g) in enumerate(zip(ks, expected, got)):
            if g != e:
                raise fail("kernel_kinds", input=f"{label}, kernel {i}: {k.name}", expected=e, got=g,
                           hint=_kind_hint(k, e, g))
        n += len(names)
    return passed("kernel_kinds", f"{n} kernels: 2 compiled models and an in-place update")
