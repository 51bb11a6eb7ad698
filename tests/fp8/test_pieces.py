"""amp_edu.fp8's pieces: scales, casts, the scaled matmul, delayed scaling, block and MX scaling.

Each piece is compared with torchao's own function where one exists (scales, casts, MX), and with
the definition (OCP MX v1.0, section 6.3) where it is the spec that counts.
"""

import copy
import math

import pytest
import torch
from torch import nn

from amp_edu import fp8, recipes
from amp_edu.fp8 import blocks, mx
from amp_edu.fp8.config import CastConfig, Float8LinearConfig, Granularity, ScalingType, config_names
from amp_edu.fp8.convert import convert_to_float8_training, keep_head
from amp_edu.fp8.delayed import AmaxHistory, delayed_scale, update_amax_history
from amp_edu.fp8.gemm import scaled_mm
from amp_edu.fp8.mxgemm import MX_BLOCK, MXOperand, mx_cast, mx_mm
from amp_edu.fp8.torchao_import import import_torchao
from amp_edu.recipes.fp8 import PREFIX, Fp8

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
def test_scaled_mm_rejects_wrong_axes_and_bad_shapes():
    a = fp8.cast_to_float8(torch.randn(16, 32), E4, dim=0)          # per column of a: not the K axis
    b = fp8.cast_to_float8(torch.randn(32, 16), E4)
    with pytest.raises(ValueError, match="one per row of a"):
        scaled_mm(a, b)
    with pytest.raises(ValueError, match="matrices"):
        scaled_mm(b, b)
    with pytest.raises(TypeError):
        scaled_mm(torch.randn(2, 2), b)
    with pytest.raises(ValueError, match="per-tensor scale is 0-dim"):
        fp8.cast_to_float8(torch.randn(4, 4), E4, torch.ones(4, 1))


@pytest.mark.parametrize("k,n,pad,ok", [(32, 16, False, True), (24, 16, False, False), (24, 16, True, True),
                                        (32, 24, True, False), (32, 24, False, False)])
def test_scaled_mm_gpu_shape_rule_enforced_or_padded(k, n, pad, ok):
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(5, k, generator=gen), torch.randn(k, n, generator=gen)
    a, b = fp8.cast_to_float8(x, E4), fp8.cast_to_float8(w, E4)
    if not ok:
        with pytest.raises(ValueError, match="multiple of 16"):
            scaled_mm(a, b, pad_inner_dim=pad)
        return
    y = scaled_mm(a, b, pad_inner_dim=pad)
    ref = (a.data.float() / a.scale) @ (b.data.float() / b.scale)
    assert torch.allclose(y, ref, rtol=1e-5, atol=1e-5)             # zeros padded in add nothing


def test_scaled_mm_mixed_rowwise_times_tensorwise_equals_dequantized_product():
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(16, 32, generator=gen) * 5, torch.randn(32, 16, generator=gen)
    for a, b in ((fp8.cast_to_float8(x, E4, dim=-1), fp8.cast_to_float8(w, E4)),
                 (fp8.cast_to_float8(x, E4), fp8.cast_to_float8(w, E4, dim=0))):
        y = scaled_mm(a, b, out_dtype=torch.bfloat16)
        ref = ((a.data.float() / a.scale) @ (b.data.float() / b.scale)).bfloat16()
        assert y.dtype == torch.bfloat16
        assert ((y.float() - ref.float()).abs() <= ref.float().abs() * 2 ** -7).all()


def test_scaled_mm_is_close_to_matmul():
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(32, 64, generator=gen), torch.randn(64, 16, generator=gen)
    y = scaled_mm(fp8.cast_to_float8(x, E4), fp8.cast_to_float8(w, E4))
    rel = ((y - x @ w).norm() / (x @ w).norm()).item()
    assert 1e-3 < rel < 0.1                          # fp8 error: real but small


