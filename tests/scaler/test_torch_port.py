"""PyTorch's own GradScaler unit tests, ported to run on a CPU against amp_edu's scaler.

The scenarios are those of ``TestTorchDeviceType.test_grad_scaling_*``, ``test_grad_scaler_*`` and
``test_pickle_gradscaler`` in PyTorch's ``test/test_torch.py``, and of
``test_grad_scaling_autocast_fused_optimizers`` / ``test_grad_scaler_with_preset_grad_scale`` in
``test/test_cuda.py`` (there on CUDA; here on the CPU, where torch 2.13 has fp16 autocast and fused
Adam/AdamW/SGD). They are PyTorch's public specification of the scaler's behaviour, written by
its authors, so passing them says more than tests we wrote ourselves.

Every test takes the ``impl`` fixture and runs twice: once with torch's ``torch.amp.GradScaler``
and its private kernels (which proves the port is faithful: torch's own class must pass), and once
with :mod:`amp_edu.scaler` substituted. Left out: ``test_grad_scaling_multigpu`` (two GPUs),
``test_grad_scaler_deprecated_warning`` (about the ``torch.cuda.amp.GradScaler`` alias, which
amp_edu does not provide) and ``test_grad_scaling_device_as_key`` (tests ``torch.device``
hashing, no scaler involved).
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass
from functools import partial
from itertools import chain
from typing import Any, Callable

import pytest
import torch
from torch.testing._internal.common_cuda import _create_scaling_case, _create_scaling_models_optimizers
from torch.testing._internal.common_optimizers import TensorTracker, optim_db

from amp_edu import scaler as amp_scaler

DEVICE = "cpu"
OPTIMS = [o for o in optim_db if o.optim_cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW)]


def optim_inputs(optim_info):
    """The first (default) and last (most options: amsgrad / nesterov) of torch's optimizer
    inputs; all of them would take a minute per test on a CPU."""
    inputs = optim_info.optim_inputs_func(device=DEVICE)
    return [inputs[0], inputs[-1]]


@dataclass
class Impl:
    """One implementation of the scaler and its two kernels."""

    name: str
    GradScaler: type
    unscale_kernel: Callable[..., Any]        # _amp_foreach_non_finite_check_and_unscale_
    update_kernel: Callable[..., Any]         # _amp_update_scale_
    refresh_state: Callable[[], dict]         # _refresh_per_optimizer_state


TORCH = Impl("torch", torch.amp.GradScaler, torch._amp_foreach_non_finite_check_and_unscale_,
             torch._amp_update_scale_, torch.amp.grad_scaler._refresh_per_optimizer_state)
AMP_EDU = Impl("amp_edu", amp_scaler.GradScaler, amp_scaler.non_finite_check_and_unscale_,
               amp_scaler.update_scale_, amp_scaler._refresh_per_optimizer_state)


@pytest.fixture(params=[TORCH, AMP_EDU], ids=lambda i: i.name)
def impl(request) -> Impl:
    return request.param


@pytest.fixture(autouse=True)
def seeded():
    """The scenarios draw random data; a fixed generator makes both runs see the same numbers."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        yield


class _Asserts:
    """The few ``unittest.TestCase`` assertions torch's tests (and ``TensorTracker``) use."""

    @staticmethod
    def assertEqual(actual, expected, *, atol=None, rtol=None, msg=None):
        if isinstance(actual, torch.Tensor) or isinstance(expected, torch.Tensor):
            actual, expected = torch.as_tensor(actual), torch.as_tensor(expected)
            if actual.shape != expected.shape and expected.numel() == 1:
                expected = expected.expand_as(actual)
            if atol is None and rtol is None:          # TestCase's defaults for the dtype
                torch.testing.assert_close(actual, expected.to(actual.dtype), msg=msg)
            else:
                torch.testing.assert_close(actual, expected.to(actual.dtype), atol=atol or 0, rtol=rtol or 0,
                                           msg=msg)
        else:
            assert actual == expected, msg or f"{actual!r} != {expected!r}"

    @staticmethod
    def assertTrue(value, msg=None):
        assert value, msg

    @staticmethod
    def assertGreater(a, b, msg=None):
        assert a > b, msg


