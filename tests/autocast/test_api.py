"""amp_edu.autocast: the API, torch's eligibility rules, promotion, the ban, the cache, nesting,
threads and custom_fwd/custom_bwd — each compared with torch.autocast where torch can run it
(the CPU policy), and with torch's documented behaviour for the CUDA policy."""

import threading
import warnings

import pytest
import torch
import torch.nn.functional as F

import amp_edu.autocast as ac
import amp_edu.autocast.mode as mode_mod
import amp_edu.autocast.state as state_mod
from amp_edu.autocast import autocast, policy
from amp_edu.autocast import weight_cache as _cache_for_tests
from amp_edu.autocast.custom import custom_bwd, custom_fwd

BF16, FP16, FP32, FP64 = torch.bfloat16, torch.float16, torch.float32, torch.float64


def both(fn, dtype=BF16):
    """fn() under torch.autocast('cpu') and under ours (CPU policy)."""
    with torch.autocast("cpu", dtype=dtype):
        t = fn()
    with autocast("cpu", dtype=dtype):
        o = fn()
    return t, o


# --- defaults, validation, decorator --------------------------------------------------------

def test_defaults_match_torch():
    assert ac.get_autocast_dtype("cpu") == torch.get_autocast_dtype("cpu") == BF16
    assert ac.get_autocast_dtype("cuda") == FP16
    assert not ac.is_autocast_enabled("cpu") and ac.is_autocast_cache_enabled()
    a = autocast("cpu")
    assert a.fast_dtype == BF16 and a.policy == "cpu" and a._enabled


def test_cuda_policy_on_cpu():
    x = torch.randn(4, 4)
    with autocast("cpu", dtype=FP16, policy="cuda"):
        assert ac.get_autocast_policy("cpu") == "cuda"
        assert torch.mm(x, x).dtype == FP16
        assert F.softmax(x, -1).dtype == FP32          # fp32 on the CUDA table...
        assert F.layer_norm(x, (4,)).dtype == FP32
    with autocast("cpu"):
        assert F.softmax(x, -1).dtype == FP32          # fp32 input, untouched on the CPU table
        assert F.softmax(x.bfloat16(), -1).dtype == BF16


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(device_type=0), ValueError, "Expected `device_type` of type `str`"),
    (dict(device_type="mps"), ValueError, "'cpu' or 'cuda'"),
    (dict(device_type="cpu", dtype="bf16"), TypeError, "torch.dtype"),
    (dict(device_type="cpu", enabled=1), TypeError, "True or False"),
    (dict(device_type="cpu", cache_enabled="no"), TypeError, "cache_enabled"),
    (dict(device_type="cpu", policy="tpu"), ValueError, "policy"),
])
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        autocast(**kwargs)


def test_unsupported_cpu_dtype_warns_like_torch_and_disables():
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        theirs = torch.autocast("cpu", dtype=FP32)
        ours = autocast("cpu", dtype=FP32)
    assert [str(w.message) for w in got][0] == [str(w.message) for w in got][1]
    assert "CPU Autocast only supports" in str(got[1].message)
    assert theirs._enabled is ours._enabled is False
    x = torch.randn(3, 3)
    with ours:
        assert torch.mm(x, x).dtype == FP32


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU warning")
def test_cuda_without_gpu_warns_like_torch():
    with pytest.warns(UserWarning, match="CUDA is not available") as got:
        torch.autocast("cuda")
        autocast("cuda")
    assert len({str(w.message) for w in got}) == 1
    with pytest.warns(UserWarning, match="Disabling autocast"), autocast("cuda"):
        assert not ac.is_autocast_enabled("cuda")


def test_decorator_and_reentry():
    region = autocast("cpu")

    @region
    def f(x, depth):
        inner = f(x, depth - 1) if depth else None
        return torch.mm(x, x).dtype, ac.is_autocast_enabled("cpu"), inner

    assert f(torch.randn(2, 2), 2) == (BF16, True, (BF16, True, (BF16, True, None)))
    assert not ac.is_autocast_enabled("cpu")
    with pytest.raises(TypeError, match="requires a callable"):
        autocast("cpu")(3)


def test_torch_queries_see_the_region_but_torch_does_not_cast():
    x = torch.randn(4, 4)
    assert not torch.is_autocast_enabled("cpu")
    with autocast("cpu", dtype=FP16, policy="cuda", cache_enabled=False):
        assert torch.is_autocast_enabled("cpu") and torch._C._is_any_autocast_enabled()
        assert torch.get_autocast_dtype("cpu") == FP16 and not torch.is_autocast_cache_enabled()
        assert ac.is_autocast_enabled("cpu") and not ac.is_autocast_cache_enabled()
        # torch's CPU table casts cat to fp32 (promote) and fft_fft to fp32; the CUDA table does
        # neither, and that is the table in force: torch's own kernels did not run
        h = torch.randn(4, dtype=FP16)
        assert torch.fft.fft(h.float()).dtype == torch.complex64
        assert torch.cat([h, h]).dtype == FP16
        assert torch.mm(x, x).dtype == FP16
    assert not torch.is_autocast_enabled("cpu") and torch.is_autocast_cache_enabled()
    assert torch.get_autocast_dtype("cpu") == BF16


