"""amp_edu's fp8 all-gather under FSDP2 (amp_edu.fp8.fsdp) against torchao's, on two gloo ranks.

One launch runs lesson 11's measurement (:func:`amp_edu.distributed.fsdp.fp8_all_gather`: torchao
and amp_edu, each with the weights gathered in bf16, in fp8, and in fp8 with precomputed scales;
same model, seed, batches and tensorwise recipe) plus a look at the gathered weights themselves.
Checked: losses and master weights equal torchao's bit for bit at every step; the fp8 all-gather
moves about half the bf16 one's bytes; precomputed scales leave one amax all-reduce per step;
the gathered bytes are the fp8 cast of the full fp32 weight with one global scale, and
Float8Linear uses them without casting the weight again. Configuration errors need no ranks.
"""

import math

import pytest
import torch
from torch import nn

from amp_edu.distributed import fsdp, launch
from amp_edu.distributed.lesson import _quiet
from amp_edu.distributed.parity import shard, tiny_mlp
from amp_edu.fp8 import Float8Linear, Float8LinearConfig, convert_to_float8_training
from amp_edu.fp8.cast import cast_to_float8
from amp_edu.fp8.fsdp import (Float8GatheredWeight, WeightWithFloat8AllGather,
                              precompute_float8_dynamic_scale_for_fsdp)
from amp_edu.fp8.reference import import_torchao
from amp_edu.fp8.scaling import round_down_to_power_of_2

pytestmark = pytest.mark.slow     # two-rank FSDP2 runs: processes started
STEPS = 3
_E4 = torch.float8_e4m3fn


def _config(**kw):
    return Float8LinearConfig.from_recipe_name("tensorwise", enable_fsdp_float8_all_gather=True, **kw)


def _gathered(power_of_2: bool) -> dict:
    """One forward/backward of the FSDP2-sharded amp_edu model: what each Float8Linear finds as its
    weight after FSDP2's all-gather, and how often it casts a weight itself."""
    import amp_edu.fp8.linear as linear
    model = shard(convert_to_float8_training(tiny_mlp(0, fsdp.BYTES_WIDTHS), _config(power_of_2=power_of_2)),
                  fsdp.policy("bf16/fp32"))
    seen = []

    def look(module, args):    # after FSDP2's own pre-forward hook: the weight is the gathered one
        w = module.weight
        seen.append({"type": type(w).__name__, "dtype": w.dtype, "shape": tuple(w.shape),
                     "data": w.fp8.data.view(torch.uint8).clone(), "scale": w.fp8.scale.clone()})

    for m in model:
        if isinstance(m, Float8Linear):
            m.register_forward_pre_hook(look)
    casts = []
    real = linear.cast_operand

    def counting(t, cast, config, dim, *, weight=False):
        casts.append(weight)
        return real(t, cast, config, dim, weight=weight)

    linear.cast_operand = counting
    try:
        x = torch.randn(32, fsdp.BYTES_WIDTHS[0], generator=torch.Generator().manual_seed(1))
        model(x).float().pow(2).mean().backward()
    finally:
        linear.cast_operand = real
    return {"seen": seen, "weight_casts": sum(casts), "casts": len(casts)}


def everything(rank: int, world_size: int) -> dict:
    _quiet()
    return {"runs": fsdp.fp8_all_gather(rank, world_size, steps=STEPS),
            "gathered": _gathered(False), "gathered_pow2": _gathered(True)}


@pytest.fixture(scope="module")
def ranks():
    if not import_torchao("torchao.float8"):
        pytest.skip("torchao unavailable")
    return launch(everything, world_size=2, timeout_s=600, progress=False)


def _rows(ranks, rank, lib, variant):
    runs = ranks[rank]["runs"]
    assert "error" not in runs[lib], runs[lib]
    return runs[lib][variant]


