"""amp_edu.fp4: NVFP4 quantization (against torchao's NVFP4Tensor), stochastic rounding onto a format's
grid, the random Hadamard transform, the emulated NVFP4 linear layer and its recipes (lesson 10).

torchao 0.18's NVFP4 training prototype (torchao/prototype/moe_training/nvfp4_training/) does
its stochastic rounding and Hadamard transform in Triton kernels for Blackwell GPUs, which do not
run here; its pure-PyTorch Hadamard matrix does, and the tests compare with it. The other
upstream is Transformer Engine (commit d0067d0): where its code writes a formula down (the
Hadamard matrix, the sign vector, the software stochastic rounding of ptx.cuh) the tests compare
with it exactly; elsewhere they test properties (unbiasedness, orthogonality, the product being
preserved) and the layer against a hand-written reference of the same rule.
"""

import math

import pytest
import torch
from torch import nn

from amp_edu import formats, recipes, viz
from amp_edu.fp4 import hadamard, nvfp4
from amp_edu.fp4.config import NVFP4LinearConfig, config_names
from amp_edu.fp4.linear import NVFP4Linear, convert_to_nvfp4_training, nvfp4_qdq
from amp_edu.fp8.torchao_import import import_torchao
from amp_edu.recipes.fp4 import GENERATOR_OFFSET, Nvfp4

F4 = formats.FP4_E2M1
AO = import_torchao("torchao.prototype.mx_formats.nvfp4_tensor")
needs_ao = pytest.mark.skipif(not AO, reason=f"torchao unavailable: {AO}")
E2M1_MAGS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)

# Transformer Engine, transformer_engine/pytorch/tensor/nvfp4_tensor.py at d0067d0:
# get_wgrad_sign_vector (lines 49-59) and the matrix of get_hadamard_matrix (lines 67-88, before its 1/sqrt(16)).
TE_SIGNS = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]
TE_H16 = [
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    [1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1],
    [1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1],
    [1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1],
    [1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1],
    [1, -1, 1, -1, -1, 1, -1, 1, 1, -1, 1, -1, -1, 1, -1, 1],
    [1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1, 1, 1],
    [1, -1, -1, 1, -1, 1, 1, -1, 1, -1, -1, 1, -1, 1, 1, -1],
    [1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1],
    [1, -1, 1, -1, 1, -1, 1, -1, -1, 1, -1, 1, -1, 1, -1, 1],
    [1, 1, -1, -1, 1, 1, -1, -1, -1, -1, 1, 1, -1, -1, 1, 1],
    [1, -1, -1, 1, 1, -1, -1, 1, -1, 1, 1, -1, -1, 1, 1, -1],
    [1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 1, 1, 1],
    [1, -1, 1, -1, -1, 1, -1, 1, -1, 1, -1, 1, 1, -1, 1, -1],
    [1, 1, -1, -1, -1, -1, 1, 1, -1, -1, 1, 1, 1, 1, -1, -1],
    [1, -1, -1, 1, -1, 1, 1, -1, -1, 1, 1, -1, 1, -1, -1, 1],
]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matmuls: one thread (on a busy 2-core machine two threads make a 16x16 matmul ~1000x slower)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _neighbours(x):
    """The e2m1 magnitudes just below-or-at and just above-or-at |x| (saturated at 6)."""
    mags = torch.tensor(E2M1_MAGS, dtype=torch.float64)
    a = x.double().abs().clamp(max=6.0)
    lo = mags[torch.searchsorted(mags, a, right=True) - 1]
    hi = mags[torch.searchsorted(mags, a, right=False).clamp(max=len(E2M1_MAGS) - 1)]
    return lo, hi


# --- rounding onto a grid: nearest equals quantize ------------------------------------------------
@pytest.mark.parametrize("fmt", ["fp4_e2m1", "fp8_e4m3", "fp8_e5m2", "fp16", "bf16"])
def test_round_to_grid_nearest_equals_quantize_at_every_midpoint(fmt):
    f = formats.get(fmt)
    v = formats.representable(f)
    mids = (v[:-1] + v[1:]) / 2
    m32 = mids.float()
    inf = torch.tensor(math.inf)
    x = torch.cat([v, mids, torch.nextafter(m32, inf).double(), torch.nextafter(m32, -inf).double(),
                   torch.tensor([0.0, -0.0, 1e-30, -1e-30])])
    x = x[x.abs() <= f.max]
    got, want = formats.round_to_grid(x, f), formats.quantize(x, f)
    assert torch.equal(got, want)
    assert torch.equal(torch.signbit(got), torch.signbit(want))            # -0.25 -> -0 as torch stores it


