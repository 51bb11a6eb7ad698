"""amp_edu.optim against torchao.optim 0.18: stochastic rounding, quantization maps and codes
(eager, fast), Kahan compensation against exact sums, the recipes, footprints and resume."""

import io

import pytest
import torch

from amp_edu.device import num_threads

from amp_edu import data, recipes, train
from amp_edu.optim import AdamW, QuantizedState
from amp_edu.optim.blockwise import BLOCK_SIZES, QUANTIZED_STATES, codes_shape, dequantize, qmap_for, quantize
from amp_edu.optim.kahan import compensation_like, kahan_add_
from amp_edu.optim.memory import footprint, tensor_bytes
from amp_edu.optim.qmaps import dynamic_map, linear_map, nearest_code
from amp_edu.optim.stochastic import random_bits, round_up_probability, stochastic_round
from amp_edu.optim import adamw as adamw_mod
from amp_edu.optim.updates import record_updates, replay
from amp_edu.recipes import parse_recipe

quant_utils = pytest.importorskip("torchao.optim.quant_utils")
from torchao.optim.subclass_4bit import OptimState4bit  # noqa: E402
from torchao.optim.subclass_8bit import OptimState8bit  # noqa: E402
from torchao.optim.subclass_fp8 import OptimStateFp8  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread():
    """Small tensors: one thread is faster, and two busy cores shared by several jobs make torch's
    thread pool spin (10-100x slower tests)."""
    with num_threads(1):
        yield


def _bits(t):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.int32)


# --- stochastic rounding ------------------------------------------------------------------------
def test_stochastic_round_is_torchaos_bit_for_bit_on_the_same_stream():
    x = torch.randn(10000) * torch.logspace(-30, 30, 10000)
    torch.manual_seed(123)
    theirs = quant_utils._fp32_to_bf16_sr(x)
    torch.manual_seed(123)
    ours = stochastic_round(x)
    assert torch.equal(_bits(ours), _bits(theirs))
    r = random_bits(x.shape, generator=torch.Generator().manual_seed(5))
    assert torch.equal(r, torch.randint(0, 1 << 16, x.shape, dtype=torch.int32,        # torchao's draw
                                        generator=torch.Generator().manual_seed(5)))
    torch.manual_seed(9)
    again = stochastic_round(x, generator=torch.Generator().manual_seed(5))
    assert torch.equal(_bits(stochastic_round(x, rand=r)), _bits(again))


def test_stochastic_round_is_unbiased_and_lands_on_neighbours():
    x = torch.full((200_000,), 1.0 + 2.0 ** -10)          # an eighth of bf16's ulp (2^-7) above 1
    r = stochastic_round(x, generator=torch.Generator().manual_seed(0)).float()
    assert set(r.unique().tolist()) == {1.0, 1.0 + 2.0 ** -7}
    p = float(round_up_probability(x[:1]))
    assert p == 2.0 ** -3
    up = float((r > 1).double().mean())
    se = (p * (1 - p) / x.numel()) ** 0.5
    assert abs(up - p) < 5 * se
    assert float((x.bfloat16().float() == 1.0).all())      # round to nearest never moves it


def test_stochastic_round_keeps_bf16_values_and_signs():
    x = torch.tensor([1.0, -1.5, 0.0, -0.0, 3.0e38, float("inf")]).bfloat16().float()   # bf16 values
    assert torch.equal(_bits(stochastic_round(x)), _bits(x.bfloat16()))
    y = torch.tensor([-1.0 - 2.0 ** -9] * 4096)
    out = stochastic_round(y, generator=torch.Generator().manual_seed(1)).float()
    assert set(out.unique().tolist()) == {-1.0, -1.0 - 2.0 ** -7}


def test_stochastic_round_rejects_bad_input():
    with pytest.raises(TypeError):
        stochastic_round([1.0])
    with pytest.raises(ValueError):
        stochastic_round(torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError):
        stochastic_round(torch.ones(3), rand=torch.ones(3))


