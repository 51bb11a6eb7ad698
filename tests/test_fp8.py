"""amp_edu.fp8's pieces: scales, casts, the scaled matmul, delayed scaling, block and MX scaling.

Each piece is compared with torchao's own function where one exists (scales, casts, MX), and with
the definition (OCP MX v1.0, section 6.3) where it is the spec that counts.
"""

import math

import pytest
import torch
from torch import nn

from amp_edu import fp8
from amp_edu.fp8 import blocks, mx
from amp_edu.fp8.reference import import_torchao

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
AO = import_torchao("torchao.prototype.mx_formats.mx_tensor")
needs_ao = pytest.mark.skipif(not AO, reason=f"torchao unavailable: {AO}")


# --- scaling -------------------------------------------------------------------------------------
def test_fp8_max_comes_from_formats():
    assert fp8.fp8_max(E4) == 448.0 == torch.finfo(E4).max
    assert fp8.fp8_max(E5) == 57344.0 == torch.finfo(E5).max
    with pytest.raises(ValueError, match="fp8_dtype must be one of"):
        fp8.fp8_max(torch.float16)


@needs_ao
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fp8_dtype", [E4, E5], ids=str)
@pytest.mark.parametrize("pow2", [False, True])
@pytest.mark.parametrize("dim", [None, 0, -1])
def test_scale_equals_torchao(dtype, fp8_dtype, pow2, dim):
    from torchao.float8.config import ScalingGranularity
    from torchao.float8.float8_utils import tensor_to_scale
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(16, 24, generator=gen) * torch.logspace(-3, 3, 24)).to(dtype)
    x[0, 0] = 0
    x[:, 3] = 0                                         # an all-zero column: EPS at work
    gran = ScalingGranularity.TENSORWISE if dim is None else ScalingGranularity.AXISWISE
    ref = tensor_to_scale(x, fp8_dtype, scaling_granularity=gran, axiswise_dim=dim,
                          round_scales_to_power_of_2=pow2)
    ours = fp8.tensor_to_scale(x, fp8_dtype, dim=dim, power_of_2=pow2)
    assert ours.dtype == torch.float32 and torch.equal(ours, ref)


def test_scale_of_zeros_is_finite_and_cast_gives_zeros():
    s = fp8.tensor_to_scale(torch.zeros(4), E4)
    assert math.isfinite(s.item()) and s.item() == pytest.approx(448 / 1e-12, rel=1e-6)
    assert torch.equal(fp8.cast_to_float8(torch.zeros(4), E4).data.float(), torch.zeros(4))


def test_power_of_two_scale_is_exact_and_not_above():
    s = fp8.tensor_to_scale(torch.tensor([3.0, -5.0]), E4, power_of_2=True)
    assert s.item() == 64.0                       # 448/5 = 89.6 -> 64
    with pytest.raises(TypeError):
        fp8.round_down_to_power_of_2(torch.tensor(3.0, dtype=torch.float64))


def test_amax_bad_input():
    with pytest.raises(TypeError, match="floating-point"):
        fp8.amax(torch.arange(3))
    with pytest.raises(TypeError, match="dim"):
        fp8.amax(torch.ones(3), dim=1.0)


# --- cast ------------------------------------------------------------------------------------------
@needs_ao
@pytest.mark.parametrize("fp8_dtype", [E4, E5], ids=str)
def test_saturating_cast_equals_torchao(fp8_dtype):
    from torchao.float8.float8_utils import to_fp8_saturated
    x = torch.tensor([0.0, 1.0, -3.3, 447.0, 449.0, 1e5, -1e9, 6e4, 2.0 ** -12, float("inf")])
    assert torch.equal(fp8.to_fp8_saturated(x, fp8_dtype).view(torch.uint8),
                       to_fp8_saturated(x, fp8_dtype).view(torch.uint8))