def test_round_to_grid_saturates_and_keeps_nan():
    big = torch.tensor([7.0, -100.0, math.inf, -math.inf])
    assert formats.round_to_grid(big, F4).tolist() == [6.0, -6.0, 6.0, -6.0]
    assert formats.round_to_grid(big, "fp16", "stochastic", generator=_gen()).tolist() == [7.0, -100.0, 65504.0, -65504.0]
    assert torch.isnan(formats.round_to_grid(torch.tensor([math.nan]), "fp16")).all()
    with pytest.raises(ValueError, match="no NaN"):
        formats.round_to_grid(torch.tensor([math.nan]), F4)


# --- stochastic rounding ----------------------------------------------------------------------------
def test_stochastic_rounding_is_unbiased_and_stays_between_the_neighbours():
    x = torch.rand(400, generator=_gen(1), dtype=torch.float64) * 12 - 6      # [-6, 6)
    n = 4000
    draws = torch.stack([formats.round_to_grid(x, F4, "stochastic", generator=g)
                         for g in [_gen(7)] for _ in range(n)])
    lo, hi = _neighbours(x)
    a = draws.abs()
    assert bool(((a == lo) | (a == hi)).all())                               # only the two neighbours
    assert bool((torch.sign(draws) * torch.sign(x) >= 0).all())              # never the other sign
    step, p = hi - lo, (x.abs() - lo) / (hi - lo)
    se = step * torch.sqrt(p * (1 - p) / n)                                  # standard error of the mean
    assert bool(((draws.mean(0) - x).abs() <= 5 * se + 1e-12).all())
    freq_up = (a == hi).double().mean(0)
    assert bool(((freq_up - p).abs() <= 5 * torch.sqrt(p * (1 - p) / n) + 1e-12).all())


def test_stochastic_rounding_leaves_grid_values_alone_and_repeats_with_the_generator():
    grid = formats.representable(F4)
    for seed in range(5):
        assert torch.equal(formats.round_to_grid(grid, F4, "stochastic", generator=_gen(seed)), grid)
    x = torch.randn(64, 32, generator=_gen(3)) * 2
    a = formats.round_to_grid(x, F4, "stochastic", generator=_gen(11))
    b = formats.round_to_grid(x, F4, "stochastic", generator=_gen(11))
    c = formats.round_to_grid(x, F4, "stochastic", generator=_gen(12))
    assert torch.equal(a, b) and not torch.equal(a, c)


def _te_stochastic_round_fp4_e2m1(x: torch.Tensor, rbits8: torch.Tensor) -> torch.Tensor:
    """Transformer Engine's software stochastic rounding onto e2m1, float32, transcribed from
    transformer_engine/common/util/ptx.cuh lines 532-547 (d0067d0). ``u * step`` is exact in
    float32 (u = k/256, step a power of two), so ``u * step + a`` is its ``fmaf``."""
    u = (rbits8 & 0xFF).float() * (1.0 / 256.0)
    a = x.abs()
    step = torch.where(a >= 4, 2.0, torch.where(a >= 2, 1.0, 0.5))
    t = u * step + a
    step_t = torch.where(t >= 4, 2.0, torch.where(t >= 2, 1.0, 0.5))
    inv_step_t = torch.where(t >= 4, 0.5, torch.where(t >= 2, 1.0, 2.0))
    q = torch.clamp(torch.floor(t * inv_step_t) * step_t, max=6.0)
    return torch.copysign(q, x)


