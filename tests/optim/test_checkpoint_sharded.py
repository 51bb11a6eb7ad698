"""amp_edu.optim under sharding and distributed checkpoints, on gloo ranks (a CPU world).

torchao's ``TestFSDP2`` (``test/test_low_bit_optim.py`` at v0.18.0, commit
5f2baf9d575cf732362594c998c399902942531f) needs two CUDA GPUs; this is its CPU counterpart for the
course's optimizer, written for what it checks: quantized states that live inside ``DTensor``
shards (an uneven one too, as its ``test_uneven_shard``), ``DTensor.full_tensor()`` of a state,
and ``torch.distributed.checkpoint`` saving at one world size and loading at another, which
slices the states (``aten.slice``) to each rank's part.

One training run of 7 AdamW steps with 8-bit, 4-bit and fp8 states, checkpointed twice, in three
launches: 1 rank (plain tensors) trains steps 1-3 and saves; 2 ranks (every tensor sharded along
its first dimension) load that checkpoint, train steps 4-5 and save; 1 rank loads that and trains
steps 6-7. Gradients are given, not computed, so every rank sees the same numbers, and the end must
equal one uninterrupted process bit for bit: weights, codes and scales. That holds because Adam is
elementwise and every shard boundary falls between blocks. Each launch starts processes (seconds):
the course tier.
"""

from __future__ import annotations

import torch

from amp_edu.distributed import launch
from amp_edu.optim import QUANTIZED_STATES, AdamW, QuantizedState


# (128, 64): 8192 elements, 4096 per rank of 2; (33, 512): uneven, 17 and 16 rows (8704 and 8192);
# (64,): too small to quantize, plain states
SHAPES = ((128, 64), (33, 512), (64,))
KINDS = QUANTIZED_STATES            # the state kinds amp_edu.optim owns
STEPS = ((1, 3), (4, 5), (6, 7))     # (first, last) step of each launch


def _weights(kind: str) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(KINDS.index(kind))
    return [torch.randn(s, generator=g) for s in SHAPES]


def _grad(kind: str, step: int, i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * step + 10 * i + KINDS.index(kind))
    return torch.randn(SHAPES[i], generator=g)


def _optimizer(params, kind):
    return AdamW(params, lr=1e-2, betas=(0.8, 0.95), weight_decay=0.1, amsgrad=(kind == "4bit"), states=kind)


def _train(params, opt, kind, first, last, shard=None):
    for step in range(first, last + 1):
        for i, p in enumerate(params):
            g = _grad(kind, step, i)
            p.grad = g if shard is None else shard(g)
        opt.step()


def _snapshot(params, opt) -> dict:
    """Weights, and each state as its raw parts (codes and scales as bytes), full tensors."""
    out = {"weights": [p.detach().clone() for p in params], "states": []}
    for p in params:
        row = {}
        for k, v in opt.state[p].items():
            if isinstance(v, QuantizedState):
                row[k] = (v.codes.view(torch.uint8).clone(), v.scale.clone())
            else:
                row[k] = v.detach().clone()
        out["states"].append(row)
    return out