def test_given_scale_saturates_instead_of_inf():
    x = torch.tensor([1.0, 100.0])
    q = fp8.cast_to_float8(x, E5, torch.tensor(1000.0))
    assert q.data.float().tolist() == [1024.0, 57344.0]     # 1e5 would be inf in e5m2 unclamped
    assert torch.isinf((x * 1000).to(E5).float()).any()
    with pytest.raises(TypeError, match="float32"):
        fp8.cast_to_float8(x, E4, torch.tensor(2.0, dtype=torch.float64))


def test_cast_does_not_modify_input_and_roundtrips():
    x = torch.randn(8, 8)
    before = x.clone()
    q = fp8.cast_to_float8(x, E4, dim=-1)
    assert torch.equal(x, before) and q.scale.shape == (8, 1)
    assert (q.dequantize() - x).abs().max() <= x.abs().amax(dim=-1, keepdim=True).max() * 2 ** -4


# --- scaled matmul ---------------------------------------------------------------------------------
def test_scaled_mm_rejects_mixed_granularity_and_bad_shapes():
    a = fp8.cast_to_float8(torch.randn(4, 8), E4, dim=-1)
    b = fp8.cast_to_float8(torch.randn(8, 3), E4)
    with pytest.raises(ValueError, match="per tensor"):
        fp8.scaled_mm(a, b)
    with pytest.raises(ValueError, match="matrices"):
        fp8.scaled_mm(a, a)
    with pytest.raises(TypeError):
        fp8.scaled_mm(torch.randn(2, 2), b)


def test_scaled_mm_is_close_to_matmul():
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(32, 64, generator=gen), torch.randn(64, 16, generator=gen)
    y = fp8.scaled_mm(fp8.cast_to_float8(x, E4), fp8.cast_to_float8(w, E4))
    rel = ((y - x @ w).norm() / (x @ w).norm()).item()
    assert 1e-3 < rel < 0.1                          # fp8 error: real but small


# --- module and conversion -------------------------------------------------------------------------
def test_convert_filter_and_errors():
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 4)))
    fp8.convert_to_float8_training(m, "tensorwise", module_filter_fn=lambda mod, fqn: fqn != "2.0")
    assert isinstance(m[0], fp8.Float8Linear) and type(m[2][0]) is nn.Linear
    with pytest.raises(ValueError, match="recipe must be one of"):
        fp8.convert_to_float8_training(nn.Linear(2, 2), "rowwise_with_gw_hp")
    with pytest.raises(TypeError, match="nn.Module"):
        fp8.convert_to_float8_training("model")
    with pytest.raises(TypeError, match="module_filter_fn"):
        fp8.convert_to_float8_training(nn.Linear(2, 2), module_filter_fn=3)
    with pytest.raises(ValueError, match="delayed"):
        fp8.convert_to_float8_training(nn.Linear(2, 2), "tensorwise", margin=1)
    with pytest.raises(ValueError, match="recipe must be one of"):
        fp8.Float8Linear(4, 4, recipe="fp8")


def test_float8_linear_keeps_fp32_master_weights():
    lin = fp8.Float8Linear(16, 8)
    assert lin.weight.dtype == torch.float32
    lin(torch.randn(4, 16)).sum().backward()
    assert lin.weight.grad.dtype == torch.float32


# --- delayed scaling -------------------------------------------------------------------------------
def test_update_amax_history_newest_first_not_in_place():
    h = torch.tensor([3.0, 2.0, 1.0])
    new = fp8.update_amax_history(h, torch.tensor(5.0))
    assert new.tolist() == [5.0, 3.0, 2.0] and h.tolist() == [3.0, 2.0, 1.0]
    with pytest.raises(ValueError, match="1-D"):
        fp8.update_amax_history(torch.zeros(2, 2), torch.tensor(1.0))


def test_delayed_scale_margin_and_eps():
    h = torch.tensor([2.0, 7.0, 1.0])
    assert fp8.delayed_scale(h, E4).item() == pytest.approx(64.0)
    assert fp8.delayed_scale(h, E4, margin=2).item() == pytest.approx(16.0)
    assert fp8.delayed_scale(h, E4).dtype == torch.float32
    assert math.isfinite(fp8.delayed_scale(torch.zeros(4), E4).item())
    with pytest.raises(ValueError, match="margin"):
        fp8.delayed_scale(h, E4, margin=-1)


