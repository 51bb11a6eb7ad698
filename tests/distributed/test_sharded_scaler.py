"""amp_edu.distributed.ShardedGradScaler against torch's ShardedGradScaler, side by side.

One process (a world of one gloo rank): the API, the errors, the CPU update rule. The two-process
FSDP2 comparison (bit for bit) is in tests/distributed/test_experiments.py, which shares one launch
with the lesson's experiments.
"""

import inspect
import math
import warnings

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler as TorchSharded

from amp_edu.distributed.sharded_scaler import ShardedGradScaler as Ours


@pytest.fixture(scope="module")
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def both(**kw):
    return TorchSharded("cpu", **kw), Ours("cpu", **kw)


def test_same_constructor():
    a, b = inspect.signature(TorchSharded.__init__), inspect.signature(Ours.__init__)
    assert list(a.parameters) == list(b.parameters)
    assert [p.default for p in a.parameters.values()] == [p.default for p in b.parameters.values()]


def test_cuda_without_cuda_disables_like_torch():
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    msgs = []
    for cls in (TorchSharded, Ours):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            s = cls()
        msgs.append([str(x.message) for x in w])
        assert not s.is_enabled() and s.get_scale() == 1.0
    assert msgs[0] == msgs[1]


@pytest.mark.parametrize("kw", [dict(growth_factor=1.0), dict(backoff_factor=1.0)])
def test_constructor_errors(kw):
    errs = []
    for cls in (TorchSharded, Ours):
        with pytest.raises(AssertionError) as e:
            cls("cpu", **kw)
        errs.append(str(e.value))
    assert errs[0] == errs[1]


def test_scale_keeps_the_loss_dtype(world_of_one):
    for loss in (torch.tensor(3.0, dtype=torch.float16), torch.tensor(2.0, dtype=torch.bfloat16),
                 torch.tensor(1.5), torch.tensor(1.5, dtype=torch.float16) * 100):
        t, o = both()
        a, b = t.scale(loss), o.scale(loss)
        assert a.dtype == b.dtype == loss.dtype and torch.equal(a, b)      # fp16 150 * 2^16 -> inf in both
    t, o = both()
    xs = [torch.tensor(1.0, dtype=torch.float16), (torch.tensor(2.0),)]
    a, b = t.scale(xs), o.scale(xs)
    assert type(a) is type(b) is list and a[0].dtype == b[0].dtype == torch.float16 and torch.equal(a[1][0], b[1][0])
    for s in both():
        with pytest.raises(ValueError, match="outputs must be a Tensor or an iterable of Tensors"):
            s.scale([1.0])
    errs = []
    for s in both():
        with pytest.raises(AssertionError) as e:
            s.scale(torch.tensor(1.0, device="meta"))
        errs.append(str(e.value))
    assert errs[0] == errs[1] == "Expected supported device, got meta"


def _model(dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to(dtype)


def _errors_of(make_scaler, script):
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    s = make_scaler()
    try:
        script(s, m, opt)
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e)
    return None


def _backward(s, m):
    s.scale(m(torch.ones(3, 4)).sum()).backward()