tc = _Asserts()


# ---------------------------------------------------------------------------------------------
# The kernels
# ---------------------------------------------------------------------------------------------

def test_grad_scaling_unscale(impl):
    """Unscale with a (1,)-shaped inv_scale, contiguous and strided grads, inf and NaN anywhere,
    mixed dtypes; then ``_unscale_grads_`` on a "perfect storm" of dtypes and layouts."""
    dtype = torch.float
    inv_scale = torch.full((1,), 0.25, dtype=torch.float, device=DEVICE)
    found_inf = torch.full((1,), 0.0, dtype=torch.float, device=DEVICE)
    size = 20
    g = torch.full((size, size), 4.0, dtype=dtype, device=DEVICE)
    ginf = g.clone()
    ginf[2, 2] = float("inf")
    gnan = g.clone()
    gnan[2, 2] = float("nan")
    cases = (
        ([g.clone(), g.clone()], False),
        ([g.clone(), g.clone().t()], False),
        ([g.clone(), g.clone()[:, :5]], False),
        ([g.clone()[:, :5], g.clone()[:, :5]], False),
        ([g.clone(), ginf.clone()], True),
        ([g.clone(), gnan.clone()], True),
        ([g.clone(), ginf.clone()[:, :5]], True),
        ([g.clone(), gnan.clone()[:, :5]], True),
        ([ginf.clone(), g.clone()[:, :5]], True),
        ([ginf.clone()[:, :5], g.clone()[:, :5]], True),
    )
    for grads, has_inf in cases:
        found_inf.zero_()
        impl.unscale_kernel(grads, found_inf, inv_scale)
        if has_inf:
            tc.assertEqual(found_inf, 1.0)
        else:
            tc.assertEqual(found_inf, 0.0)
            for grad in grads:
                tc.assertEqual(grad, torch.ones_like(grad), rtol=1e-5, atol=1e-7)

    grads = [g.clone(), g.to(dtype=torch.float16)]          # mixed dtypes in one raw call
    impl.unscale_kernel(grads, found_inf, inv_scale)
    for grad in grads:
        tc.assertEqual(grad, torch.ones_like(grad), rtol=1e-5, atol=1e-7)

    def perfect_storm_grads(inject_inf):
        grads = [g.clone(), g.clone()[:, :5], g.to(dtype=torch.float16), g.to(dtype=torch.float16)]
        if inject_inf >= 0:
            grads[inject_inf][2, 2] = float("inf")
        return grads

    scaler = impl.GradScaler(device=DEVICE)
    dummy_params = [torch.empty_like(g) for g in perfect_storm_grads(-1)]
    dummy_opt = torch.optim.SGD(dummy_params, lr=1.0)
    for inject_inf in range(-1, len(dummy_params)):
        found_inf = torch.full((1,), 0.0, dtype=torch.float, device=DEVICE)
        grads = perfect_storm_grads(inject_inf)
        for i, p in enumerate(dummy_params):
            p.grad = grads[i]
        found_inf_per_device = scaler._unscale_grads_(dummy_opt, inv_scale, found_inf, True)
        if inject_inf < 0:
            assert sum(v.item() for v in found_inf_per_device.values()) == 0
            for grad in grads:
                tc.assertEqual(grad, torch.ones_like(grad), rtol=1e-5, atol=1e-7)
        else:
            assert sum(v.item() for v in found_inf_per_device.values()) == 1


def test_grad_scaling_update_scale(impl):
    """The update kernel on (1,)-shaped tensors: two good steps grow, one bad step backs off."""
    growth, backoff, growth_interval = 2.0, 0.25, 2
    scale = torch.full((1,), 4.0, dtype=torch.float, device=DEVICE)
    growth_tracker = torch.full((1,), 0.0, dtype=torch.int32, device=DEVICE)
    found_inf = torch.full((1,), 0.0, dtype=torch.float, device=DEVICE)

    impl.update_kernel(scale, growth_tracker, found_inf, growth, backoff, growth_interval)
    tc.assertEqual(growth_tracker, 1)
    tc.assertEqual(scale, 4.0)
    impl.update_kernel(scale, growth_tracker, found_inf, growth, backoff, growth_interval)
    tc.assertEqual(growth_tracker, 0)
    tc.assertEqual(scale, 8.0)

    found_inf.fill_(1.0)
    impl.update_kernel(scale, growth_tracker, found_inf, growth, backoff, growth_interval)
    tc.assertEqual(growth_tracker, 0)
    tc.assertEqual(scale, 2.0)