def test_spike_saturates_under_delayed_not_current():
    hist = fp8.AmaxHistory(E4, history_len=4, margin=1)   # 2x headroom: noise never saturates
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        hist.cast(torch.randn(256, generator=gen))
        assert int(hist.saturated) == 0
    spike = torch.randn(256, generator=gen)
    spike[:8] *= 100
    q = hist.cast(spike)
    assert int(hist.saturated) >= 8
    assert q.data.float().abs().max().item() == 448.0
    cur = fp8.cast_to_float8(spike, E4)
    assert (cur.dequantize() - spike).abs().max() < spike.abs().max() * 2 ** -4
    # after the spike the history remembers it for history_len steps
    assert hist.history[0] == spike.abs().max()


def test_delayed_linear_trains_and_saves_fp8():
    torch.manual_seed(0)
    m = fp8.convert_to_float8_training(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)),
                                       "delayed", history_len=8, margin=1)
    assert isinstance(m[0], fp8.DelayedFloat8Linear) and m[0].amax_grad.fp8_dtype == E5
    x = torch.randn(64, 16)
    y = x[:, :4].sum(1, keepdim=True).repeat(1, 4)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        loss = (m(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert int(m[0].amax_grad.steps) == 30
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append((t.dtype, t.numel())) or t,
                                                  lambda t: t):
        m[0](torch.randn(4, 16))
    # the delayed layer keeps 1-byte x and W (plus their 0-dim float32 scales) for backward
    assert sorted(saved, key=str) == sorted([(E4, 64), (torch.float32, 1), (E4, 512), (torch.float32, 1)], key=str)


def test_amax_history_bad_args():
    with pytest.raises(ValueError, match="history_len"):
        fp8.AmaxHistory(E4, history_len=0)
    with pytest.raises(TypeError, match="margin"):
        fp8.AmaxHistory(E4, margin=1.5)
    with pytest.raises(TypeError, match="history_len"):
        fp8.AmaxHistory(E4, history_len=True)
    with pytest.raises(TypeError, match="history_len"):
        fp8.AmaxHistory(E4, history_len="16")
    with pytest.raises(TypeError, match="margin"):
        fp8.delayed_scale(torch.ones(2), E4, margin=True)
    with pytest.raises(ValueError, match="margin"):
        fp8.AmaxHistory(E4, margin=-1)


# --- block scaling and MX --------------------------------------------------------------------------
def test_block_roundtrip_granularities():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(128, 256, generator=gen)
    x[5, 7] = 1e6                                          # one outlier, 2^20 above the rest
    mask = torch.zeros_like(x, dtype=torch.bool)
    mask[5, 7] = True
    errs = {s: blocks.relative_error(x, blocks.roundtrip(x, s), exclude=mask) for s in blocks.SCHEMES}
    assert errs["per-tensor"] > 0.5                        # most values flush to zero
    # the smaller the group that shares the outlier's scale, the fewer values it flushes
    assert errs["per-tensor"] > errs["128x128"] > errs["row-wise"] > errs["1x128"] > errs["MX-32"]
    assert errs["row-wise"] < 0.15
    assert torch.equal(blocks.block_roundtrip(x, (128, 256)), fp8.quantize_dequantize(x))
    with pytest.raises(ValueError, match="divide"):
        blocks.block_roundtrip(x, (3, 128))
    with pytest.raises(ValueError, match="scheme"):
        blocks.roundtrip(x, "per-block")


def _spec_mx(v: torch.Tensor, emax: int, grid_max: float, quant) -> torch.Tensor:
    """OCP MX v1.0 section 6.3, one block at a time, in plain Python floats."""
    out = []
    for block in v.double().reshape(-1, 32):
        m = block.abs().max().item()
        e = -127 if m == 0 else max(-127, min(127, math.floor(math.log2(m)) - emax))
        x = 2.0 ** e
        out += [quant(max(-grid_max, min(grid_max, b / x))) * x for b in block.tolist()]
    return torch.tensor(out, dtype=torch.float64).reshape(v.shape)


def _cases():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 96, generator=gen) * torch.logspace(-6, 6, 96)
    x[0, :32] = 0                                          # a block of zeros
    x[1, 40] = 1e6                                         # an outlier inside one block
    x[2, :32] = 2.0 ** torch.arange(-16, 16).float()       # exact powers of two
    return x