# --- configuration -----------------------------------------------------------------------------------
def test_config_recipes_fill_defaults_and_match_torchao_layout():
    c = Float8LinearConfig.from_recipe_name("rowwise_with_gw_hp")
    assert c.weight_for_grad_input.granularity is Granularity.TENSORWISE
    assert not c.input_for_grad_weight.enabled and not c.grad_output_for_grad_weight.enabled
    assert c.grad_output.dtype == E4 and c.power_of_2
    t = Float8LinearConfig()
    assert t.grad_output.dtype == t.grad_output_for_grad_weight.dtype == E5 and t.input.dtype == E4
    assert config_names()[:3] == ("tensorwise", "rowwise", "rowwise_with_gw_hp")
    assert recipes.names(family=recipes.Family.FP8) == tuple(PREFIX + n for n in config_names())
    with pytest.raises(Exception):                   # frozen
        t.power_of_2 = True


def test_config_checks_in_post_init():
    C, S, G = CastConfig, ScalingType, Granularity
    with pytest.raises(TypeError, match="granularity must be a Granularity"):
        C(granularity="rowwise")
    with pytest.raises(TypeError, match="scaling_type"):
        C(scaling_type="dynamic")
    with pytest.raises(ValueError, match="dtype must be one of"):
        C(dtype=torch.float16)
    with pytest.raises(ValueError, match="TENSORWISE"):
        C(S.DELAYED, G.AXISWISE)
    with pytest.raises(ValueError, match="both operands"):
        Float8LinearConfig(input=C(S.DISABLED))
    with pytest.raises(ValueError, match="same dtype"):
        Float8LinearConfig(input_for_grad_weight=C(dtype=E5))
    with pytest.raises(ValueError, match="all six casts or none"):
        Float8LinearConfig(input=C(S.DELAYED), weight=C(S.DELAYED))
    with pytest.raises(TypeError, match="input must be a CastConfig"):
        Float8LinearConfig(input="tensorwise")
    with pytest.raises(ValueError, match="history_len"):
        Float8LinearConfig.from_recipe_name("delayed", history_len=0)
    with pytest.raises(TypeError, match="power_of_2"):
        Float8LinearConfig(power_of_2=1)
    with pytest.raises(ValueError, match="recipe must be one of"):
        Float8LinearConfig.from_recipe_name("nvfp4")


# --- module and conversion -------------------------------------------------------------------------
def test_convert_filter_and_errors():
    m = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Sequential(nn.Linear(16, 16)))
    convert_to_float8_training(m, "tensorwise", module_filter_fn=lambda mod, fqn: fqn != "2.0")
    assert isinstance(m[0], fp8.Float8Linear) and type(m[2][0]) is nn.Linear
    with pytest.raises(ValueError, match="recipe must be one of"):
        convert_to_float8_training(nn.Linear(2, 2), "nvfp4")
    with pytest.raises(TypeError, match="nn.Module"):
        convert_to_float8_training("model")
    with pytest.raises(TypeError, match="module_filter_fn"):
        convert_to_float8_training(nn.Linear(2, 2), module_filter_fn=3)
    with pytest.raises(TypeError, match="config must be"):
        fp8.Float8Linear(4, 4, config=3)
    with pytest.raises(ValueError, match="recipe must be one of"):
        fp8.Float8Linear(4, 4, config="fp8")


def test_keep_head_converts_every_linear_but_the_output_head():
    m = nn.Sequential()
    m.add_module("embed", nn.Linear(8, 16))
    m.add_module("block", nn.Sequential())
    m.block.add_module("head", nn.Linear(16, 16))          # a nested "head" is an output layer too
    m.block.add_module("mlp", nn.Linear(16, 16))
    m.add_module("head", nn.Linear(16, 4))
    convert_to_float8_training(m, "tensorwise", module_filter_fn=keep_head)
    assert [type(x).__name__ for x in (m.embed, m.block.head, m.block.mlp, m.head)] == \
        ["Float8Linear", "Linear", "Float8Linear", "Linear"]
    assert keep_head(m.embed, "head_proj") and not keep_head(m.head, "decoder.head")   # the last name only