def test_grad_scaling_unscale_sparse(impl):
    """Sparse gradients: unscaled through their values; an fp16 gradient with duplicate indices
    is coalesced first, so an overflow of the *sum* (64000 + 64000 > fp16 max) is found."""
    dtype = torch.float
    scaler = impl.GradScaler(device=DEVICE)
    inv_scale = torch.full((1,), 0.25, dtype=dtype, device=DEVICE)
    found_inf = torch.empty((1,), dtype=dtype, device=DEVICE)
    cur = found_inf.device
    i = torch.tensor([[0, 1, 1], [2, 0, 2]], device=DEVICE, dtype=torch.int64)
    v = torch.tensor([16.0, 32.0, 64.0], device=DEVICE, dtype=torch.float)
    s = torch.sparse_coo_tensor(i, v, torch.Size([2, 3]), device=DEVICE, dtype=dtype)

    p = s.clone()
    assert p.is_sparse
    opt = torch.optim.SGD([p], lr=1.0)
    p.grad = s.clone()
    found_inf.zero_()
    found_inf = scaler._unscale_grads_(opt, inv_scale, found_inf, False)[cur]
    tc.assertEqual(found_inf, 0.0)
    tc.assertEqual(p.grad.to_dense(), (s / 4).to_dense())

    for bad in (float("inf"), float("nan")):
        v = torch.tensor([16.0, 32.0, bad])
        p.grad = torch.sparse_coo_tensor(i, v, torch.Size([2, 3]), device=DEVICE, dtype=dtype)
        found_inf.zero_()
        found_inf = scaler._unscale_grads_(opt, inv_scale, found_inf, False)[cur]
        tc.assertEqual(found_inf, 1.0)

    p = s.clone().half()
    assert p.is_sparse
    opt = torch.optim.SGD([p], lr=1.0)
    p.grad = s.clone().half()
    found_inf.zero_()
    found_inf = scaler._unscale_grads_(opt, inv_scale, found_inf, True)[cur]
    tc.assertEqual(found_inf, 0.0)
    tc.assertEqual(p.grad.to_dense(), (s.half() / 4).to_dense())

    i = torch.tensor([[0, 1, 0], [2, 0, 2]])
    v = torch.tensor([64000.0, 32.0, 64000.0])
    p.grad = torch.sparse_coo_tensor(i, v, torch.Size([2, 3]), device=DEVICE, dtype=torch.float16)
    found_inf.zero_()
    found_inf = scaler._unscale_grads_(opt, inv_scale, found_inf, True)[cur]
    tc.assertEqual(found_inf, 1.0)


# ---------------------------------------------------------------------------------------------
# The scaler's state
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("lazy_init_scale", [True, False])
def test_grad_scaling_state_dict(impl, lazy_init_scale):
    GradScaler = partial(impl.GradScaler, device=DEVICE)
    s0 = GradScaler(init_scale=3.0, growth_factor=4.0, backoff_factor=0.5, growth_interval=2)
    s1 = GradScaler(init_scale=6.0, growth_factor=7.0, backoff_factor=0.8, growth_interval=1)
    s1._init_growth_tracker = 7              # a value for load_state_dict to overwrite
    if lazy_init_scale:
        s1.scale(torch.full((1,), 4.0, dtype=torch.float32, device=DEVICE))
        assert isinstance(s1._scale, torch.FloatTensor)
    s1.load_state_dict(s0.state_dict())
    assert s1.get_scale() == 3.0
    assert s1.get_growth_factor() == 4.0
    assert s1.get_backoff_factor() == 0.5
    assert s1.get_growth_interval() == 2
    assert s1._init_growth_tracker == 0