@pytest.mark.parametrize("elem,dtype", [("fp8_e4m3", E4), ("fp8_e5m2", E5)])
def test_mx_fp8_matches_ocp_definition(elem, dtype):
    x = _cases()
    fmt = mx._elem(elem)
    ref = _spec_mx(x, mx._emax(fmt), fmt.max,
                   lambda v: torch.tensor(v, dtype=torch.float32).to(dtype).double().item())
    got = mx.mx_roundtrip(x, elem)
    assert torch.equal(got.double(), ref)


def test_mx_fp4_matches_ocp_definition():
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]

    def q(v):                                              # nearest, ties to the even code
        a = abs(v)
        best = min(range(8), key=lambda i: (abs(grid[i] - a), i % 2))
        return math.copysign(grid[best], v)

    x = _cases()
    assert torch.equal(mx.mx_roundtrip(x, "fp4_e2m1").double(), _spec_mx(x, 2, 6.0, q))


@needs_ao
@pytest.mark.parametrize("elem,ao_dtype", [("fp8_e4m3", E4), ("fp8_e5m2", E5),
                                           ("fp4_e2m1", torch.float4_e2m1fn_x2)])
def test_mx_equals_torchao_floor_mode(elem, ao_dtype):
    from torchao.prototype.mx_formats.mx_tensor import to_dtype, to_mx
    x = _cases().contiguous()
    scale, data = to_mx(x, ao_dtype, 32)
    q = mx.mx_quantize(x, elem)
    assert torch.equal(q.scales_e8m0.view(torch.uint8), scale.view(torch.uint8))
    assert torch.equal(mx.mx_dequantize(q), to_dtype(data, scale, ao_dtype, 32, torch.float32))


def test_mx_bad_input():
    with pytest.raises(ValueError, match="multiple of block_size"):
        mx.mx_quantize(torch.randn(4, 30))
    with pytest.raises(ValueError, match="elem must be one of"):
        mx.mx_quantize(torch.randn(4, 32), "int8")
    with pytest.raises(ValueError, match="block_size"):
        mx.mx_quantize(torch.randn(4, 32), block_size=0)
    for bad in (True, 32.0, "32"):
        with pytest.raises(TypeError, match="block_size"):
            mx.mx_quantize(torch.randn(4, 32), block_size=bad)
    assert mx.mx_quantize(torch.randn(2, 32)).bits_per_element() == 8.25


# --- training recipes ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", fp8.FP8_RECIPES)
def test_fp8_recipes_train_through_amp_edu_train(name):
    from amp_edu.data import get_task
    from amp_edu.models import build
    from amp_edu.train import train
    task = get_task("chars", block_size=8)
    h = train(task, build("transformer", task, d_model=16, n_layers=1), name, steps=3, batch_size=8,
              optimizer="adamw", eval_every=0)
    assert h.recipe == name and all(math.isfinite(v) for v in h.loss)
    layers = {type(m).__name__ for m in h.model.modules()}
    assert ("DelayedFloat8Linear" if name == "fp8_delayed" else "Float8Linear") in layers
    assert type(h.model.head) is nn.Linear                       # the output layer stays high precision
    assert all(p.dtype == torch.float32 for p in h.model.parameters())   # fp32 master weights


def test_fp8_recipe_rejects_unknown_name():
    with pytest.raises(ValueError, match="fp8_recipe must be"):
        fp8.Fp8("mxfp8")