def test_float8_linear_keeps_fp32_master_weights():
    lin = fp8.Float8Linear(16, 16)
    assert lin.weight.dtype == torch.float32
    lin(torch.randn(16, 16)).sum().backward()
    assert lin.weight.grad.dtype == torch.float32


# --- delayed scaling -------------------------------------------------------------------------------
def test_update_amax_history_newest_first_not_in_place():
    h = torch.tensor([3.0, 2.0, 1.0])
    new = update_amax_history(h, torch.tensor(5.0))
    assert new.tolist() == [5.0, 3.0, 2.0] and h.tolist() == [3.0, 2.0, 1.0]
    with pytest.raises(ValueError, match="1-D"):
        update_amax_history(torch.zeros(2, 2), torch.tensor(1.0))


def _te_sf_compute(amax, scale, fp8_max, margin):
    """Transformer Engine's _default_sf_compute (transformer_engine/pytorch/quantization.py), as written."""
    sf = (fp8_max / amax) / (2 ** margin)
    sf = torch.where(amax > 0.0, sf, scale)
    sf = torch.where(torch.isfinite(amax), sf, scale)
    return torch.where(torch.isinf(sf), torch.full_like(sf, torch.finfo(torch.float32).max), sf)


@pytest.mark.parametrize("amax", [7.0, 1e-3, 0.0, float("inf"), float("nan"), 1e-43, 3e38])
@pytest.mark.parametrize("margin", [0, 2])
def test_delayed_scale_is_transformer_engines_rule(amax, margin):
    prev = torch.tensor(3.5)
    h = torch.tensor([amax, 0.5, 0.25])
    a = h.max()
    ref = _te_sf_compute(a, prev, 448.0, margin)
    got = delayed_scale(h, E4, prev, margin)
    assert got.dtype == torch.float32 and got.dim() == 0
    # TE's float32 `fp8_max / amax` runs as amax.reciprocal() * fp8_max (two roundings); amp_edu
    # rounds a float64 quotient once: the two may differ in the last bit, never more
    assert torch.allclose(got, ref, rtol=2 ** -23, atol=0, equal_nan=False)
    if not (math.isfinite(amax) and amax > 0):
        assert got.item() == (3.5 if not math.isfinite(amax) else 448 / 0.5 / 2 ** margin)


def test_delayed_scale_bad_args():
    h = torch.tensor([2.0, 7.0, 1.0])
    with pytest.raises(ValueError, match="margin"):
        delayed_scale(h, E4, torch.ones(()), margin=-1)
    with pytest.raises(TypeError, match="previous scale"):
        delayed_scale(h, E4, 1.0)


def test_amax_history_starts_at_scale_1_and_survives_an_all_zero_step():
    hist = AmaxHistory(E4, history_len=1)
    x = torch.full((64,), 2.0)
    q = hist.cast(x)
    assert q.scale.item() == 1.0                            # TE starts from scale 1: no warm start
    assert hist.scale.item() == 224.0
    hist.cast(torch.zeros(64))                              # a dead step: amax 0
    assert hist.scale.item() == 224.0                       # the previous scale is kept ...
    q = hist.cast(x)
    assert int(hist.saturated) == 0 and torch.equal(q.dequantize(), x)   # ... so nothing saturates