SCRIPTS = {
    "unscale_ twice": lambda s, m, o: (_backward(s, m), s.unscale_(o), s.unscale_(o)),
    "unscale_ after step": lambda s, m, o: (_backward(s, m), s.step(o), s.unscale_(o)),
    "step twice": lambda s, m, o: (_backward(s, m), s.step(o), s.step(o)),
    "unscale_ before scale": lambda s, m, o: s.unscale_(o),
    "update before scale": lambda s, m, o: s.update(),
    "update without a step": lambda s, m, o: (_backward(s, m), s.update()),
    "closure": lambda s, m, o: (_backward(s, m), s.step(o, closure=lambda: 0.0)),
    "new_scale with 2 elements": lambda s, m, o: (_backward(s, m), s.step(o), s.update(torch.ones(2))),
    "new_scale that requires grad": lambda s, m, o: (_backward(s, m), s.step(o),
                                                     s.update(torch.ones(1, requires_grad=True))),
    "load an empty state dict": lambda s, m, o: s.load_state_dict({}),
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_error_paths_match(world_of_one, name):
    a = _errors_of(lambda: TorchSharded("cpu"), SCRIPTS[name])
    b = _errors_of(lambda: Ours("cpu"), SCRIPTS[name])
    assert a is not None and a == b


def _drive(cls, *, dtype, kw, steps, infs, factor_at=None):
    m = _model(dtype)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    s = cls("cpu", **kw)
    g = torch.Generator().manual_seed(1)
    rec = []
    for step in range(steps):
        opt.zero_grad()
        x = torch.randn(5, 4, generator=g).to(dtype)
        s.scale(m(x).float().sum()).backward()
        if step in infs:
            m[0].weight.grad.view(-1)[step % 3] = (math.inf, -math.inf, math.nan)[step % 3]
        if step % 4 == 1:
            s.unscale_(opt)
        s.step(opt)
        s.update(factor_at.get(step)) if factor_at and step in factor_at else s.update()
        rec.append((s.get_scale(), s._get_growth_tracker()))
    return rec, [p.detach().clone() for p in m.parameters()], s.state_dict()


@pytest.mark.parametrize("dtype, kw, infs", [
    (torch.float32, dict(growth_interval=2), {3, 4, 9}),
    (torch.float16, dict(init_scale=2.0 ** 8, growth_interval=3), {2, 7}),            # fp16 gradients allowed
    (torch.float32, dict(growth_factor=1.7, backoff_factor=0.3, growth_interval=2, init_scale=1000.0), {5}),
    (torch.float32, dict(init_scale=2.0 ** 126, growth_interval=1), set()),             # grows to inf, like torch
])
def test_one_rank_trajectories_are_bit_identical(world_of_one, dtype, kw, infs):
    a = _drive(TorchSharded, dtype=dtype, kw=kw, steps=12, infs=infs, factor_at={6: 512.0})
    b = _drive(Ours, dtype=dtype, kw=kw, steps=12, infs=infs, factor_at={6: 512.0})
    assert a[0] == b[0]
    assert all(torch.equal(p, q) for p, q in zip(a[1], b[1]))
    assert a[2] == b[2]


@pytest.mark.parametrize("scale, tracker, found, interval", [
    (3.0e38, 0, 0.0, 1),              # torch's sharded CPU rule grows past float32's max: inf
    (1000.0, 3, 0.0, 4), (1000.0, 3, 1.0, 4), (1000.0, 3, 2.0, 4), (1000.0, 2, 0.0, 4),
    (3.0, 0, 0.5, 2),                 # a found_inf below 1 is not an overflow for this rule
])
def test_cpu_update_rule_matches_torchs(scale, tracker, found, interval):
    out = []
    for s, rule in ((TorchSharded("cpu", growth_interval=interval, growth_factor=1.7, backoff_factor=0.3),
                     "_amp_update_scale_cpu_"),
                    (Ours("cpu", growth_interval=interval, growth_factor=1.7, backoff_factor=0.3), "_update_scale_cpu_")):
        s._lazy_init_scale_growth_tracker(torch.device("cpu"))
        s._scale.fill_(scale)
        s._growth_tracker.fill_(tracker)
        getattr(s, rule)(torch.full((1,), found))
        out.append((s.get_scale(), s._get_growth_tracker()))
    assert out[0] == out[1]
    if scale == 3.0e38:
        assert math.isinf(out[1][0])


def test_state_dict_round_trip(world_of_one):
    t, o = both(init_scale=128.0, growth_interval=7)
    assert t.state_dict() == o.state_dict()
    o2 = Ours("cpu")
    o2.load_state_dict(t.state_dict())
    assert o2.state_dict() == t.state_dict()


def test_scaled_outputs_keep_their_own_copy_of_the_scale(world_of_one):
    """``l1, l2 = s.scale([a, b])`` saves a copy of S for backward (torch's replicator copies even
    on S's own device), so a later ``load_state_dict`` writing S in place does not break backward."""
    grads = []
    for cls in (TorchSharded, Ours):
        m = _model()
        s = cls("cpu")
        l1, l2 = s.scale([m(torch.ones(3, 4)).sum(), m(torch.ones(3, 4)).mean()])
        s.load_state_dict(TorchSharded("cpu", init_scale=2.0 ** 8).state_dict())
        (l1 + l2).backward()
        grads.append([p.grad.clone() for p in m.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_sparse_gradients_coalesced_and_unscaled_like_torch(world_of_one, dtype):
    """A sparse gradient with duplicate indices: torch's class coalesces an fp16 one in fp32
    (rounded once); ours must give the same values, found_inf and parameter."""
    out = []
    for cls in (TorchSharded, Ours):
        p = torch.nn.Parameter(torch.zeros(3, dtype=dtype))
        s = cls("cpu", init_scale=4.0)
        s.scale(torch.ones(())).requires_grad_()           # initialises S
        # index 0 twice: 120000 overflows fp16; index 2: 1 + 2^-11 + 2^-11 is 1 summed in fp16,
        # 1 + 2^-10 summed in fp32 and rounded once (the route torch's class takes)
        vals = torch.tensor([60000.0, 60000.0, 1.0, 2.0 ** -11, 2.0 ** -11], dtype=dtype)
        p.grad = torch.sparse_coo_tensor(torch.tensor([[0, 0, 2, 2, 2]]), vals, (3,))
        opt = torch.optim.SGD([p], lr=1.0)
        s.unscale_(opt)
        out.append((p.grad.to_dense().clone(), float(s._found_inf_per_device(opt)[torch.device("cpu")].sum())))
    assert torch.equal(out[0][0], out[1][0]) and out[0][1] == out[1][1]
    assert out[1][1] == (1.0 if dtype == torch.float16 else 0.0)
    assert out[1][0][2].item() == (1.0 + 2.0 ** -10) / 4