# --- Kahan ----------------------------------------------------------------------------------------
def test_kahan_follows_the_exact_sum_where_round_to_nearest_stalls():
    w0 = torch.randn(4096).bfloat16()
    u = (w0.float().abs() * 2.0 ** -11) * torch.sign(torch.randn(4096))      # 1/4 ulp or less: always lost
    p, near, comp = w0.clone(), w0.clone(), compensation_like(w0)
    exact = w0.double()
    for _ in range(500):
        kahan_add_(p, comp, u)
        near = (near.float() + u).bfloat16()
        exact = exact + u.double()
    assert torch.equal(near, w0)                               # every update lost
    change = (exact - w0.double()).norm()
    # the bf16 compensation keeps 8 significant bits of the leftover each step, so a little is lost
    # (the same tiny update 500 times makes it systematic): under 2% of the change, against 100%
    assert float((p.double() - exact).norm() / change) < 0.02
    assert comp.dtype == torch.bfloat16


def test_kahan_rejects_mismatched_buffers():
    p = torch.zeros(4, dtype=torch.bfloat16)
    with pytest.raises(ValueError):
        kahan_add_(p, torch.zeros(4), torch.zeros(4))
    with pytest.raises(TypeError):
        kahan_add_(p, p.clone(), 1.0)


# --- maps, codes, scales (eager, against torchao's own functions and subclasses) -----------------
@pytest.mark.parametrize("args", [(True, 7, 8), (False, 7, 8), (True, 3, 4)])
def test_dynamic_map_is_torchaos(args):
    assert torch.equal(dynamic_map(*args), torch.tensor(quant_utils.create_dynamic_map(*args), dtype=torch.float32))


def test_nearest_code_is_torchaos():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(50000, generator=g) * 2 - 1
    q = dynamic_map()
    mid = (q[1:] + q[:-1]) / 2                                  # exact ties go up in both
    for v in (x, mid, q):
        assert torch.equal(nearest_code(v, q), quant_utils.quantize_8bit_with_qmap(v, q))
    for q4 in (dynamic_map(True, 3, 4), linear_map()):
        assert torch.equal(nearest_code(x, q4), quant_utils.quantize_4bit_with_qmap(x, q4))


@pytest.mark.parametrize("kind,signed", [("8bit", True), ("8bit", False), ("4bit", True), ("4bit", False),
                                         ("fp8", True)])
def test_quantized_state_equals_torchaos_subclass(kind, signed):
    shape = (64, 128)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1)) ** 3
    if not signed:
        x = x.abs()
    ours = QuantizedState(kind, shape, signed=signed).copy_(x)
    if kind == "8bit":
        theirs = OptimState8bit.zeros(shape, signed, 256)
    elif kind == "4bit":
        theirs = OptimState4bit.zeros(shape, signed, 128)
    else:
        theirs = OptimStateFp8.zeros(shape, 256)
    theirs.copy_(x)
    codes = (lambda c: c.view(torch.uint8))
    assert torch.equal(codes(ours.codes), codes(theirs.codes))
    assert torch.equal(ours.scale, theirs.scale)
    assert torch.equal(ours.dequantize(), theirs.dequantize())


@pytest.mark.parametrize("kind,signed", [("8bit", True), ("8bit", False), ("4bit", True), ("4bit", False),
                                         ("fp8", True)])