def _phase(rank: int, world_size: int, ckpt_in, ckpt_out, first: int, last: int) -> dict:
    """One launch: build the params (sharded if world_size > 1), load ``ckpt_in``, train, save."""
    import torch.distributed.checkpoint as dcp
    result = {}
    shard = None
    if world_size > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor
        mesh = init_device_mesh("cpu", (world_size,))

        def shard(t):
            return distribute_tensor(t, mesh, [Shard(0)])
    sd, opts = {}, {}
    for kind in KINDS:
        full = _weights(kind)
        params = [(shard(w) if shard else w).requires_grad_() for w in full]
        opt = _optimizer(params, kind)
        if ckpt_in is not None:                 # torchao's test_fsdp2: a step with zero grads makes the states
            for p in params:
                p.grad = torch.zeros_like(p)
            opt.step()
        opts[kind] = (params, opt)
        sd[kind] = {"weights": {str(i): p for i, p in enumerate(params)}, "optim": opt.state_dict()}
    if ckpt_in is not None:
        from amp_edu.optim import state as state_mod
        slice_op = torch.ops.aten.slice.Tensor
        real = state_mod._HANDLERS[slice_op]
        calls = []

        def counting(func, args, kwargs):
            calls.append(tuple(args[0].shape))
            return real(func, args, kwargs)
        state_mod._HANDLERS[slice_op] = counting
        try:
            dcp.load(sd, checkpoint_id=ckpt_in)     # in place, into the tensors of sd (slicing the states)
        finally:
            state_mod._HANDLERS[slice_op] = real
        result["slices"] = len(calls)
        for kind, (params, opt) in opts.items():
            opt.load_state_dict(sd[kind]["optim"])
    for kind, (params, opt) in opts.items():
        _train(params, opt, kind, first, last, shard)
    if world_size > 1:
        from torch.distributed.tensor import DTensor
        params, opt = opts["8bit"]
        st = opt.state[params[0]]["exp_avg"]
        local = st.to_local()
        full = st.full_tensor()                 # all-gathers codes and scales
        result.update(state_type=type(st).__name__, local_type=type(local).__name__,
                      local_shape=tuple(local.shape), full_type=type(full).__name__,
                      full=(full.codes.clone(), full.scale.clone()),
                      uneven=[tuple(opt.state[params[1]]["exp_avg"].to_local().shape)],
                      is_dtensor=isinstance(st, DTensor))
    sd = {kind: {"weights": {str(i): p for i, p in enumerate(params)}, "optim": opt.state_dict()}
          for kind, (params, opt) in opts.items()}
    dcp.save(sd, checkpoint_id=ckpt_out)
    if world_size == 1:
        result["snapshots"] = {kind: _snapshot(params, opt) for kind, (params, opt) in opts.items()}
    return result


def _reference() -> dict:
    """The same 7 steps in this process, unsharded, uninterrupted."""
    out = {}
    for kind in KINDS:
        params = [w.requires_grad_() for w in _weights(kind)]
        opt = _optimizer(params, kind)
        _train(params, opt, kind, 1, 7)
        out[kind] = (_snapshot(params, opt), opt)
    return out


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b))
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8) if a.element_size() == 1
                                                                     else a, b.view(torch.uint8)
                                                                     if b.element_size() == 1 else b)


def test_sharded_states_round_trip_through_dcp_across_world_sizes(tmp_path):
    """1 rank saves, 2 ranks load and save, 1 rank loads: bit for bit one uninterrupted run."""
    ck1, ck2, ck3 = (str(tmp_path / f"ckpt{i}") for i in (1, 2, 3))
    (a,) = launch(_phase, None, ck1, *STEPS[0], world_size=1, timeout_s=240, progress=False)
    b = launch(_phase, ck1, ck2, *STEPS[1], world_size=2, timeout_s=240, progress=False)
    (c,) = launch(_phase, ck2, ck3, *STEPS[2], world_size=1, timeout_s=240, progress=False)
    assert "snapshots" in a
    # loading at another world size cut the quantized states: each rank sliced the saved full ones
    # (1 -> 2), the single rank sliced its own into the two saved halves (2 -> 1)
    assert all(res["slices"] > 0 for res in b) and c["slices"] > 0
    ref = _reference()

    # on 2 ranks: each state is a DTensor around a QuantizedState shard; full_tensor() gathers it
    for r, res in enumerate(b):
        assert res["is_dtensor"] and res["state_type"] == "DTensor" and res["local_type"] == "QuantizedState"
        assert res["local_shape"] == (64, 64)
        assert res["uneven"] == [((17, 512), (16, 512))[r]]
        assert res["full_type"] == "QuantizedState"
        assert _same(res["full"][0], b[0]["full"][0]) and torch.equal(res["full"][1], b[0]["full"][1])

    for kind in KINDS:
        mine, want = c["snapshots"][kind], ref[kind][0]
        for i, shape in enumerate(SHAPES):
            assert torch.equal(mine["weights"][i], want["weights"][i]), (kind, shape)
            assert mine["states"][i].keys() == want["states"][i].keys()
            for k in want["states"][i]:
                assert _same(mine["states"][i][k], want["states"][i][k]), (kind, shape, k)
        if kind == "8bit":
            # full_tensor() after step 5 on 2 ranks is a 5-step state: compare with a 5-step run
            params = [w.requires_grad_() for w in _weights(kind)]
            opt = _optimizer(params, kind)
            _train(params, opt, kind, 1, 5)
            st = opt.state[params[0]]["exp_avg"]
            assert torch.equal(b[0]["full"][0], st.codes) and torch.equal(b[0]["full"][1], st.scale)
