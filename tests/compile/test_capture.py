"""amp_edu.compile.capture: the graphs a compiled call produces, read node by node with the dtype
each node's fake tensor carries (dynamo and AOTAutograd trace; nothing is compiled to C++)."""

import operator

import torch

from amp_edu.compile.capture import capture, casts, dtype_rows, low_precision_ops, node_dtype, op_name

BF16 = torch.bfloat16


def _explicit_casts(x, w):
    h = x.to(BF16) @ w.to(BF16)
    v, m = torch.var_mean(h.float(), -1)
    return torch.relu(h).t(), v, m


def test_the_aten_graph_carries_the_dtypes_the_eager_call_returns():
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    cap = capture(_explicit_casts, x, w)
    assert len(cap.dynamo) == len(cap.forward) == 1 and cap.backward == []
    gm = cap.forward[0]
    eager = _explicit_casts(x, w)
    outputs = list(gm.graph.nodes)[-1].args[0]
    assert [node_dtype(n) for n in outputs] == [t.dtype for t in eager] == [BF16, torch.float32, torch.float32]
    assert [(a, b) for _, a, b in casts(gm)] == [("float32", "bfloat16"), ("float32", "bfloat16"),
                                                 ("bfloat16", "float32")]
    assert low_precision_ops(gm) == {"mm", "relu"}              # not the casts, not the transpose
    assert low_precision_ops(gm, dtypes=(torch.float32,)) == {"var_mean"}   # its getitems are views
    assert [(r.dtype, r.shape) for r in cap.result] == [(t.dtype, t.shape) for t in eager]


def test_op_name_and_node_dtype_on_a_hand_built_graph():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    mm = g.call_function(torch.ops.aten.mm, (x, x))                       # an overload packet
    pair = g.call_function(torch.ops.aten.var_mean.correction, (x,))      # an overload, two outputs
    item = g.call_function(operator.getitem, (pair, 0))
    g.output(item)
    mm.meta["val"] = torch.empty(2, 2, dtype=BF16)
    pair.meta["val"] = (torch.empty(2), torch.empty(2, dtype=torch.float16))   # outputs that disagree
    assert [op_name(n) for n in g.nodes] == ["", "mm", "var_mean", "getitem", ""]
    assert node_dtype(mm) == BF16 and node_dtype(pair) is None and node_dtype(item) is None   # no meta
    assert dtype_rows(g) == [("mm", "mm", "bfloat16"), ("var_mean_correction", "var_mean", "-"),
                             ("getitem", "getitem", "-")]
    assert casts(g) == [] and low_precision_ops(g) == {"mm"}