def test_spike_saturates_under_delayed_not_current():
    hist = AmaxHistory(E4, history_len=4, margin=1)   # 2x headroom: noise never saturates
    gen = torch.Generator().manual_seed(0)
    hist.cast(torch.randn(256, generator=gen))           # the first cast, at scale 1
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
    cfg = Float8LinearConfig.from_recipe_name("delayed", history_len=8, margin=1)
    m = convert_to_float8_training(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)), cfg)
    assert isinstance(m[0], fp8.Float8Linear) and m[0].config.delayed and m[0].amax_grad.fp8_dtype == E5
    assert "amax_input.history" in m[0].state_dict()
    ref = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    ref.load_state_dict({k: v for k, v in m.state_dict().items() if "amax" not in k})
    x = torch.randn(64, 16)
    y = x[:, :4].sum(1, keepdim=True).repeat(1, 16)
    final = []
    for model in (m, ref):
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(30):
            loss = (model(x) - y).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        final.append(loss.item())
    assert abs(final[0] - final[1]) < 0.02 * final[1]           # trains as fp32 does, within 2%
    assert int(m[0].amax_grad.steps) == 30
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append((t.dtype, t.numel())) or t,
                                                  lambda t: t):
        m[0](torch.randn(16, 16))
    # the delayed layer keeps 1-byte x and W (plus their 0-dim float32 scales) for backward
    assert sorted(saved, key=str) == sorted([(E4, 256), (torch.float32, 1), (E4, 512), (torch.float32, 1)], key=str)


def _reduce_worker(rank, world_size):
    from amp_edu import fp8 as f
    hist = f.AmaxHistory(torch.float8_e4m3fn, history_len=2)
    hist.cast(torch.full((4,), float(rank + 1)))         # rank 0 sees amax 1, rank 1 amax 2
    return hist.history.tolist(), hist.scale.item()


def test_reduce_amax_takes_the_max_across_ranks():
    from amp_edu.distributed import launch
    res = launch(_reduce_worker, world_size=2, backend="gloo", timeout_s=120)
    assert res[0] == res[1] == ([2.0, 0.0], 224.0)


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


_AO_ELEM = {"fp8_e4m3": E4, "fp8_e5m2": E5, "fp4_e2m1": torch.float4_e2m1fn_x2}


def _hard_mx_cases():
    x = torch.cat([_cases(), torch.randn(4, 96, generator=torch.Generator().manual_seed(3))])
    x[4, :32] = 1e-40                                     # subnormal amax: the exponent-field rule
    x[5, 40] = float("nan")                               # NaN inside one block
    x[6, :32] = float("nan")                              # an all-NaN block
    x[7, 70] = float("inf")                               # inf inside one block
    x[7, 5] = 2.0 ** -130                                 # a block whose scale clamps at 2^-127
    x[7, :5] = 0
    x[7, 6:32] = 0
    return x


@needs_ao
@pytest.mark.parametrize("elem", list(_AO_ELEM))
@pytest.mark.parametrize("scale_mode", mx.SCALE_MODES)
def test_mx_equals_torchao_to_mx(elem, scale_mode):
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_dtype, to_mx
    x = _hard_mx_cases().contiguous()
    d = _AO_ELEM[elem]
    scale, data = to_mx(x, d, 32, ScaleCalculationMode(scale_mode))
    q = mx.mx_quantize(x, elem, scale_mode=scale_mode)
    assert torch.equal(q.scales_e8m0.view(torch.uint8), scale.view(torch.uint8))
    ref = to_dtype(data, scale, d, 32, torch.float32)
    got = mx.mx_dequantize(q)
    assert torch.equal(torch.isnan(got), torch.isnan(ref))
    assert torch.equal(got.nan_to_num(nan=0.0), ref.nan_to_num(nan=0.0))
    if d != torch.float4_e2m1fn_x2:                       # fp8 elements: the same bits too
        assert torch.equal(q.elements.nan_to_num(nan=0.0), data.float().nan_to_num(nan=0.0))


def test_mx_nan_blocks_get_the_nan_scale():
    x = torch.randn(2, 64)
    x[0, 3] = float("nan")
    for mode in mx.SCALE_MODES:
        for elem in mx.MX_ELEMENTS:
            q = mx.mx_quantize(x, elem, scale_mode=mode)
            assert q.scale_bits[0, 0] == mx.E8M0_NAN and q.scale_bits[0, 1] != mx.E8M0_NAN
            back = mx.mx_dequantize(q)
            assert torch.isnan(back[0, :32]).all() and torch.isfinite(back[0, 32:]).all()