def test_stochastic_rounding_with_8_bits_is_transformer_engines_cvt_rs_rule():
    # every multiple of 2^-10 in [-7, 7] (its sums with u*step are exact in float32; the grid
    # values are among them) with each of the 256 draws
    x = (torch.arange(-7 * 1024, 7 * 1024 + 1).float() / 1024).repeat_interleave(256)
    r = torch.arange(256).repeat(14 * 1024 + 1)
    ours = formats.round_to_grid(x, F4, "stochastic", rand=r, bits=8).float()
    assert torch.equal(ours, _te_stochastic_round_fp4_e2m1(x, r))
    # where TE's float32 sum rounds, it can round up where the exact rule does not (the docstring says so)
    odd, r255 = torch.tensor([2.0 ** -9 - 2.0 ** -30]), torch.tensor([255])
    assert formats.round_to_grid(odd, F4, "stochastic", rand=r255, bits=8).item() == 0.0
    assert _te_stochastic_round_fp4_e2m1(odd, r255).item() == 0.5
    # 8 bits round up with probability floor(256 p) / 256: biased toward zero by < 1/256 of a step
    assert formats.round_to_grid(torch.tensor([0.5 + 0.5 / 512]), F4, "stochastic",
                                 rand=torch.tensor([255]), bits=8).item() == 0.5


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])      # a float32 and a float64 working path
def test_stochastic_rounding_to_16_bit_formats_stays_between_neighbours_and_is_unbiased(fmt):
    f = formats.get(fmt)
    x = torch.tensor([1.0 + 2 ** -12, -(3.0 + 0.3 * 2 ** -6), 2.0 ** -20 * 1.37, 1e-40], dtype=torch.float64)
    want = x.float().double()                                                 # stored as float32 first
    n = 4000
    g = _gen(4)
    draws = torch.stack([formats.round_to_grid(x, f, "stochastic", generator=g) for _ in range(n)])
    for j in range(len(x)):
        below, above = formats.neighbours(float(want[j]), f, count=1)
        lo, hi = float(below[-1]), float(above[0])                           # lo < x < hi: none is on the grid
        assert set(draws[:, j].tolist()) <= {lo, hi}, (fmt, j)
        assert abs(float(draws[:, j].mean()) - float(want[j])) <= 5 * (hi - lo) / (2 * math.sqrt(n))
    assert torch.equal(formats.round_to_grid(x, f, dtype=torch.float32), formats.round_to_grid(x, f).float())


def test_round_to_grid_bad_input():
    x = torch.zeros(4)
    with pytest.raises(TypeError, match="explicit generator"):
        formats.round_to_grid(x, F4, "stochastic")
    with pytest.raises(ValueError, match="rounding must be one of"):
        formats.round_to_grid(x, F4, "up")
    with pytest.raises(ValueError, match="rand must be an integer tensor"):
        formats.round_to_grid(x, F4, "stochastic", rand=torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="bits"):
        formats.round_to_grid(x, F4, "stochastic", generator=_gen(), bits=64)
    with pytest.raises(ValueError, match="signed format"):
        formats.round_to_grid(x, "fp8_e8m0")
    with pytest.raises(TypeError, match="floating-point torch.Tensor"):
        formats.round_to_grid([0.5], F4)
    with pytest.raises(TypeError, match="dtype must be"):
        formats.round_to_grid(x, F4, dtype=torch.float16)


# --- NVFP4 quantization: equal to torchao's NVFP4Tensor ----------------------------------------------
@needs_ao
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(32, 64), (2, 16, 48)])
@pytest.mark.parametrize("two_level", [False, True])
def test_nvfp4_equals_torchao(dtype, shape, two_level):
    from torchao.prototype.mx_formats.kernels import f4_unpacked_to_f32, unpack_uint4
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(*shape, generator=gen) * torch.logspace(-4, 4, shape[-1])).to(dtype)
    x.view(-1)[:16] = 0                                   # a block of zeros: the 2^-6 floor
    ref = NVFP4Tensor.to_nvfp4(x.contiguous(), 16, per_tensor_amax_to_scale(x.abs().max()) if two_level else None)
    ours = nvfp4.nvfp4_quantize(x, nvfp4.per_tensor_scale(x.abs().max()) if two_level else None)
    elements = f4_unpacked_to_f32(unpack_uint4(ref.qdata.contiguous().view(torch.uint8))).reshape(x.shape)
    assert torch.equal(ours.block_scales.view(torch.uint8), ref.scale.view(torch.uint8))
    assert torch.equal(ours.elements, elements)
    assert torch.equal(ours.dequantize(dtype), ref.dequantize(dtype))


def test_nvfp4_bad_input():
    with pytest.raises(ValueError, match="multiple of 16"):
        nvfp4.nvfp4_quantize(torch.randn(4, 24))
    with pytest.raises(TypeError, match="float32 or bfloat16"):
        nvfp4.nvfp4_quantize(torch.randn(4, 16).half())
    assert nvfp4.NVFP4Tensor.bits_per_element() == 4.5


