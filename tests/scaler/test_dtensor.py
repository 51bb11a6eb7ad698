"""amp_edu.scaler.dtensor: FSDP2's DTensor gradients as the scaler sees them, against what torch's
own fused check does with the same DTensors (one process, a world of one gloo rank; the two-rank
MAX rule is tested in tests/distributed/test_experiments.py)."""

import warnings

import pytest
import torch
import torch.distributed as dist

from amp_edu.scaler.dtensor import dtensor_class, is_dtensor, local_tensor, max_over_mesh_, refuse_mixed_


@pytest.fixture(scope="module")
def mesh():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def _sharded(values, mesh):
    from torch.distributed.tensor import Shard, distribute_tensor
    return distribute_tensor(torch.tensor(values), mesh, [Shard(0)])


def _outcome(fn):
    try:
        fn()
        return "ok"
    except Exception as exc:  # noqa: BLE001 - compared as they are
        return type(exc), str(exc)


def test_a_dtensor_is_recognised_and_its_local_shard_shares_its_storage(mesh):
    from torch.distributed.tensor import DTensor
    g = _sharded([1.0, 2.0, 3.0, 4.0], mesh)
    assert dtensor_class() is DTensor and is_dtensor(g) and not is_dtensor(g.to_local()) and not is_dtensor(3)
    local = local_tensor(g)
    assert type(local) is torch.Tensor and local.data_ptr() == g.to_local().data_ptr()
    local.mul_(2)
    assert g.full_tensor().tolist() == [2.0, 4.0, 6.0, 8.0]                 # a view of the shard, not a copy
    plain = torch.ones(2)
    assert local_tensor(plain) is plain


def test_mixed_lists_are_refused_where_torchs_kernel_refuses_them(mesh):
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.experimental import implicit_replication
    g = _sharded([1.0, 2.0], mesh)
    for mixed in ([g, torch.ones(2)], [g, torch.ones(1)], [g, _sharded([3.0, 4.0], mesh)]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")              # torch's own rule warns about a 1-element found_inf
            theirs = _outcome(lambda: torch._amp_foreach_non_finite_check_and_unscale_(
                [t.clone() for t in mixed], torch.zeros(1), torch.ones(1)))
        assert _outcome(lambda: refuse_mixed_(mixed, DTensor)) == theirs
    assert theirs == "ok" and _outcome(lambda: refuse_mixed_([g, torch.ones(2)], DTensor)) != "ok"
    with implicit_replication():                           # torch's switch for plain tensors as replicated
        assert _outcome(lambda: refuse_mixed_([g, torch.ones(2)], DTensor)) == "ok"


def test_max_over_a_mesh_of_one_keeps_this_ranks_found_inf(mesh):
    g = _sharded([1.0, float("inf")], mesh)
    for value in (0.0, 1.0):
        found = torch.full((1,), value)
        max_over_mesh_(found, g)
        assert found.item() == value