def test_mx_rceil_never_saturates_floor_does():
    x = torch.full((1, 32), 1.0)
    x[0, 0] = 1.9 * 256                                  # mantissa 1.9: floor's scale puts it at 486 > 448
    floor = mx.mx_roundtrip(x, scale_mode="floor")
    rceil = mx.mx_roundtrip(x, scale_mode="rceil")
    assert floor[0, 0] == 448.0                          # clamped
    assert abs(rceil[0, 0] - x[0, 0]) <= x[0, 0] * 2 ** -4   # rounded, not clamped
    with pytest.raises(ValueError, match="scale_mode must be one of"):
        mx.mx_quantize(x, scale_mode="ceil")


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
@pytest.mark.parametrize("name", recipes.names(family=recipes.Family.FP8))
def test_fp8_recipes_train_through_amp_edu_train(name):
    from amp_edu.data import get_task
    from amp_edu.models import build
    from amp_edu.train import train
    task = get_task("chars", block_size=8)
    h = train(task, build("transformer", task, d_model=16, n_layers=1), name, steps=3, batch_size=8,
              optimizer="adamw", eval_every=0)
    assert h.recipe == name and all(math.isfinite(v) for v in h.loss)
    layers = {type(m).__name__ for m in h.model.modules()}
    assert "Float8Linear" in layers
    assert type(h.model.head) is nn.Linear                       # the output layer stays high precision
    assert all(p.dtype == torch.float32 for p in h.model.parameters())   # fp32 master weights


def test_each_fp8_recipe_is_its_config_under_the_prefix_and_unknown_names_are_refused():
    for c in config_names():
        r = recipes.parse_recipe(PREFIX + c)
        assert isinstance(r, Fp8) and r.name == PREFIX + c and r.config_name == c
        assert r.config == Float8LinearConfig.from_recipe_name(c) and r.filter is keep_head
    assert Fp8("delayed", history_len=4).config.history_len == 4          # overrides reach the config
    with pytest.raises(ValueError, match="config_name must be"):
        Fp8("nvfp4")


# --- reduced-precision accumulation ----------------------------------------------------------------
def test_round_significand_rounds_to_nearest_even():
    from amp_edu.fp8.accumulate import round_significand
    x = torch.tensor([1.0 + 2 ** -13, 1.0 + 3 * 2 ** -14, 1.0 + 2 ** -14, -(1.0 + 2 ** -12), float("inf")])
    got = round_significand(x, 14).tolist()              # 14 bits: ulp of 1.0 is 2^-13
    assert got == [1.0 + 2 ** -13, 1.0 + 2 * 2 ** -13, 1.0, -(1.0 + 2 ** -12), float("inf")]
    assert torch.equal(round_significand(x, 24), x)
    with pytest.raises(ValueError, match="significand_bits"):
        round_significand(x, 25)


def test_narrow_accumulation_loses_what_promotion_recovers():
    from amp_edu.fp8.accumulate import narrow_accumulate_mm
    gen = torch.Generator().manual_seed(0)
    a = fp8.cast_to_float8(torch.randn(8, 4096, generator=gen), E4).data.float()
    b = fp8.cast_to_float8(torch.randn(4096, 8, generator=gen), E4).data.float()
    exact = a.double() @ b.double()
    err = lambda y: float((y.double() - exact).norm() / exact.norm())  # noqa: E731
    narrow, promoted = narrow_accumulate_mm(a, b, 14), narrow_accumulate_mm(a, b, 14, promote_every=128)
    assert err(narrow_accumulate_mm(a, b, 24)) < 1e-6
    assert err(narrow) > 5 * err(promoted) and err(promoted) < 1e-3
    trunc = narrow_accumulate_mm(a, b, 14, rounding="truncate")
    assert err(trunc) > 3 * err(narrow)                  # a one-sided error grows with K