# --- NVFP4 quantization: stochastic and 16x16 tiles --------------------------------------------------
def test_nvfp4_stochastic_elements_are_neighbours_of_the_nearest_scaled_values():
    x = torch.randn(32, 64, generator=_gen(2)) * torch.logspace(-2, 2, 64)
    pt = nvfp4.per_tensor_scale(x.abs().max())
    near = nvfp4.nvfp4_quantize(x, pt)
    sr = nvfp4.nvfp4_quantize(x, pt, rounding="stochastic", generator=_gen(3))
    assert torch.equal(near.block_scales.view(torch.uint8), sr.block_scales.view(torch.uint8))   # scales do not depend on rounding
    scaled = (x.reshape(32, -1, 16) / near.scales().unsqueeze(-1)).reshape(x.shape).clamp(-6, 6)
    lo, hi = _neighbours(scaled)
    assert bool(((sr.elements.abs() == lo.float()) | (sr.elements.abs() == hi.float())).all())
    assert not torch.equal(near.elements, sr.elements)


def test_nvfp4_stochastic_dequantized_mean_is_the_input_where_nothing_saturates():
    x = torch.randn(16, 32, generator=_gen(4))
    pt = nvfp4.per_tensor_scale(x.abs().max())
    g = _gen(5)
    q0 = nvfp4.nvfp4_quantize(x, pt)
    inside = ((x.reshape(16, -1, 16) / q0.scales().unsqueeze(-1)).abs() < 6).reshape(x.shape)
    n = 2000
    mean = sum(nvfp4.nvfp4_quantize(x, pt, rounding="stochastic", generator=g).dequantize() for _ in range(n)) / n
    step = q0.scales().repeat_interleave(16, dim=-1) * 2.0                     # the widest e2m1 step, times the scale
    assert bool(((mean - x).abs()[inside] <= 5 * step[inside] / (2 * math.sqrt(n))).all())
    near_bias = (q0.dequantize() - x).abs()[inside].mean()
    assert (mean - x).abs()[inside].mean() < near_bias / 5                    # nearest's error does not average out


def test_nvfp4_16x16_tiles_share_a_scale_and_transpose_exactly():
    w = torch.randn(48, 32, generator=_gen(6)) * torch.logspace(-1, 1, 32)
    pt = nvfp4.per_tensor_scale(w.abs().max())
    q = nvfp4.nvfp4_quantize(w, pt, tile=(16, 16))
    s = q.block_scales.float().reshape(3, 16, 2)
    assert bool((s == s[:, :1, :]).all())                                     # one scale per 16x16 tile
    amax = w.reshape(3, 16, 2, 16).abs().amax(dim=(1, 3))
    want = torch.clamp(amax / 6 / pt, min=2 ** -6, max=448).to(torch.float8_e4m3fn)
    assert torch.equal(q.block_scales[::16].view(torch.uint8), want.view(torch.uint8))
    qt = nvfp4.nvfp4_quantize(w.t().contiguous(), pt, tile=(16, 16))
    assert torch.equal(qt.dequantize(), q.dequantize().t())                   # W and W.T: one quantized matrix
    q1, q1t = nvfp4.nvfp4_quantize(w, pt), nvfp4.nvfp4_quantize(w.t().contiguous(), pt)
    assert not torch.equal(q1t.dequantize(), q1.dequantize().t())              # with 1x16 blocks they differ


def test_nvfp4_quantize_bad_options():
    x = torch.randn(32, 32)
    with pytest.raises(TypeError, match="generator"):
        nvfp4.nvfp4_quantize(x, rounding="stochastic")
    with pytest.raises(ValueError, match="rounding must be one of"):
        nvfp4.nvfp4_quantize(x, rounding="down")
    with pytest.raises(ValueError, match="tile must be one of"):
        nvfp4.nvfp4_quantize(x, tile=(4, 16))
    with pytest.raises(ValueError, match=r"tile=\(16, 16\).*\(8, 32\)"):
        nvfp4.nvfp4_quantize(torch.randn(8, 32), tile=(16, 16))
    with pytest.raises(ValueError, match=r"tile=\(16, 16\)"):
        nvfp4.nvfp4_quantize(torch.randn(2, 16, 32), tile=(16, 16))