def test_grad_scaling_scale(impl):
    """Nested tuples and lists of outputs are scaled, structure kept; the scale lives on the
    device of the first output."""
    scaler = impl.GradScaler(device=DEVICE, init_scale=2.0)
    t0 = torch.full((1,), 4.0, dtype=torch.float32, device=DEVICE)
    t1 = torch.full((1,), 4.0, dtype=torch.float32, device=DEVICE)
    outputs = (t1.clone(), (t0.clone(), t1.clone()), [t0.clone(), (t1.clone(), t0.clone())])
    outputs = scaler.scale(outputs)
    assert (outputs[0] == 8.0 and outputs[1][0] == 8.0 and outputs[1][1] == 8.0
            and outputs[2][0] == 8.0 and outputs[2][1][0] == 8.0 and outputs[2][1][1] == 8.0)
    assert scaler._scale.device == t1.device


def test_grad_scale_will_not_overflow(impl):
    """A growth that would take the float32 scale to inf is not applied."""
    model = torch.nn.Linear(5, 1).to(DEVICE)
    optimizer = torch.optim.Adam(model.parameters())
    scaler = impl.GradScaler(device=DEVICE, growth_interval=1, growth_factor=2 ** 4, init_scale=1e38)
    optimizer.zero_grad()
    x = torch.randn(1, 5).to(DEVICE)
    y = 1e-30 * torch.randn(1, 1).to(DEVICE)
    loss = ((model(x) - y) ** 2).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler._scale != float("inf") and scaler._scale != float("nan")


@pytest.mark.parametrize("lazy_init_scale", [True, False])
def test_pickle_gradscaler(impl, lazy_init_scale):
    a = impl.GradScaler(device=DEVICE, init_scale=3.0, growth_factor=4.0, backoff_factor=0.5, growth_interval=2)
    assert a.is_enabled()
    if lazy_init_scale:
        a.scale(torch.tensor([4.0], dtype=torch.float32, device=DEVICE))
        assert a._scale.device.type == DEVICE
    b = pickle.loads(pickle.dumps(a))
    assert b.is_enabled() == a.is_enabled()
    assert b.get_scale() == 3.0
    assert b.get_growth_factor() == 4.0
    assert b.get_backoff_factor() == 0.5
    assert b.get_growth_interval() == 2
    assert b._init_growth_tracker == 0
    # a dummy key exercises the defaultdict's factory; torch compares with *its* fresh state,
    # so amp_edu's per-optimizer stages must be torch's OptState members
    assert b._per_optimizer_states["fdsa"] == torch.amp.grad_scaler._refresh_per_optimizer_state()
    if lazy_init_scale:
        assert b.scale(torch.tensor([4.0], dtype=torch.float32, device=DEVICE)) == 12.0


# ---------------------------------------------------------------------------------------------
# Training scenarios: a scaled run against an unscaled control run (torch's _run_scaling_case)
# ---------------------------------------------------------------------------------------------

def _run_scaling_case(impl, run, unskipped, skipped, atol=1e-7, optimizer_ctor=torch.optim.SGD,
                      optimizer_kwargs=None):
    """Run ``run`` once without the scaling API (control) and once with it, for an enabled and
    a disabled scaler; the scale must have grown ``unskipped`` times and backed off ``skipped``
    times, and gradients, optimizer state and parameters must match the control's."""
    for enabled in (True, False):
        (mod_control, mod_scaling, opt_control, opt_scaling, data, loss_fn, skip_iter) = _create_scaling_case(
            device=DEVICE, optimizer_ctor=optimizer_ctor, optimizer_kwargs=optimizer_kwargs)
        # a modest initial scale and an unrealistically fast growth magnify growth-handling errors
        scaler = impl.GradScaler(device=DEVICE, init_scale=128.0, growth_factor=2.0, enabled=enabled,
                                 growth_interval=1)
        _ = run(DEVICE, data, mod_control, opt_control, scaler, loss_fn, skip_iter, False)
        ret = run(DEVICE, data, mod_scaling, opt_scaling, scaler, loss_fn, skip_iter, True)
        scaler = ret if ret else scaler            # run() may hand back a new (unpickled) scaler
        if enabled:
            net_growth = scaler.get_growth_factor() ** unskipped if unskipped > 0 else 1.0
            net_backoff = scaler.get_backoff_factor() ** skipped if skipped > 0 else 1.0
            assert scaler.get_scale() == (128.0 * net_growth * net_backoff)
        else:
            assert scaler.get_scale() == 1.0
        for c, s in zip(mod_control.parameters(), mod_scaling.parameters()):
            tc.assertEqual(c.grad, s.grad, atol=atol, rtol=1e-05)
            c_state, s_state = opt_control.state[c], opt_scaling.state[s]
            for k in c_state:
                tc.assertEqual(c_state[k], s_state[k], atol=atol, rtol=1e-05, msg=k)
            tc.assertEqual(c, s, atol=atol, rtol=1e-05)