@pytest.mark.parametrize("variant", list(fsdp.FP8_VARIANTS))
def test_losses_and_weights_equal_torchao_bit_for_bit(ranks, variant):
    for rank in (0, 1):
        ours, ao = _rows(ranks, rank, "amp_edu", variant), _rows(ranks, rank, "torchao", variant)
        assert len(ours) == len(ao) == STEPS
        for step, (a, b) in enumerate(zip(ours, ao)):
            assert a["loss"] == b["loss"], (rank, step)
            assert len(a["weights"]) == len(b["weights"])
            for wa, wb in zip(a["weights"], b["weights"]):
                assert wa.dtype == wb.dtype == torch.float32
                assert torch.equal(wa, wb), (rank, step)


def test_fp8_all_gather_moves_about_half_the_bytes(ranks):
    runs = ranks[0]["runs"]
    bias = runs["numel"] - runs["weight_numel"]
    for lib in fsdp.FP8_LIBRARIES:
        bf16 = _rows(ranks, 0, lib, "bf16 all-gather")[-1]["fsdp"]["all_gather"]
        for variant in ("fp8 all-gather", "fp8 all-gather, precomputed scales"):
            fp8 = _rows(ranks, 0, lib, variant)[-1]["fsdp"]["all_gather"]
            assert fp8["dtypes"] == ["uint8"]            # fp8 weights and bf16 biases, gathered as bytes
            assert fp8["calls"] == bf16["calls"] == 6    # 3 layers, forward and backward
            # each rank hands in its half of every parameter, twice: 1 B per weight, 2 B per bias
            assert fp8["input_bytes"] == 2 * (runs["weight_numel"] * 1 + bias * 2) // 2
            assert bf16["input_bytes"] == 2 * runs["numel"] * 2 // 2
            assert 0.5 <= fp8["input_bytes"] / bf16["input_bytes"] < 0.51


def test_precomputed_scales_leave_one_all_reduce_per_step(ranks):
    for rank in (0, 1):
        for lib in fsdp.FP8_LIBRARIES:
            gathers = _rows(ranks, rank, lib, "fp8 all-gather")[0]["fsdp"]["all_gather"]["calls"]
            dynamic = [r["all_reduces"] for r in _rows(ranks, rank, lib, "fp8 all-gather")]
            pre = [r["all_reduces"] for r in _rows(ranks, rank, lib, "fp8 all-gather, precomputed scales")]
            bf16 = [r["all_reduces"] for r in _rows(ranks, rank, lib, "bf16 all-gather")]
            assert dynamic == [gathers] * STEPS                       # one per gather of a weight
            assert pre == [gathers + 1] + [1] * (STEPS - 1)          # step 1 has no scales yet
            assert bf16 == [0] * STEPS
    # amp_edu all-reduces with dist.all_reduce (c10d), torchao through functional collectives
    row = _rows(ranks, 0, "amp_edu", "fp8 all-gather, precomputed scales")[-1]["calls"]
    assert row.get("allreduce") == 1 and "all_reduce" not in row
    row = _rows(ranks, 0, "torchao", "fp8 all-gather, precomputed scales")[-1]["calls"]
    assert row.get("all_reduce") == 1


def test_gathered_weight_is_the_fp8_cast_of_the_full_weight(ranks):
    full = [m.weight.detach() for m in tiny_mlp(0, fsdp.BYTES_WIDTHS) if isinstance(m, nn.Linear)]
    for rank in (0, 1):
        seen = ranks[rank]["gathered"]["seen"]
        assert len(seen) == len(full)
        for s, w in zip(seen, full):
            want = cast_to_float8(w, _E4)                    # one scale from the global amax
            assert s["type"] == "Float8GatheredWeight" and s["dtype"] == torch.bfloat16
            assert s["shape"] == tuple(w.shape)
            assert torch.equal(s["scale"], want.scale)
            assert torch.equal(s["data"], want.data.view(torch.uint8))


def test_float8linear_uses_the_gathered_weight_without_casting_it(ranks):
    g = ranks[0]["gathered"]
    assert g["weight_casts"] == 0
    assert g["casts"] == 3 * 4          # per layer: x (forward), dY twice and x (backward)