# --- the random Hadamard transform --------------------------------------------------------------------
def test_hadamard_matrix_and_signs_are_transformer_engines():
    h = torch.tensor(TE_H16, dtype=torch.float64)
    assert torch.equal(hadamard.sylvester(16), h)
    assert list(hadamard.TE_SIGNS) == TE_SIGNS
    m = hadamard.rht_matrix(dtype=torch.float64)
    # get_rht_matrix (nvfp4_tensor.py lines 94-103): sign_matrix @ hadamard * 1/sqrt(16)
    assert torch.equal(m, (torch.tensor(TE_SIGNS, dtype=torch.float64) * torch.eye(16, dtype=torch.float64)) @ h / 4)
    assert torch.equal(m.bfloat16().double(), m)                              # TE stores it in bf16: exact


def test_hadamard_matrix_equals_torchaos_nvfp4_training_prototype():
    """torchao/prototype/moe_training/nvfp4_training/hadamard_utils.py (0.18), get_rht_matrix
    (lines 111-129): sign_matrix @ get_hadamard_matrix (already times 1/sqrt(16))."""
    hu = pytest.importorskip("torchao.prototype.moe_training.nvfp4_training.hadamard_utils")
    for signs in (hadamard.TE_SIGNS, hadamard.random_signs(_gen(4))):
        theirs = hu.get_rht_matrix(tuple(signs), "cpu", torch.float32, 16)
        assert torch.equal(theirs, hadamard.rht_matrix(signs))
    assert torch.equal(hu.get_hadamard_matrix(16, "cpu", torch.float64), hadamard.sylvester(16) / 4)


def test_rht_is_orthogonal_and_preserves_the_product():
    for signs in (hadamard.TE_SIGNS, hadamard.random_signs(_gen(1))):
        m = hadamard.rht_matrix(signs, dtype=torch.float64)
        assert torch.equal(m @ m.t(), torch.eye(16, dtype=torch.float64))      # exact: entries ±1/4
    gen = _gen(2)
    a = torch.randn(24, 64, generator=gen, dtype=torch.float64)
    b = torch.randn(40, 64, generator=gen, dtype=torch.float64)
    ref = a @ b.t()
    got = hadamard.rht(a) @ hadamard.rht(b).t()
    assert float((got - ref).abs().max()) < 1e-12 * float(ref.abs().max())


def test_rht_equals_transformer_engines_reference_apply():
    """reference_nvfp4.py lines 421-448 (d0067d0): x.view(-1, 16) @ (H * 1/sqrt(16)), H = sign_mat @ h."""
    x = torch.randn(8, 48, generator=_gen(3))
    h = (torch.tensor(TE_SIGNS, dtype=torch.float32) * torch.eye(16)) @ torch.tensor(TE_H16, dtype=torch.float32)
    want = (x.contiguous().view(-1, 16) @ (h * (1.0 / float(16) ** 0.5))).view(x.shape)
    assert torch.equal(hadamard.rht(x), want)


def test_rht_spreads_an_outlier_over_its_block():
    x = torch.zeros(1, 16, dtype=torch.float64)
    x[0, 5] = 100.0
    y = hadamard.rht(x)
    assert torch.equal(y.abs(), torch.full_like(y, 25.0))                      # 100 / 4 on all 16
    assert float(y.norm()) == float(x.norm())


def test_hadamard_bad_input():
    with pytest.raises(ValueError, match="multiple of 16"):
        hadamard.rht(torch.randn(4, 24))
    with pytest.raises(TypeError, match="float32 or float64"):
        hadamard.rht(torch.randn(4, 16).half())
    with pytest.raises(ValueError, match="power-of-two"):
        hadamard.sylvester(12)
    with pytest.raises(ValueError, match="signs must be 16 values"):
        hadamard.rht_matrix((1, -1) * 4)
    with pytest.raises(TypeError, match="torch.Generator"):
        hadamard.random_signs(0)
    signs = hadamard.random_signs(_gen(9))
    assert len(signs) == 16 and set(signs) <= {1, -1} and signs == hadamard.random_signs(_gen(9))