def test_torch_autocast_inside_our_region_is_obeyed():
    x = torch.randn(4, 4)
    with autocast("cpu"):
        with torch.autocast("cpu", enabled=False):
            assert torch.mm(x, x).dtype == FP32 and not ac.is_autocast_enabled("cpu")
        with torch.autocast("cpu", dtype=FP16):
            assert torch.mm(x, x).dtype == FP16
        assert torch.mm(x, x).dtype == BF16


# --- nesting and threads --------------------------------------------------------------------

def test_nesting_enabled_false_and_dtype_changes_restore_state():
    x = torch.randn(4, 4)
    with autocast("cpu"):
        assert torch.mm(x, x).dtype == BF16
        with autocast("cpu", enabled=False):
            assert torch.mm(x, x).dtype == FP32 and not ac.is_autocast_enabled("cpu")
            with autocast("cpu", dtype=FP16):
                assert torch.mm(x, x).dtype == FP16
            assert ac.get_autocast_dtype("cpu") == BF16
        assert torch.mm(x, x).dtype == BF16 and ac.is_autocast_enabled("cpu")
    assert not ac.is_autocast_enabled("cpu") and torch.mm(x, x).dtype == FP32
    assert state_mod._STATE.mode is None and state_mod._STATE.depth == 0 and not torch.is_autocast_enabled("cpu")


def test_exceptions_inside_restore_state():
    with pytest.raises(ZeroDivisionError):
        with autocast("cpu", dtype=FP16):
            1 / 0
    assert not ac.is_autocast_enabled("cpu") and ac.get_autocast_dtype("cpu") == BF16
    assert state_mod._STATE.mode is None


def test_state_is_thread_local():
    x = torch.randn(3, 3)
    seen = {}

    def worker():
        seen["enabled"] = ac.is_autocast_enabled("cpu")
        seen["dtype"] = torch.mm(x, x).dtype
        with autocast("cpu", dtype=FP16):
            seen["inner"] = torch.mm(x, x).dtype

    with autocast("cpu"):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert torch.mm(x, x).dtype == BF16
    assert seen == {"enabled": False, "dtype": FP32, "inner": FP16}


# --- eligibility, in-place, out=, explicit dtype -----------------------------------------

def test_float64_integer_and_other_tensors_pass_through_like_torch():
    d = torch.randn(3, 3, dtype=FP64)
    i = torch.arange(6).reshape(2, 3)
    for fn in (lambda: torch.mm(d, d), lambda: torch.cat([i, i]), lambda: torch.mm(d, d).exp(),
               lambda: F.linear(torch.randn(2, 3), torch.randn(4, 3, dtype=FP64).float())):
        t, o = both(fn)
        assert t.dtype == o.dtype


def test_inplace_and_out_are_untouched():
    x = torch.randn(4, 4)
    out = torch.empty(4, 4)
    with autocast("cpu", dtype=FP16, policy="cuda"):
        y = x.clone()
        y.exp_()                                   # in place: stays fp32
        assert y.dtype == FP32
        torch.mm(x, x, out=out)                    # out=: the fp32 out overload
        assert out.dtype == FP32
        assert torch.exp(x).dtype == FP32 and torch.mm(x, x).dtype == FP16
    t, o = both(lambda: torch.mm(x, x, out=torch.empty(4, 4)))
    assert t.dtype == o.dtype == FP32


def test_explicit_dtype_is_respected_on_fp32_dtype_ops():
    h = torch.randn(8, dtype=FP16)
    with autocast("cpu", dtype=FP16, policy="cuda"):
        assert h.softmax(0).dtype == FP32
        assert h.softmax(0, dtype=FP16).dtype == FP16
        assert h.softmax(0, FP16).dtype == FP16            # dtype given positionally
        assert torch.sum(h).dtype == FP32 and torch.sum(h, dtype=FP16).dtype == FP16
        assert torch.cumsum(h, 0).dtype == FP32
        assert h.double().sum().dtype == FP64              # ineligible first argument
        assert torch.norm(h).dtype == FP32 and torch.linalg.vector_norm(h).dtype == FP32