def _autocast_run(try_pickle: list):
    def run(device, data, model, optimizer, scaler, loss_fn, skip_iter, try_scaling_api):
        for i, (input, target) in enumerate(data):
            optimizer.zero_grad()
            with torch.autocast(device_type=device, dtype=torch.half, enabled=try_scaling_api):
                output = model(input)
                loss = loss_fn(output, target)
            if try_scaling_api:
                scaler.scale(loss).backward()
                if i == skip_iter and scaler.is_enabled():
                    with torch.no_grad():
                        model[1].weight.grad.fill_(float("inf"))
                scaler.step(optimizer)
                scaler.update()
                if try_pickle[0]:
                    scaler = pickle.loads(pickle.dumps(scaler))
            else:
                loss.backward()
                if (not scaler.is_enabled()) or (i != skip_iter):
                    optimizer.step()
        return scaler
    return run


def _scaled_run_state(impl, run, optimizer_ctor, optimizer_kwargs):
    """Parameters, optimizer state and scale after the scaled run of ``run`` with ``impl``'s scaler."""
    with torch.random.fork_rng():
        torch.manual_seed(1)
        (_, model, _, optimizer, data, loss_fn, skip_iter) = _create_scaling_case(
            device=DEVICE, optimizer_ctor=optimizer_ctor, optimizer_kwargs=optimizer_kwargs)
    scaler = impl.GradScaler(device=DEVICE, init_scale=128.0, growth_factor=2.0, growth_interval=1)
    scaler = run(DEVICE, data, model, optimizer, scaler, loss_fn, skip_iter, True) or scaler
    state = [v for p in model.parameters() for v in optimizer.state[p].values() if isinstance(v, torch.Tensor)]
    return scaler.get_scale(), [p.detach().clone() for p in model.parameters()] + state


@pytest.mark.parametrize("optim_info", OPTIMS, ids=lambda o: o.optim_cls.__name__)
def test_grad_scaling_autocast(impl, optim_info):
    """fp16 autocast + scaler against fp32 control, for every optimizer input of torch's optim_db,
    with the for-loop, foreach and fused implementations, and with a pickle round trip each step.

    CPU adaptation: the comparison with the fp32 control (``_run_scaling_case``) is made for SGD's
    default input, at 2e-3 rather than 1e-3 (CPU fp16 matmuls round differently from cuBLAS's;
    torch's own scaler lands 1.1e-3 from the control). With momentum, or Adam/AdamW (which torch's
    CUDA test already expects to *miss* the control), fp16 rounding is amplified past any useful
    tolerance, for torch's scaler as for ours; there, and everywhere, the run must instead end
    bit-identical to the same run with torch's scaler."""
    optimizer_ctor = optim_info.optim_cls
    for n, optim_input in enumerate(optim_inputs(optim_info)):
        for foreach, fused in ((False, False), (True, False), (False, True)):
            kwargs = dict(optim_input.kwargs, foreach=foreach, fused=fused)
            for try_pickle in ([False], [True]):
                run = _autocast_run(try_pickle)
                if optimizer_ctor is torch.optim.SGD and n == 0:
                    _run_scaling_case(impl, run, unskipped=3, skipped=1, atol=2e-3,
                                      optimizer_ctor=optimizer_ctor, optimizer_kwargs=kwargs)
                if impl is TORCH:
                    continue                 # torch against itself proves nothing
                theirs = _scaled_run_state(TORCH, run, optimizer_ctor, kwargs)
                ours = _scaled_run_state(impl, run, optimizer_ctor, kwargs)
                assert ours[0] == theirs[0] == 128.0 * 2.0 ** 3 * 0.5
                for a, b in zip(ours[1], theirs[1], strict=True):
                    assert torch.equal(a, b), (optim_input.desc, foreach, fused, try_pickle)


