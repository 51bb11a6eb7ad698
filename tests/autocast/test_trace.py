"""amp_edu.autocast.trace: the dtypes trace_dtypes records are the dtypes the ops really return,
under torch.autocast and under amp_edu.autocast alike, and side_by_side counts where two traces agree."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_edu.autocast import autocast
from amp_edu.autocast.trace import Trace, side_by_side, trace_dtypes

BF16 = torch.bfloat16


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return F.softmax(self.fc(x), -1).sum()


def _short(t):
    return {torch.float32: "fp32", BF16: "bf16"}[t.dtype]


def test_the_recorded_dtypes_are_what_each_op_returned():
    net, x = Net(), torch.randn(2, 4)
    t = trace_dtypes(net, x, context=torch.autocast("cpu", dtype=BF16), backward=True)
    with torch.autocast("cpu", dtype=BF16):          # the same ops, measured by hand
        h = net.fc(x)
        p = F.softmax(h, -1)
        s = p.sum()
    assert [(r.where, r.op) for r in t.ops] == [("fc", "linear"), ("(top)", "softmax"), ("(top)", "sum")]
    assert [r.outputs for r in t.ops] == [(_short(h),), (_short(p),), (_short(s),)]
    assert t.ops[0].inputs == ("fp32", "fp32", "fp32")          # as the caller passed them: x, weight, bias
    assert t.ops[1].inputs == (_short(h),)
    assert t.result == (_short(s),) and h.dtype == BF16
    assert t.params == t.grads == {"fc.weight": "fp32", "fc.bias": "fp32"}
    plain = trace_dtypes(Net(), x)                                 # no region: nothing leaves fp32
    assert {o for r in plain.ops for o in r.outputs} == {"fp32"} and plain.grads == {}


def test_side_by_side_counts_the_rows_that_agree():
    x = torch.randn(2, 4)
    theirs = trace_dtypes(Net(), x, context=torch.autocast("cpu", dtype=BF16), backward=True)
    ours = trace_dtypes(Net(), x, context=lambda: autocast("cpu", dtype=BF16), backward=True)   # a factory
    text, same, rows = side_by_side(theirs, ours)
    assert (same, rows) == (7, 7) and "NO" not in text        # 3 ops, 2 parameters, 2 gradients
    fp32 = trace_dtypes(Net(), x, backward=True)
    text, same, rows = side_by_side(fp32, ours, names=("fp32", "amp_edu"))
    assert (same, rows) == (4, 7) and text.count("NO") == 3   # each op's output differs, weights agree
    assert text.splitlines()[0].split()[3:5] == ["fp32", "amp_edu"]
    _, same, rows = side_by_side(Trace(), ours)               # a missing row never agrees
    assert (same, rows) == (0, 7)


def test_bad_arguments_name_what_is_accepted():
    with pytest.raises(TypeError, match="callable"):
        trace_dtypes(3)
    with pytest.raises(TypeError, match="context must be"):
        trace_dtypes(torch.relu, torch.ones(2), context="autocast")
    with pytest.raises(ValueError, match="scalar tensor that requires grad"):
        trace_dtypes(torch.relu, torch.ones(2), backward=True)
