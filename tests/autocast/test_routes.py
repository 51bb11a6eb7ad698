"""amp_edu.autocast.routes: what the mode does with each callable a region hands it, and the op
tables it reads from this torch's dispatcher."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing._internal.autocast_test_lists import AutocastCPUTestLists

from amp_edu.autocast.routes import (ALL_REGISTERED, COMPOSITE_OPS, NEVER_OPEN, OPEN, THIN_WRAPPERS,
                                     TORCH_REGISTERED, route_as_op, route_of)


@pytest.mark.parametrize("func, route", [
    (torch.mm, "mm"), (torch.Tensor.mm, "mm"), (torch.ops.aten.mm.default, "mm"),   # one op, three spellings
    (torch.ops.aten.addmm, "addmm"), (torch.conv2d, "conv2d"), (F.linear, "linear"),
    (torch.Tensor.__matmul__, "matmul"),                     # an operator's alias: the op it means
    (F.cross_entropy, "cross_entropy_loss"),                 # a thin wrapper counts as its op
    (torch.lstm, ("composite", "lstm")),                     # a C++ composite the mode cannot open
    (torch.relu, None), (torch.add, None),                   # listed nowhere: runs untouched
    (torch.Tensor.backward, None),                           # a Python function that is never opened
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_each_kind_of_callable_gets_its_route(func, route):
    assert route_of(func) == route


@pytest.mark.parametrize("func", [F.softmax, F.normalize, torch.einsum, torch.Tensor.unflatten])
def test_python_level_functions_are_opened(func):
    assert route_of(func) is OPEN


def test_the_tables_say_what_route_of_assumes():
    assert set(THIN_WRAPPERS) == {F.cross_entropy}
    assert all(route_of(f) is not OPEN for f in NEVER_OPEN)
    assert {"lstm", "gru", "einsum"} <= COMPOSITE_OPS and not COMPOSITE_OPS & {"mm", "conv2d"}
    assert route_as_op(torch.Tensor.mm) == "mm" and route_as_op(torch.Tensor.unflatten) is None


def test_torch_registered_is_read_from_torchs_dispatcher():
    """Every op torch's own CPU autocast tests list (lower, fp32 or promote) has a kernel under the
    AutocastCPU key, and the table is exactly the dispatcher's registrations for it."""
    lists = AutocastCPUTestLists(torch.device("cpu"))
    listed = {op for name in ("torch_16", "nn_16", "torch_fp32", "nn_fp32", "torch_need_autocast_promote")
              for op, *_ in getattr(lists, name)}
    assert listed and listed <= TORCH_REGISTERED["cpu"]
    cpu = {r.split("::")[1].split(".")[0]
           for r in torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU")}
    assert TORCH_REGISTERED["cpu"] == cpu
    assert ALL_REGISTERED == TORCH_REGISTERED["cpu"] | TORCH_REGISTERED["cuda"]
    assert "relu" not in ALL_REGISTERED          # why torch.relu's route is None