def _fused_run_state(impl, optimizer_ctor, kwargs, separate_unscale):
    """Parameters, optimizer state and scale after the fused optimizer's scaled run with ``impl``'s scaler."""
    with torch.random.fork_rng():
        torch.manual_seed(1)
        (_, model, _, optimizer, data, loss_fn, _) = _create_scaling_case(
            optimizer_ctor=optimizer_ctor, optimizer_kwargs=kwargs, device=DEVICE)
    scaler = impl.GradScaler(DEVICE, init_scale=128.0)
    for input, target in data:
        optimizer.zero_grad()
        with torch.autocast(device_type=DEVICE, dtype=torch.half):
            loss = loss_fn(model(input), target)
        scaler.scale(loss).backward()
        if separate_unscale:
            scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
    state = [v for p in model.parameters() for v in optimizer.state[p].values() if isinstance(v, torch.Tensor)]
    return scaler.get_scale(), [p.detach().clone() for p in model.parameters()] + state


@pytest.mark.parametrize("optim_info", OPTIMS, ids=lambda o: o.optim_cls.__name__)
def test_grad_scaling_autocast_fused_optimizers(impl, optim_info):
    """From test_cuda.py, on the CPU: a fused optimizer (which unscales inside its own kernel from
    the ``grad_scale``/``found_inf`` the scaler hands it) against the for-loop one, step by step,
    with and without a separate ``unscale_``.

    torch's test compares one scaler with itself on two optimizer paths, so a mistake both paths
    share (the scale's growth, the inverse handed to the fused kernel) would pass it: with
    amp_edu's scaler the fused run must also end bit-identical to the same run with torch's."""
    optimizer_ctor = optim_info.optim_cls
    for optim_input in optim_inputs(optim_info):
        kwargs = dict(optim_input.kwargs, fused=True)
        for separate_unscale in (True, False):
            (mod_control, mod_scaling, opt_control, opt_scaling, data, loss_fn, _) = _create_scaling_case(
                optimizer_ctor=optimizer_ctor, optimizer_kwargs=kwargs, device=DEVICE)
            control_kwargs = copy.deepcopy(kwargs)
            control_kwargs["fused"] = False
            control_kwargs.setdefault("lr", 1.0)
            opt_control = optimizer_ctor(mod_control.parameters(), **control_kwargs)
            scaler_scaling = impl.GradScaler(DEVICE, init_scale=128.0)
            scaler_control = impl.GradScaler(DEVICE, init_scale=128.0)
            tracker = TensorTracker()
            for input, target in data:
                opt_control.zero_grad()
                with torch.autocast(device_type=DEVICE, dtype=torch.half):
                    loss_control = loss_fn(mod_control(input), target)
                scaler_control.scale(loss_control).backward()
                scaler_control.step(opt_control)
                scaler_control.update()

                opt_scaling.zero_grad()
                with torch.autocast(device_type=DEVICE, dtype=torch.half):
                    loss_scaling = loss_fn(mod_scaling(input), target)
                scaler_scaling.scale(loss_scaling).backward()
                if separate_unscale:
                    scaler_scaling.unscale_(opt_scaling)
                scaler_scaling.step(opt_scaling)
                scaler_scaling.update()

                tracker.add(loss_control)
                tracker.pop_check_set(loss_scaling, tc)
                for param_control, param_scaling in zip(mod_control.parameters(), mod_scaling.parameters()):
                    tracker.add(param_control.grad)
                    tracker.pop_check_set(param_scaling.grad, tc)
                    tracker.add(param_control)
                    tracker.pop_check_set(param_scaling, tc)
                    state_control, state_scaling = opt_control.state[param_control], opt_scaling.state[param_scaling]
                    for k in state_control:
                        actual = state_scaling[k]
                        if k == "step":
                            actual = actual.squeeze()
                        tracker.add(state_control[k])
                        tracker.pop_check_set(actual, tc)
            if impl is TORCH:
                continue                     # torch against itself proves nothing
            theirs = _fused_run_state(TORCH, optimizer_ctor, kwargs, separate_unscale)
            ours = _fused_run_state(impl, optimizer_ctor, kwargs, separate_unscale)
            assert ours[0] == theirs[0]
            for a, b in zip(ours[1], theirs[1], strict=True):
                assert torch.equal(a, b), (optim_input.desc, separate_unscale)