# --- the NVFP4 linear layer ----------------------------------------------------------------------------
def _reference(x, w, b, dy, cfg, gen):
    """The rule written out: each GEMM operand quantized (its own per-tensor scale) along that
    GEMM's reduction dim, dequantized, multiplied in float32; in the order the layer draws."""
    def qdq(t, rounding="nearest", tile=(1, 16)):
        q = nvfp4.nvfp4_quantize(t, nvfp4.per_tensor_scale(t.abs().max()), rounding=rounding, generator=gen, tile=tile)
        return q.dequantize()
    tile = (16, 16) if cfg.weight_2d else (1, 16)
    g = "stochastic" if cfg.stochastic_rounding else "nearest"
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
    y = qdq(x2) @ qdq(w, tile=tile).t() + b
    dx = qdq(dy2, g) @ qdq(w.t().contiguous(), tile=tile).t()
    dyt, xt = dy2.t().contiguous(), x2.t().contiguous()
    if cfg.rht_wgrad:
        m = (torch.tensor(cfg.rht_signs, dtype=torch.float32) * torch.eye(16)) @ torch.tensor(TE_H16, dtype=torch.float32) / 4
        dyt, xt = (dyt.view(-1, 16) @ m).view(dyt.shape), (xt.view(-1, 16) @ m).view(xt.shape)
    dw = qdq(dyt, g) @ qdq(xt).t()
    return y.reshape(*x.shape[:-1], -1), dx.reshape(x.shape), dw, dy2.sum(0)


@pytest.mark.parametrize("name", config_names())
def test_layer_forward_and_gradients_equal_the_written_out_rule(name):
    cfg = NVFP4LinearConfig.from_recipe_name(name)
    gen = _gen(0)
    torch.manual_seed(0)
    base = nn.Linear(64, 32)
    layer = NVFP4Linear.from_float(base, cfg, generator=torch.Generator().manual_seed(42))
    x = (torch.randn(2, 16, 64, generator=gen) * torch.logspace(-1, 1, 64)).requires_grad_()
    dy = torch.randn(2, 16, 32, generator=gen)
    y = layer(x)
    y.backward(dy)
    ref = _reference(x.detach(), base.weight.detach(), base.bias.detach(), dy, cfg, torch.Generator().manual_seed(42))
    for got, want in zip((y, x.grad, layer.weight.grad, layer.bias.grad), ref):
        assert torch.equal(got, want)
    assert layer.weight is base.weight                                        # shares the parameters


def test_layer_is_close_to_fp32_and_stochastic_gradients_average_out():
    torch.manual_seed(1)
    base = nn.Linear(32, 16)
    x = torch.randn(64, 32, generator=_gen(1))
    dy = torch.randn(64, 16, generator=_gen(2))
    exact_dx = dy @ base.weight.detach()
    layer = NVFP4Linear.from_float(base, "nvfp4_sr", generator=_gen(3))
    with torch.no_grad():
        y = layer(x)
        assert float((y - (x @ base.weight.t() + base.bias)).norm() / y.norm()) < 0.25
    wq = nvfp4_qdq(base.weight.detach().t().contiguous())
    dxs = []
    for _ in range(300):
        xi = x.clone().requires_grad_()
        layer(xi).backward(dy)
        dxs.append(xi.grad)
    mean_dx = torch.stack(dxs).mean(0)
    target = dy @ wq.t()                                                      # dY exact, W quantized as dgrad sees it
    assert float((mean_dx - target).norm() / target.norm()) < 0.02
    near = nvfp4_qdq(dy) @ wq.t()
    assert float((near - target).norm()) > 3 * float((mean_dx - target).norm())
    assert float((mean_dx - exact_dx).norm() / exact_dx.norm()) < 0.2