def test_power_of_2_scales_are_rounded_under_fp8_all_gather(ranks):
    full = [m.weight.detach() for m in tiny_mlp(0, fsdp.BYTES_WIDTHS) if isinstance(m, nn.Linear)]
    for s, w in zip(ranks[0]["gathered_pow2"]["seen"], full):
        scale = s["scale"]
        assert torch.equal(scale, round_down_to_power_of_2(cast_to_float8(w, _E4).scale))
        assert math.log2(scale.item()).is_integer()
        assert torch.equal(s["data"], cast_to_float8(w, _E4, scale).data.view(torch.uint8))


def test_amp_edu_with_and_without_fp8_all_gather_differ_in_the_weight_cast(ranks):
    """bf16 all-gather casts fp32 -> bf16 -> e4m3 with the bf16 weight's scale; fp8 all-gather
    casts fp32 -> e4m3 with the fp32 weight's scale: some codes differ, so the losses do too."""
    paths = fsdp.fp8_weight_paths()["layers"]
    assert all(0 < r["codes differ"] < r["numel"] for r in paths)
    a = [r["loss"] for r in _rows(ranks, 0, "amp_edu", "bf16 all-gather")]
    b = [r["loss"] for r in _rows(ranks, 0, "amp_edu", "fp8 all-gather")]
    assert a[0] != b[0]
    assert max(abs(x - y) / abs(y) for x, y in zip(a, b)) < 0.05      # close, not equal


# --- no ranks needed ---------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", ["rowwise", "rowwise_with_gw_hp", "delayed", "blockwise", "mxfp8"])
def test_fp8_all_gather_refuses_a_non_tensorwise_weight_cast(recipe):
    with pytest.raises(ValueError, match="enable_fsdp_float8_all_gather needs the weight cast DYNAMIC and TENSORWISE"):
        Float8LinearConfig.from_recipe_name(recipe, enable_fsdp_float8_all_gather=True)


def test_fp8_all_gather_flag_is_a_bool():
    with pytest.raises(TypeError, match="enable_fsdp_float8_all_gather"):
        Float8LinearConfig(enable_fsdp_float8_all_gather="yes")


def test_without_fsdp_the_wrapped_layer_is_the_plain_one():
    torch.manual_seed(0)
    lin = nn.Linear(32, 64)
    plain, wrapped = Float8Linear.from_float(lin, "tensorwise"), Float8Linear.from_float(lin, _config())
    assert isinstance(wrapped.weight, WeightWithFloat8AllGather) and isinstance(wrapped.weight, nn.Parameter)
    assert wrapped.weight._tensor.data_ptr() == lin.weight.data_ptr()          # same storage
    x = torch.randn(16, 32)
    y0, y1 = plain(x), wrapped(x)
    assert torch.equal(y0, y1)
    y0.square().sum().backward()
    g0 = lin.weight.grad.clone()
    y1.square().sum().backward()
    assert type(wrapped.weight.grad) is torch.Tensor and torch.equal(wrapped.weight.grad, g0)


def test_precompute_needs_a_sharded_model():
    model = convert_to_float8_training(tiny_mlp(0, fsdp.BYTES_WIDTHS), _config())
    with pytest.raises(ValueError, match="fully_shard"):
        precompute_float8_dynamic_scale_for_fsdp(model)
    assert precompute_float8_dynamic_scale_for_fsdp(tiny_mlp(0, fsdp.BYTES_WIDTHS)) == 0
    with pytest.raises(TypeError, match="nn.Module"):
        precompute_float8_dynamic_scale_for_fsdp(torch.zeros(2))


def test_gathered_weight_defines_views_only():
    w = Float8GatheredWeight(cast_to_float8(torch.randn(16, 32), _E4))
    assert isinstance(w.t(), Float8GatheredWeight) and w.t().fp8.scale is w.fp8.scale
    with pytest.raises(NotImplementedError, match="only views"):
        w + 1