@pytest.mark.parametrize("optim_info", OPTIMS, ids=lambda o: o.optim_cls.__name__)
def test_grad_scaler_with_preset_grad_scale(impl, optim_info):
    """From test_cuda.py: a wrapper (ZeRO) that already set ``opt.grad_scale`` has it multiplied
    by the scaler's scale, so the fused step unscales by the product."""
    weight = torch.ones((5, 5), device=DEVICE, requires_grad=True)
    weight.grad = torch.full_like(weight, fill_value=15)
    opt = optim_info.optim_cls([weight], lr=0.1, fused=True)
    scaler = impl.GradScaler(DEVICE, init_scale=5)
    scaler.scale(torch.ones(5))
    opt.grad_scale = torch.Tensor([3]).to(DEVICE)
    scaler.step(opt)
    tc.assertEqual(weight.grad, torch.full_like(weight, fill_value=1))


def test_grad_scaling_clipping(impl):
    def run(device, data, model, optimizer, scaler, loss_fn, skip_iter, try_scaling_api):
        max_norm = 0.2
        for i, (input, target) in enumerate(data):
            optimizer.zero_grad()
            loss = loss_fn(model(input), target)
            if try_scaling_api:
                scaler.scale(loss).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm * scaler.get_scale())
                if i == skip_iter and scaler.is_enabled():
                    model[1].weight.grad.data.fill_(float("inf"))
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                if (not scaler.is_enabled()) or (i != skip_iter):
                    optimizer.step()

    _run_scaling_case(impl, run, unskipped=3, skipped=1, atol=1e-5)


def test_grad_scaling_clipping_separate_unscale(impl):
    def run(device, data, model, optimizer, scaler, loss_fn, skip_iter, try_scaling_api):
        max_norm = 0.2
        for i, (input, target) in enumerate(data):
            optimizer.zero_grad()
            loss = loss_fn(model(input), target)
            if try_scaling_api:
                scaler.scale(loss).backward()
                if i == skip_iter and scaler.is_enabled():
                    model[1].weight.grad.data.fill_(float("inf"))
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, error_if_nonfinite=False)
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                if (not scaler.is_enabled()) or (i != skip_iter):
                    optimizer.step()

    _run_scaling_case(impl, run, unskipped=3, skipped=1)


def test_grad_scaling_penalty(impl):
    """A gradient penalty: autograd.grad of the scaled loss, unscaled by hand, then backward."""
    def run(device, data, model, optimizer, scaler, loss_fn, skip_iter, try_scaling_api):
        for i, (input, target) in enumerate(data):
            optimizer.zero_grad()
            loss = loss_fn(model(input), target)
            if try_scaling_api:
                grad_params = torch.autograd.grad(scaler.scale(loss), model.parameters(), create_graph=True)
                inv_scale = 1.0 / scaler.get_scale()
                grad_params = [p * inv_scale for p in grad_params]
            else:
                grad_params = torch.autograd.grad(loss, model.parameters(), create_graph=True)
            grad_norm = 0
            for grad in grad_params:
                grad_norm += grad.pow(2).sum()
            loss = loss + grad_norm.sqrt()
            if try_scaling_api:
                scaler.scale(loss).backward()
                if i == skip_iter and scaler.is_enabled():
                    model[1].weight.grad.data.fill_(float("inf"))
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                if (not scaler.is_enabled()) or (i != skip_iter):
                    optimizer.step()

    _run_scaling_case(impl, run, unskipped=3, skipped=1)


def test_grad_scaling_accumulation(impl):
    def run(device, data, model, optimizer, scaler, loss_fn, skip_iter, try_scaling_api):
        iters_to_accumulate = 2
        for i, (input, target) in enumerate(data):
            loss = loss_fn(model(input), target) / iters_to_accumulate
            if try_scaling_api:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            if (i + 1) % iters_to_accumulate == 0:
                if try_scaling_api:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                optimizer.zero_grad()

    _run_scaling_case(impl, run, unskipped=2, skipped=0)