def test_layer_and_config_bad_input():
    with pytest.raises(ValueError, match=r"in_features.*multiple of 16.*24.*\(16, 24\)"):
        NVFP4Linear(24, 16)
    with pytest.raises(ValueError, match=r"out_features.*multiple of 16.*\(20, 16\)"):
        NVFP4Linear(16, 20)
    layer = NVFP4Linear(16, 16)
    with pytest.raises(ValueError, match=r"tokens.*multiple of 16.*\(3, 5, 16\)"):
        layer(torch.randn(3, 5, 16, requires_grad=True))
    with torch.no_grad():
        assert layer(torch.randn(3, 5, 16)).shape == (3, 5, 16)              # evaluation: no wgrad, no token rule
    with pytest.raises(TypeError, match="float32 or bfloat16"):
        layer(torch.randn(16, 16).half())
    with pytest.raises(TypeError, match="generator"):
        NVFP4Linear(16, 16, config="nvfp4_sr")
    with pytest.raises(TypeError, match="config must be"):
        NVFP4Linear(16, 16, config=3)
    with pytest.raises(ValueError, match="recipe must be one of"):
        NVFP4LinearConfig.from_recipe_name("nvfp8")
    with pytest.raises(TypeError, match="stochastic_rounding must be True or False"):
        NVFP4LinearConfig(stochastic_rounding=1)
    with pytest.raises(ValueError, match="signs must be 16 values"):
        NVFP4LinearConfig(rht_signs=(1,) * 15)
    with pytest.raises(TypeError, match="nn.Linear"):
        NVFP4Linear.from_float(nn.Conv1d(16, 16, 1))
    with pytest.raises(TypeError, match="nn.Module"):
        convert_to_nvfp4_training("model")


def test_an_all_zero_operand_stays_zero():
    z = torch.zeros(32, 16)
    assert torch.equal(nvfp4_qdq(z), z)
    assert torch.equal(nvfp4_qdq(z, rounding="stochastic", generator=_gen()), z)
    layer = NVFP4Linear(16, 16, config="nvfp4_sr", generator=_gen())
    x = torch.zeros(16, 16, requires_grad=True)
    layer(x).backward(torch.randn(16, 16, generator=_gen(1)))
    assert torch.equal(layer.weight.grad, torch.zeros(16, 16)) and torch.isfinite(x.grad).all()


def test_convert_keeps_the_head_and_shares_one_generator():
    m = nn.Sequential()
    m.add_module("fc", nn.Linear(16, 32))
    m.add_module("head", nn.Linear(32, 5))
    g = _gen(0)
    convert_to_nvfp4_training(m, "nvfp4_te", generator=g)
    assert type(m.fc) is NVFP4Linear and m.fc.generator is g and m.fc.config.weight_2d
    assert type(m.head) is nn.Linear


# --- the recipes -----------------------------------------------------------------------------------------
def test_recipes_are_registered_in_their_family_with_colours():
    names = recipes.names(family=recipes.Family.FP4)
    assert names == config_names() == ("nvfp4", "nvfp4_sr", "nvfp4_sr_rht", "nvfp4_te")   # fp4 owns them
    for n in names:
        r = recipes.parse_recipe(n)
        assert isinstance(r, Nvfp4) and r.name == n and r.family is recipes.Family.FP4
        assert viz.color_for(n) in viz.FAMILY_PALETTES[recipes.Family.FP4.value]
    assert len({viz.color_for(n) for n in names}) == len(names)
    assert NVFP4LinearConfig.from_recipe_name("nvfp4_te") == NVFP4LinearConfig(True, True, True)


def test_a_recipe_seeds_one_generator_from_the_run_and_keeps_the_head():
    r = Nvfp4("nvfp4_sr")
    m = nn.Sequential()
    m.add_module("fc", nn.Linear(16, 32))
    m.add_module("head", nn.Linear(32, 5))
    torch.manual_seed(7)                                  # what train() does with the run's seed
    r.cast_model(m)
    assert r.generator.initial_seed() == 7 + GENERATOR_OFFSET
    assert type(m.fc) is NVFP4Linear and m.fc.generator is r.generator and m.fc.config.stochastic_rounding
    assert type(m.head) is nn.Linear


@pytest.mark.parametrize("name", ["nvfp4", "nvfp4_te"])
def test_recipes_train_through_amp_edu_train_and_repeat(name):
    from amp_edu.data import get_task
    from amp_edu.models import build
    from amp_edu.train import train
    task = get_task("chars", block_size=8)

    def run():
        return train(task, build("transformer", task, d_model=16, n_layers=1, seed=0), name, steps=3,
                     batch_size=8, optimizer="adamw", eval_every=0, seed=0)
    h = run()
    assert h.recipe == name and all(math.isfinite(v) for v in h.loss)
    assert any(isinstance(m, NVFP4Linear) for m in h.model.modules())
    assert type(h.model.head) is nn.Linear                                   # the output layer stays high precision
    assert all(p.dtype == torch.float32 for p in h.model.parameters())        # fp32 master weights
    assert run().loss == h.loss                                               # the rounding draws repeat with the seed