def test_aliases_follow_their_op():
    h = torch.rand(8, dtype=FP16)
    with autocast("cpu", dtype=FP16, policy="cuda"):
        for fn in (torch.arcsin, torch.special.log1p, torch.special.expm1):
            assert fn(h).dtype == FP32, fn
        assert torch.linalg.matmul(h.float().view(2, 4), h.float().view(4, 2)).dtype == FP16
    assert policy.op_name(torch.arcsin) == "asin" and policy.op_name(torch.add) is None


# --- promotion and the ban ------------------------------------------------------------------

def test_promote_lists_and_tuples():
    a, b = torch.randn(3), torch.randn(3, dtype=BF16)
    t, o = both(lambda: torch.cat([a, b]))
    assert t.dtype == o.dtype == FP32
    t, o = both(lambda: torch.stack((b, b)))
    assert t.dtype == o.dtype == BF16
    h = torch.randn(3, dtype=FP16)
    with autocast("cpu", dtype=FP16, policy="cuda"):
        assert torch.dot(h, a).dtype == FP32
        assert torch.dot(h, h).dtype == FP16
        assert torch.addcmul(a, h, h).dtype == FP32


def test_promote_rejects_a_foreign_low_precision_dtype_like_torch():
    h, b = torch.randn(3, dtype=FP16), torch.randn(3, dtype=BF16)
    msgs = []
    for region in (torch.autocast("cpu", dtype=FP16), autocast("cpu", dtype=FP16)):
        with region, pytest.raises(RuntimeError) as err:
            torch.cat([h, b])
        msgs.append(str(err.value).splitlines()[0])
    assert msgs[0] == msgs[1] == "Unexpected floating ScalarType in at::autocast::prioritize"


def test_binary_cross_entropy_banned_on_cuda_policy_only():
    p, y = torch.rand(4), torch.rand(4)
    with autocast("cpu", dtype=FP16, policy="cuda"):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, y)
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            torch.nn.BCELoss()(p, y)
        assert F.binary_cross_entropy_with_logits(p, y).dtype == FP32
    t, o = both(lambda: F.binary_cross_entropy(p.bfloat16(), y.bfloat16()))
    assert t.dtype == o.dtype == FP32


def test_cpu_policy_conditions_follow_torch():
    x = torch.randn(2, 3, 8, 8, dtype=BF16)
    w = torch.randn(3, 3, 3, 3)
    calls = [
        lambda: F.pad(x[0], (1, 1), mode="reflect"), lambda: F.pad(x, (1, 1, 1, 1), mode="reflect"),
        lambda: F.pad(x, (1, 1, 1, 1), mode="replicate"), lambda: F.pad(x[0], (1, 1), mode="replicate"),
        lambda: F.pad(x, (1, 1, 1, 1)), lambda: F.pad(x, (1, 1, 1, 1), mode="circular"),
        lambda: torch._convolution(x.float(), w, None, (1, 1), (0, 0), (1, 1), False, (0, 0), 1,
                                   False, False, True),
        lambda: torch._convolution(x.float(), w, None, (1, 1), (0, 0), (1, 1), False, (0, 0), 1,
                                   False, False, True, True),
        lambda: F.conv2d(x.float(), w, padding="same"),
        lambda: F.nll_loss(torch.randn(4, 3, dtype=BF16), torch.tensor([0, 1, 2, 0])),
    ]
    for fn in calls:
        t, o = both(fn)
        assert t.dtype == o.dtype


def test_policy_helpers_validate():
    with pytest.raises(ValueError, match="policy"):
        policy.kind_of("tpu", "mm")
    with pytest.raises(ValueError, match="kind"):
        policy.decide("fast", (), {}, device_type="cpu", dtype=BF16)
    assert policy.kind_of("cuda", "softmax") == policy.FP32_DTYPE
    assert policy.kind_of("cpu", "softmax") is None


# --- autograd sees the casts ----------------------------------------------------------------

def test_casts_are_recorded_by_autograd_and_grads_are_fp32():
    lin = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4, requires_grad=True)
    with autocast("cpu"):
        y = lin(x)
    assert y.dtype == BF16
    names = {type(fn).__name__ for fn, _ in y.grad_fn.next_functions if fn is not None}
    assert "ToCopyBackward0" in names
    y.float().sum().backward()
    assert lin.weight.grad.dtype == FP32 and x.grad.dtype == FP32


# --- the weight cache ------------------------------------------------------------------------

def test_cache_reuses_weight_casts_and_clears_at_outermost_exit():
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    cache = _cache_for_tests()
    with autocast("cpu"):
        lin(x)
        lin(x)
        with autocast("cpu", enabled=False):
            pass
        assert len(cache) == 2 and cache.hits >= 2      # weight and bias, reused
    assert len(cache) == 0
    with autocast("cpu", cache_enabled=False):
        lin(x)
        assert len(cache) == 0


