"""What ``torch.compile`` captures: the FX graphs at each stage, read with their dtypes.

``torch.compile(fn, backend=b)`` runs TorchDynamo on ``fn``'s bytecode and hands each captured
graph (a ``torch.fx.GraphModule``) to the *backend* ``b(gm, example_inputs)``, which returns the
callable to run instead. A backend that records ``gm`` and returns ``gm.forward`` runs the graph
eagerly, so it shows what dynamo captured without compiling anything (fast: no C++).

Two stages matter for mixed precision:

* **dynamo's graph** (:attr:`Captured.dynamo`): torch-level calls. A ``torch.autocast`` region is
  *one pair of nodes*, ``torch.amp.autocast_mode._enter_autocast`` / ``_exit_autocast``, around
  the ops; no cast is in it yet.
* **the ATen graph that Inductor lowers** (:attr:`Captured.forward`, :attr:`Captured.backward`):
  AOTAutograd traces the dynamo graph through the dispatcher, where autocast is applied, with
  Inductor's decompositions (``select_decomp_table()``, the table ``compile_fx`` uses,
  torch/_inductor/compile_fx.py lines 2710 and 2911) and Inductor's partitioner (``partition_fn``, line
  2273: its joint-graph passes, then ``min_cut_rematerialization_partition``, handed to
  ``aot_autograd`` at line 3066), so the forward graph saves for backward what Inductor's would.
  Here every cast is a node
  (``prims.convert_element_type``), and composite ops such as ``layer_norm``, ``gelu`` and
  ``softmax`` are decomposed into pointwise ops and reductions that upcast a bf16/fp16 input to
  fp32 and round the result back, so the graph says where the math runs in fp32.

Each node's ``meta["val"]`` is a fake tensor carrying the dtype the node produces; :func:`dtype_rows`,
:func:`casts` and :func:`low_precision_ops` read it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.fx

__all__ = ["Captured", "capture", "op_name", "node_dtype", "dtype_rows", "casts", "low_precision_ops",
           "CAST_OPS", "VIEW_OPS", "LOW_DTYPES"]

LOW_DTYPES = (torch.bfloat16, torch.float16)
#: ATen ops that only convert a dtype (autocast's casts, a decomposition's upcast and downcast).
CAST_OPS = frozenset({"convert_element_type", "_to_copy", "to"})
#: ATen ops that compute nothing: they re-view (or alias) their input's memory.
VIEW_OPS = frozenset({"view", "_unsafe_view", "reshape", "permute", "t", "transpose", "expand", "unsqueeze",
                      "squeeze", "alias", "detach", "slice", "select", "as_strided", "getitem"})


@dataclass
class Captured:
    """The graphs one call of a compiled function produced, stage by stage (see the module docstring)."""

    dynamo: list[torch.fx.GraphModule] = field(default_factory=list)
    forward: list[torch.fx.GraphModule] = field(default_factory=list)
    backward: list[torch.fx.GraphModule] = field(default_factory=list)
    result: object = None


def capture(fn: Callable, *args, backward: bool = False, **kwargs) -> Captured:
    """Compile ``fn`` with recording backends, call it on ``args``, and return the graphs.

    Nothing is compiled to machine code: both backends run the graphs they receive eagerly.
    ``backward=True`` also calls ``.sum().backward()`` on the (first tensor) result, so the
    backward graph is captured too. Dynamo's caches are reset first, so ``fn`` is traced afresh.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if not isinstance(backward, bool):
        raise TypeError(f"backward must be a bool, got {type(backward).__name__}")
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.compile_fx import partition_fn
    from torch._inductor.decomposition import select_decomp_table
    from functorch.compile import make_boxed_func

    out = Captured()

    def recorder(where):
        def compiler(gm, example_inputs):
            where.append(gm)
            return make_boxed_func(gm.forward)
        return compiler

    aot = aot_autograd(fw_compiler=recorder(out.forward), bw_compiler=recorder(out.backward),
                       decompositions=select_decomp_table(), partition_fn=partition_fn)

    def dynamo_backend(gm, example_inputs):        # one trace: record dynamo's graph, hand it to AOTAutograd
        out.dynamo.append(gm)
        return aot(gm, example_inputs)

    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = torch.compile(fn, backend=dynamo_backend)(*args, **kwargs)
        if backward:
            first = res if isinstance(res, torch.Tensor) else next(t for t in res if isinstance(t, torch.Tensor))
            first.float().sum().backward()
    torch._dynamo.reset()
    out.result = res
    return out


def op_name(node: torch.fx.Node) -> str:
    """The ATen op of a ``call_function`` node without namespace or overload (``"addmm"`` for
    ``aten.addmm.default``, ``"convert_element_type"`` for ``prims.convert_element_type.default``,
    ``"getitem"`` for ``operator.getitem``); ``""`` for placeholders and the output."""
    if node.op != "call_function":
        return ""
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return t._overloadpacket.__name__
    if isinstance(t, torch._ops.OpOverloadPacket):
        return t.__name__
    return getattr(t, "__name__", str(t)).split(".")[0]


def node_dtype(node: torch.fx.Node) -> torch.dtype | None:
    """The dtype a node produces (from its fake-tensor ``meta["val"]``; for a multi-output node
    such as ``var_mean``, the dtype its outputs share, else ``None``)."""
    v = node.meta.get("val")
    if isinstance(v, torch.Tensor):
        return v.dtype
    if isinstance(v, (tuple, list)):
        dts = {t.dtype for t in v if isinstance(t, torch.Tensor)}
        return dts.pop() if len(dts) == 1 else None
    return None


def _graph(gm) -> torch.fx.Graph:
    if isinstance(gm, torch.fx.GraphModule):
        return gm.graph
    if isinstance(gm, torch.fx.Graph):
        return gm
    raise TypeError(f"expected a torch.fx.GraphModule or Graph, got {type(gm).__name__}")


def dtype_rows(gm) -> list[tuple[str, str, str]]:
    """``(node name, op, dtype)`` for every computing node of the graph, in graph order."""
    rows = []
    for n in _graph(gm).nodes:
        if n.op == "call_function":
            dt = node_dtype(n)
            rows.append((n.name, op_name(n), str(dt).removeprefix("torch.") if dt else "-"))
    return rows


def casts(gm) -> list[tuple[str, str, str]]:
    """``(node name, from dtype, to dtype)`` of every dtype conversion in the graph."""
    found = []
    for n in _graph(gm).nodes:
        if op_name(n) in CAST_OPS and n.args and isinstance(n.args[0], torch.fx.Node):
            src, dst = node_dtype(n.args[0]), node_dtype(n)
            found.append((n.name, str(src).removeprefix("torch."), str(dst).removeprefix("torch.")))
    return found


def low_precision_ops(gm, dtypes=LOW_DTYPES) -> set[str]:
    """The ATen ops of the graph that compute a bf16/fp16 result: a node whose output dtype is
    low precision, that is not a cast (:data:`CAST_OPS`) and not a view (:data:`VIEW_OPS`)."""
    return {op_name(n) for n in _graph(gm).nodes
            if n.op == "call_function" and op_name(n) not in CAST_OPS | VIEW_OPS and node_dtype(n) in dtypes}