@pytest.mark.parametrize("enabled", [True, False])
def test_grad_scaling_multiple(impl, enabled):
    """Two models, two optimizers, two losses that both reach both models; one optimizer is
    unscaled separately; an inf in one model's gradient skips only that optimizer's step."""
    mod_control0, mod_scaling0, opt_control0, opt_scaling0, data, loss_fn, skip_iter = _create_scaling_case(DEVICE)
    mod_control1, mod_scaling1, opt_control1, opt_scaling1 = _create_scaling_models_optimizers(DEVICE)
    scaler = impl.GradScaler(device=DEVICE, init_scale=128.0, growth_factor=2.0, enabled=enabled,
                             growth_interval=1)

    def run(model0, model1, optimizer0, optimizer1, try_scaling_api):
        for i, (input, target) in enumerate(data):
            optimizer0.zero_grad()
            optimizer1.zero_grad()
            output0, output1 = model0(input), model1(input)
            loss0 = loss_fn(0.3 * output0 + 0.7 * output1, target)
            loss1 = loss_fn(0.6 * output0 - 0.4 * output1, target)
            if try_scaling_api:
                scaler.scale(loss0).backward(retain_graph=True)
                scaler.scale(loss1).backward()
                if i == skip_iter and scaler.is_enabled():
                    model1[1].weight.grad.data.fill_(float("inf"))
                scaler.unscale_(optimizer0)
                scaler.step(optimizer0)
                scaler.step(optimizer1)
                scaler.update()
            else:
                loss0.backward(retain_graph=True)
                loss1.backward()
                optimizer0.step()
                if (not scaler.is_enabled()) or (i != skip_iter):
                    optimizer1.step()

    run(mod_control0, mod_control1, opt_control0, opt_control1, False)
    run(mod_scaling0, mod_scaling1, opt_scaling0, opt_scaling1, True)
    expected = 128.0 * scaler.get_growth_factor() ** 3 * scaler.get_backoff_factor() ** 1 if enabled else 1.0
    assert scaler.get_scale() == expected
    for c, s in zip(chain(mod_control0.parameters(), mod_control1.parameters()),
                    chain(mod_scaling0.parameters(), mod_scaling1.parameters())):
        tc.assertEqual(c, s, rtol=1e-5, atol=1e-7)


def test_grad_scaler_pass_itself(impl):
    """Optimizers with ``_step_supports_amp_scaling``: an old-style one whose ``step`` takes
    ``grad_scaler=`` gets the scaler itself (with a FutureWarning); a new-style one gets
    ``grad_scale`` and ``found_inf`` tensors as attributes."""
    seen = {}

    class _PlaceHolderOptimizer(torch.optim.Optimizer):
        def __init__(self, params, defaults=None):
            super().__init__(params, defaults or {})
            self._step_supports_amp_scaling = True

    class Optimizer1(_PlaceHolderOptimizer):
        def step(self, closure=None, *, grad_scaler=None):
            seen["o1"] = (isinstance(grad_scaler, impl.GradScaler), hasattr(self, "grad_scale"),
                          hasattr(self, "found_inf"))

    class Optimizer2(_PlaceHolderOptimizer):
        def step(self, closure=None):
            seen["o2"] = (isinstance(self.grad_scale, torch.Tensor), isinstance(self.found_inf, torch.Tensor))

    x = torch.randn(4, 4).to(DEVICE)
    m = torch.nn.Linear(4, 1).to(DEVICE)
    o1, o2 = Optimizer1(m.parameters()), Optimizer2(m.parameters())
    scaler = impl.GradScaler(device=DEVICE, init_scale=2.0)
    with torch.autocast(device_type=DEVICE, dtype=torch.half):
        loss = m(x).mean()
    scaler.scale(loss).backward()
    with pytest.warns(FutureWarning):
        scaler.step(o1)
    scaler.step(o2)
    scaler.update()
    assert seen == {"o1": (True, False, False), "o2": (True, True)}