def test_blockwise_codes_and_scales_are_torchaos(kind, signed):
    """The arithmetic under QuantizedState, called directly: torchao's codes, scales and values, its
    block sizes, one fp32 scale per block, and two 4-bit codes per byte, high nibble first."""
    assert QUANTIZED_STATES == ("8bit", "4bit", "fp8")
    shape = torch.Size((32, 256))
    x = torch.randn(shape, generator=torch.Generator().manual_seed(2)) ** 3
    x = x if signed else x.abs()
    block = BLOCK_SIZES[kind]
    theirs = {"8bit": lambda: OptimState8bit.zeros(shape, signed), "4bit": lambda: OptimState4bit.zeros(shape, signed),
              "fp8": lambda: OptimStateFp8.zeros(shape)}[kind]()
    assert theirs.block_size == block
    theirs.copy_(x)
    qmap = qmap_for(kind, signed)
    codes, scale = quantize(x, kind, qmap, block)
    assert codes.shape == codes_shape(kind, shape) == theirs.codes.shape
    assert torch.equal(codes.view(torch.uint8), theirs.codes.view(torch.uint8)) and torch.equal(scale, theirs.scale)
    assert scale.shape == (shape.numel() // block,) and scale.dtype == torch.float32
    assert torch.equal(dequantize(codes, scale, qmap, kind, block, shape), theirs.dequantize())
    if kind == "4bit":
        unpacked = nearest_code(x.reshape(-1, block) / scale.view(-1, 1), qmap).view(-1)
        assert torch.equal(codes, (unpacked[0::2] << 4) | unpacked[1::2])


def test_tensor_bytes_counts_each_storage_once_and_what_a_state_stores():
    t = torch.zeros(64, 64)
    assert tensor_bytes([t, t[:8], t.t(), t.view(-1)]) == 64 * 64 * 4          # one storage, views of it
    assert tensor_bytes([t, t.clone(), torch.zeros(3, dtype=torch.bfloat16)]) == 2 * 64 * 64 * 4 + 3 * 2
    s = QuantizedState("8bit", (256, 64))
    assert tensor_bytes([s]) == 256 * 64 + 4 * 256 * 64 // 256 + 4 * 256      # codes, scales, the code book
    assert tensor_bytes([torch.zeros(0), torch.zeros(0)]) == 0


def test_quantized_state_rejects_bad_shapes():
    with pytest.raises(ValueError):
        QuantizedState("8bit", (100,))
    with pytest.raises(ValueError):
        QuantizedState("2bit", (256,))


# --- the optimizer ----------------------------------------------------------------------------------
def test_sqrt_rounded_is_correctly_rounded_and_lerp_is_two_roundings():
    x = torch.rand(20000, generator=torch.Generator().manual_seed(0)) * 10
    assert torch.equal(adamw_mod.sqrt_rounded(x), torch.tensor([v ** 0.5 for v in x.double().tolist()]).float())
    a, b = torch.randn(1000), torch.randn(1000)
    assert torch.equal(adamw_mod.lerp_like_inductor(a, b, 0.1), a + (b - a) * 0.1)
    assert torch.equal(adamw_mod.lerp_like_inductor(a, b, 0.9), b + (b - a) * (0.9 - 1))


def test_adamw_rejects_bad_arguments():
    p = [torch.zeros(3, requires_grad=True)]
    for kw, err in [(dict(lr="1"), TypeError), (dict(lr=-1.0), ValueError), (dict(betas=(0.9, 1.0)), ValueError),
                    (dict(states="int8"), ValueError), (dict(rounding="up"), ValueError),
                    (dict(betas=0.9), TypeError), (dict(generator=1), TypeError), (dict(decoupled=1), TypeError)]:
        with pytest.raises(err):
            AdamW(p, **kw)


def test_small_tensors_keep_unquantized_states():
    big, small, odd = (torch.zeros(s, requires_grad=True) for s in ((64, 64), (4095,), (4097,)))
    opt = AdamW([big, small, odd], states="8bit")
    for p in (big, small, odd):
        p.grad = torch.ones_like(p)
    opt.step()
    kinds = [type(opt.state[p]["exp_avg"]).__name__ for p in (big, small, odd)]
    assert kinds == ["QuantizedState", "Tensor", "Tensor"]


def test_recipes_registered_and_train():
    from amp_edu.optim import QUANTIZED_STATES, WEIGHT_ROUNDINGS
    assert recipes.names(family=recipes.Family.OPTIMIZER) == (                # derived from optim's own names
        *(f"bf16_{r}" for r in WEIGHT_ROUNDINGS), *(f"states_{k}" for k in QUANTIZED_STATES))
    task = data.get_task("blobs")
    for name in recipes.names(family=recipes.Family.OPTIMIZER):
        rec = parse_recipe(name)
        assert rec.name == name
        h = train.train(task, "mlp", name, steps=3, optimizer="adamw", lr=1e-3, eval_every=0)
        assert isinstance(h.optimizer, AdamW)
        want = torch.bfloat16 if name.startswith("bf16_") else torch.float32
        assert h.model.head.weight.dtype == want
    with pytest.raises(ValueError, match="adam"):
        train.train(task, "mlp", "states_8bit", steps=1, optimizer="sgd")


def test_footprint_counts_real_tensors():
    task = data.get_task("blobs")
    h = train.train(task, "mlp", "fp32", steps=1, optimizer="adamw", eval_every=0)
    f = footprint(h.model, h.optimizer).per_param()
    assert f["weights"] == 4 and f["grads"] == 4 and 8 <= f["state"] < 8.01   # + one 4-byte step per tensor
    h8 = train.train(task, "mlp", "states_8bit", steps=1, optimizer="adamw", eval_every=0)
    f8 = footprint(h8.model, h8.optimizer)
    ps = list(h8.model.parameters())
    big = [p.numel() for p in ps if p.numel() >= 4096]
    small = sum(p.numel() for p in ps) - sum(big)
    # two uint8 codes + two fp32 scales per 256 + two 256-entry fp32 code books per big tensor;
    # two fp32 moments per small one; a 4-byte step per tensor
    want = sum(2 * n + 2 * 4 * n // 256 + 2 * 1024 for n in big) + 8 * small + 4 * len(ps)
    assert big and f8.state == want


def test_state_dict_resume_is_bit_exact_and_loads_with_weights_only():
    def run(stop_at=None, steps=6):
        torch.manual_seed(0)
        w = torch.randn(64, 64, dtype=torch.bfloat16, requires_grad=True)
        opt = AdamW([w], states="4bit", rounding="stochastic", lr=1e-2)
        gen = torch.Generator().manual_seed(1)
        for k in range(steps):
            if k == stop_at:
                buf = io.BytesIO()
                torch.save({"w": w.detach().clone(), "opt": opt.state_dict(), "rng": torch.get_rng_state(),
                            "gen": gen.get_state()}, buf)
                buf.seek(0)
                ck = torch.load(buf, weights_only=True)
                w = ck["w"].clone().requires_grad_()
                opt = AdamW([w], states="4bit", rounding="stochastic", lr=1e-2)
                opt.load_state_dict(ck["opt"])
                torch.set_rng_state(ck["rng"])
                gen.set_state(ck["gen"])
            w.grad = torch.randn(w.shape, generator=gen).bfloat16()
            opt.step()
        return w.detach()

    assert torch.equal(_bits(run()), _bits(run(stop_at=3)))


def test_replay_nearest_loses_what_kahan_and_sr_keep():
    from amp_edu import models
    task = data.get_task("blobs", seed=0)
    m = models.build("mlp", task, seed=0, width=128)      # lesson 08's size, also under AMP_EDU_SMOKE
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.0, foreach=False)
    g = torch.Generator().manual_seed(0)

    def step():
        x, y = task.batch(64, g)
        opt.zero_grad()
        task.loss(m(x), y).backward()
        opt.step()

    rows = replay(*record_updates(m, step, 30), generator=torch.Generator().manual_seed(0))
    big = [r for r in rows if r.numel >= 4096]
    assert len(big) == 3
    assert all(r.below_half_ulp > 0.5 and r.kept["nearest"] < 0.6 for r in big)
    assert all(abs(r.kept["kahan"] - 1) < 0.02 and abs(r.kept["stochastic"] - 1) < 0.1 for r in big)