# --- the block-scaled GEMM ------------------------------------------------------------------------
def test_block_scaled_gemm_applies_scales_inside_the_k_loop():
    from amp_edu.fp8 import blockgemm as bg
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 512, generator=gen)
    x[3, 7], x[10] = 300.0, x[10] * 50                   # an outlier and a loud row
    w = torch.randn(512, 256, generator=gen) * 0.05
    w[:, :128] *= 100                                    # one block of columns 100x larger
    exact = x.double() @ w.double()
    quiet = (slice(11, None), slice(128, None))          # the outputs the outliers should not cost
    err = lambda y: float((y.double() - exact)[quiet].norm() / exact[quiet].norm())  # noqa: E731
    a, b = bg.block_cast(x, (1, 128)), bg.block_cast(w, (128, 128))
    y = bg.block_scaled_mm(a, b)
    # equals the product of the dequantized operands (the scales are exact to apply per chunk)
    ref = (a.dequantize().double() @ b.dequantize().double()).float()
    assert float((y - ref).abs().max()) < 1e-5 * float(ref.abs().max())
    per_tensor = scaled_mm(fp8.cast_to_float8(x, E4), fp8.cast_to_float8(w, E4))
    assert err(y) < err(per_tensor)
    assert err(bg.block_scaled_mm(a, b, significand_bits=14)) < 2 * err(y)   # promotion every 128
    with pytest.raises(ValueError, match="tiles"):
        bg.block_scaled_mm(b, a)
    odd = torch.randn(4, 100, generator=gen)
    q = bg.block_cast(odd, (1, 128))                       # padded with zeros to a whole tile
    assert q.data.shape == (4, 128) and q.dequantize().shape == (4, 100)
    assert float((q.dequantize() - odd).abs().max()) <= float(odd.abs().max()) * 2 ** -4


def test_blockwise_float8_linear_runs_the_block_gemm_in_all_three_gemms():
    from amp_edu.fp8 import blockgemm as bg
    torch.manual_seed(0)
    ref = nn.Linear(200, 136)                             # sizes off 128: padded to whole tiles
    lin = fp8.Float8Linear.from_float(copy.deepcopy(ref), config="blockwise")
    assert lin.config.weight.granularity is Granularity.BLOCKWISE
    x = torch.randn(3, 50, 200)
    x[..., :2] *= 1e3                                    # loud channels
    g = torch.randn(3, 50, 136)
    xr, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ref(xr).backward(g)
    y = lin(xb)
    y.backward(g)
    x2, g2 = x.reshape(-1, 200), g.reshape(-1, 136)
    want = bg.block_scaled_mm(bg.block_cast(x2, (1, 128)), bg.block_cast(ref.weight.t(), (128, 128)))
    assert torch.equal(y.reshape(-1, 136), want + lin.bias)          # the forward is the block loop
    want_dw = bg.block_scaled_mm(bg.block_cast(g2, (128, 1)).t(), bg.block_cast(x2, (128, 1)))
    assert torch.equal(lin.weight.grad, want_dw)                     # 128x1 tiles along the tokens
    for got, exp in ((y, ref(x)), (xb.grad, xr.grad), (lin.weight.grad, ref.weight.grad)):
        assert float((got - exp).detach().norm() / exp.detach().norm()) < 0.1
    with pytest.raises(ValueError, match="BLOCKWISE, both MX or neither"):
        Float8LinearConfig(input=CastConfig(granularity=Granularity.BLOCKWISE))


# --- MX granularity: 32-element blocks along K, e8m0 scales (the mxfp8 recipe) ------------------------
def _mx_rows(t, mode="rceil"):
    """t's rows cast to MX e4m3 (blocks of 32 along each row, zero-padded) and back."""
    from amp_edu.fp8.mx import mx_roundtrip
    k = t.shape[1]
    return mx_roundtrip(torch.nn.functional.pad(t.float(), (0, -k % 32)), "fp8_e4m3", 32, mode)[:, :k]


