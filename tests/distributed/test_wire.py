"""amp_edu.distributed.wire without ranks: what it accepts, and that it always puts torch back.
(The bytes themselves are measured on two ranks in test_experiments.py.)"""

import pytest
import torch.distributed as dist

from amp_edu.distributed.wire import OPS, count_collectives


def test_unknown_ops_are_refused():
    with pytest.raises(ValueError, match="ops must be among all_reduce, all_gather_single, reduce_scatter_single"):
        with count_collectives([], ops=("broadcast",)):
            pass


def test_torch_functions_are_restored_even_when_the_block_raises():
    before = {op: getattr(dist, op) for op in OPS}
    with pytest.raises(RuntimeError, match="inside"):
        with count_collectives([]):
            assert all(getattr(dist, op) is not before[op] for op in OPS)
            raise RuntimeError("inside")
    assert {op: getattr(dist, op) for op in OPS} == before