def test_cache_only_holds_leaf_fp32_tensors_that_require_grad():
    c = ac.WeightCache()
    p = torch.nn.Parameter(torch.randn(4, 4))
    assert c.cast(p, BF16, low_dtype=BF16) is c.cast(p, BF16, low_dtype=BF16)
    assert c.cast(p, FP32, low_dtype=BF16) is p                     # nothing to cast
    assert c.cast(p, FP16, low_dtype=BF16) is not c.cast(p, FP16, low_dtype=BF16)   # not the region dtype
    for t in (torch.randn(4), p * 2, p[0], p.detach().double().requires_grad_()):
        assert c.cast(t, BF16, low_dtype=BF16) is not c.cast(t, BF16, low_dtype=BF16)
    assert c.cast(p, BF16, low_dtype=BF16, enabled=False) is not c.cast(p, BF16, low_dtype=BF16)
    c.clear()
    assert len(c) == 0


def test_cache_trap_no_grad_forward_then_grad_forward_matches_torch():
    results = []
    for region in (torch.autocast("cpu"), autocast("cpu")):
        lin = torch.nn.Linear(4, 4)
        with region:
            with torch.no_grad():
                lin(torch.randn(2, 4))
            y = lin(torch.randn(2, 4))
        y.float().sum().backward()
        results.append(lin.weight.grad is not None)
    assert results[0] == results[1]


def test_cache_trap_stale_weights_matches_torch():
    stale = []
    for region in (torch.autocast("cpu"), autocast("cpu")):
        lin = torch.nn.Linear(4, 4)
        x = torch.randn(2, 4)
        with region:
            y1 = lin(x)
            with torch.no_grad():
                lin.weight.mul_(0.0)
            y2 = lin(x)
        stale.append(bool(torch.equal(y1, y2)))
    assert stale == [True, True]


# --- Python-level composites and the fallback path -------------------------------------------

@pytest.fixture(params=["skip_one_hop", "fallback"])
def redispatch(request, monkeypatch):
    if request.param == "fallback":
        monkeypatch.setattr(mode_mod, "_SKIP_ONE_HOP", None)
    elif mode_mod._SKIP_ONE_HOP is None:
        pytest.skip("this torch has no torch._C._skip_one_hop_torch_function")
    return request.param


def test_python_composites_are_opened(redispatch):
    h = torch.randn(4, 6)
    mha = torch.nn.MultiheadAttention(6, 2, batch_first=True)
    q = torch.randn(2, 5, 6)
    with autocast("cpu", dtype=FP16, policy="cuda"):
        assert F.normalize(h.half()).dtype == FP32             # norm (fp32) inside
        assert F.cross_entropy(h, torch.tensor([0, 1, 2, 3])).dtype == FP32
        assert h.unflatten(1, (2, 3)).dtype == FP32            # Python override calling super()
        assert mha(q, q, q)[0].dtype == FP16                    # linear inside
        assert (h.half() ** 2).dtype == FP32 and (2 ** h.half()).dtype == FP32


# --- custom_fwd / custom_bwd ------------------------------------------------------------------

class _Square(torch.autograd.Function):
    seen: dict = {}

    @staticmethod
    @custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx, x, w):
        _Square.seen["fwd"] = (x.dtype, ac.is_autocast_enabled("cpu"), torch.mm(x, w).dtype)
        ctx.save_for_backward(x, w)
        return torch.mm(x, w)

    @staticmethod
    @custom_bwd(device_type="cpu")
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        _Square.seen["bwd"] = ac.is_autocast_enabled("cpu")
        return g.mm(w.t()), x.t().mm(g)


class _Plain(torch.autograd.Function):
    @staticmethod
    @custom_fwd(device_type="cpu")
    def forward(ctx, x):
        return torch.mm(x, x)

    @staticmethod
    @custom_bwd(device_type="cpu")
    def backward(ctx, g):
        _Plain.bwd = (ac.is_autocast_enabled("cpu"), ac.get_autocast_dtype("cpu"))
        return g.float()


def test_custom_fwd_cast_inputs_and_custom_bwd():
    x = torch.randn(3, 3, dtype=BF16, requires_grad=True)
    w = torch.randn(3, 3, requires_grad=True)
    with autocast("cpu"):
        y = _Square.apply(x, w)
    assert _Square.seen["fwd"] == (FP32, False, FP32) and y.dtype == FP32
    y.sum().backward()
    assert _Square.seen["bwd"] is False
    with autocast("cpu", dtype=FP16):
        z = _Plain.apply(torch.randn(3, 3, requires_grad=True))
    assert z.dtype == FP16
    z.float().sum().backward()
    assert _Plain.bwd == (True, FP16)
    with pytest.raises(ValueError, match="device_type"):
        custom_fwd(device_type=None)