@pytest.mark.parametrize("mode", ["rceil", "floor"])
def test_mx_linear_is_its_formula_forward_and_backward(mode):
    torch.manual_seed(0)
    lin = torch.nn.Linear(70, 24)                      # K = 70: padded to 96 inside each cast
    config = Float8LinearConfig.from_recipe_name("mxfp8", mx_scale_mode=mode)
    layer = fp8.Float8Linear.from_float(lin, config=config)
    x = torch.randn(5, 70, requires_grad=True)
    y = layer(x)
    w = lin.weight.detach()
    assert torch.equal(y.detach(), _mx_rows(x.detach(), mode) @ _mx_rows(w, mode).t() + lin.bias.detach())
    go = torch.randn(5, 24)
    y.backward(go)
    # grad_input = dY @ W, blocks along the output features; grad_weight = dY^T @ x, blocks along tokens
    assert torch.equal(x.grad, _mx_rows(go, mode) @ _mx_rows(w.t(), mode).t())
    assert torch.equal(lin.weight.grad, _mx_rows(go.t(), mode) @ _mx_rows(x.detach().t(), mode).t())
    ref = torch.nn.functional.linear(x.detach(), w, lin.bias.detach())
    assert ((y.detach() - ref).norm() / ref.norm()) < 0.08     # e4m3 elements: a few percent


def test_mx_mm_is_the_product_of_the_block_cast_operands():
    """mx_cast blocks 32 elements along the GEMM's K (zero-padded) whichever dim that is; mx_mm
    multiplies the dequantized operands in float32 and returns the input's dtype."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 70, generator=g)                     # K = 70: two whole blocks and a padded one
    w_t = torch.randn(70, 24, generator=g)
    a, b = mx_cast(x, 1, E4, "rceil"), mx_cast(w_t, 0, E4, "rceil")
    assert a.values.shape == x.shape and b.values.shape == w_t.shape and a.values.dtype == torch.float32
    assert torch.equal(a.values, _mx_rows(x)) and torch.equal(b.values, _mx_rows(w_t.t()).t())
    assert torch.equal(mx_mm(a, b), _mx_rows(x) @ _mx_rows(w_t.t()).t())
    assert torch.equal(b.t().values, b.values.t()) and MX_BLOCK == 32
    # values e4m3 holds exactly under a power-of-two scale come through unchanged
    exact = torch.tensor([[1.0, -2.0, 0.5, 3.0] * 8, [0.25, 6.0, -1.5, 1.0] * 8])
    assert torch.equal(mx_mm(mx_cast(exact, 1, E4, "floor"), mx_cast(exact.t(), 0, E4, "floor")), exact @ exact.t())
    low = mx_mm(MXOperand(a.values, torch.bfloat16), b)
    assert low.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="2-D tensor and dim 0 or 1"):
        mx_cast(torch.randn(2, 3, 32), 1, E4, "rceil")


def test_mx_config_checks_and_the_recipe_trains():
    with pytest.raises(ValueError, match="mx_scale_mode"):
        Float8LinearConfig.from_recipe_name("mxfp8", mx_scale_mode="even")
    mx, block = CastConfig(granularity=Granularity.MX), CastConfig(granularity=Granularity.BLOCKWISE)
    with pytest.raises(ValueError, match="both MX"):
        Float8LinearConfig(input=mx, weight=block, grad_output=mx)
    with pytest.raises(ValueError, match="TENSORWISE"):
        CastConfig(ScalingType.DELAYED, Granularity.MX)
    from amp_edu import data, train
    h = train.train(data.get_task("blobs", device="cpu", n=64), "mlp", "fp8_mxfp8", steps=3, batch_size=16,
                    eval_every=0)
    assert h.recipe == "fp8_mxfp8" and h.steps == 3 and all(math.isfinite(v) for v in h.loss)
