"""amp_edu's fp8 all-gather under FSDP2 (amp_edu.fp8.fsdp) against torchao's, on two gloo ranks.

One launch runs lesson 11's measurement (:func:`amp_edu.distributed.fsdp.fp8_all_gather`: torchao
and amp_edu, each with the weights gathered in bf16, in fp8, and in fp8 with precomputed scales;
same model, seed, batches and tensorwise recipe) plus a look at the gathered weights themselves.
Checked: losses and master weights equal torchao's bit for bit at every step; the fp8 all-gather
moves about half the bf16 one's bytes; precomputed scales leave one amax all-reduce per step;
the gathered bytes are the fp8 cast of the full fp32 weight with one global scale, and
Float8Linear uses them without casting the weight again. Edge cases, against torchao where it has
them: ``reshard_after_forward=False``, a precompute before the first step, an in-place write after
a precompute, and a ``state_dict`` saved, loaded with ``weights_only=True`` and restored.
Configuration errors need no ranks.
"""

import io
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
from amp_edu.fp8.torchao_import import import_torchao
from amp_edu.fp8.scaling import round_down_to_power_of_2

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


def _model(lib: str, reshard_after_forward: bool = True):
    """tiny_mlp converted by ``lib`` with fp8 all-gather, each layer and the root fully_shard-ed."""
    from torch.distributed.fsdp import fully_shard
    model = tiny_mlp(0, fsdp.BYTES_WIDTHS)
    if lib == "torchao":
        import torchao.float8 as ao
        model = ao.convert_to_float8_training(model, config=ao.Float8LinearConfig(enable_fsdp_float8_all_gather=True))
    else:
        model = convert_to_float8_training(model, _config())
    for m in [*model, model]:
        if isinstance(m, nn.Linear) or m is model:
            fully_shard(m, mp_policy=fsdp.policy("bf16/fp32"), reshard_after_forward=reshard_after_forward)
    return model


def _precompute(lib: str):
    if lib == "torchao":
        import torchao.float8 as ao
        return ao.precompute_float8_dynamic_scale_for_fsdp
    return precompute_float8_dynamic_scale_for_fsdp


def _steps(model, lib, rank, steps=STEPS, precompute=False, before=False) -> dict:
    """``steps`` SGD steps; per step the loss, FSDP2's all-gather calls and the all-reduces."""
    from torch.distributed.tensor.debug import CommDebugMode

    from amp_edu.distributed.wire import count_collectives
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    if before:
        _precompute(lib)(model)
    gen = torch.Generator().manual_seed(41 + rank)
    rows = {"loss": [], "gathers": [], "all_reduces": []}
    for _ in range(steps):
        x = torch.randn(32, fsdp.BYTES_WIDTHS[0], generator=gen)
        log: list = []
        with CommDebugMode() as comm, count_collectives(log, ops=("all_gather_single",)):
            loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if precompute:
                _precompute(lib)(model)
        counts = {str(k).split(".")[-1].strip("_"): v for k, v in comm.get_comm_counts().items()}
        rows["loss"].append(loss.item())
        rows["gathers"].append(len(log))
        rows["all_reduces"].append(counts.get("all_reduce", 0) + counts.get("allreduce", 0))
    return rows


def _forward_all_reduces(model, rank) -> int:
    from torch.distributed.tensor.debug import CommDebugMode
    with CommDebugMode() as comm, torch.no_grad():
        model(torch.randn(16, fsdp.BYTES_WIDTHS[0], generator=torch.Generator().manual_seed(7 + rank)))
    return sum(v for k, v in comm.get_comm_counts().items() if "all_reduce" in str(k) or "allreduce" in str(k))


def _bias_free(lib: str) -> dict:
    """A bias-free model (every parameter an fp8 weight): the all-gather dtypes and bytes, the
    gathered weight bytes, or the error."""
    from torch.distributed.fsdp import fully_shard

    from amp_edu.distributed.wire import count_collectives
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128, bias=False), nn.ReLU(), nn.Linear(128, 16, bias=False))
    full = [model[0].weight.detach().clone(), model[2].weight.detach().clone()]
    if lib == "torchao":
        import torchao.float8 as ao
        model = ao.convert_to_float8_training(model, config=ao.Float8LinearConfig(enable_fsdp_float8_all_gather=True))
    else:
        model = convert_to_float8_training(model, _config())
    for m in (model[0], model[2], model):
        fully_shard(m, mp_policy=fsdp.policy("bf16/fp32"))
    seen = []
    for m in (model[0], model[2]):
        m.register_forward_pre_hook(lambda mod, args: seen.append(mod.weight.fp8.data.view(torch.uint8).clone()))
    log: list = []
    try:
        with count_collectives(log, ops=("all_gather_single",)):
            model(torch.randn(16, 64)).float().sum().backward()
    except RuntimeError as exc:
        return {"error": str(exc)}
    return {"dtypes": sorted({c.dtype for c in log}), "input_bytes": sum(c.input_bytes for c in log),
            "seen": seen, "full": full}


def _edge_cases(rank: int) -> dict:
    out = {"bias-free": {lib: _bias_free(lib) for lib in fsdp.FP8_LIBRARIES}}
    for lib in fsdp.FP8_LIBRARIES:
        out[lib] = {"no reshard": _steps(_model(lib, reshard_after_forward=False), lib, rank),
                    "dynamic": _steps(_model(lib), lib, rank),
                    "precomputed before": _steps(_model(lib), lib, rank, precompute=True, before=True)}
        # a precompute, then the first weight written in place without a new one
        model = _model(lib)
        _precompute(lib)(model)
        with torch.no_grad():
            model[0].weight.mul_(2)
        out[lib]["after a write"] = {"all_reduces": _forward_all_reduces(model, rank),
                                     "dropped": [m.weight._local_tensor._precomputed_scale is None
                                                 for m in model if isinstance(m, nn.Linear)]}
    # state_dict: saved after a step, loaded with weights_only=True into a fresh model whose
    # precomputed scales are those of other weights; the next step must match the original's
    original = _model("amp_edu")
    _steps(original, "amp_edu", rank, steps=1)
    sd = original.state_dict()
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    restored = _model("amp_edu")
    precompute_float8_dynamic_scale_for_fsdp(restored)
    restored.load_state_dict(loaded)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    full = get_model_state_dict(original, options=StateDictOptions(full_state_dict=True))
    out["state_dict"] = {
        "types": {k: (type(v).__name__, type(v._local_tensor).__name__) for k, v in sd.items()},
        "loaded types": {k: type(v._local_tensor).__name__ for k, v in loaded.items()},
        "full types": {k: type(v).__name__ for k, v in full.items()},
        "full weight": full["0.weight"].clone(),
        "next loss": (_steps(original, "amp_edu", rank + 1, steps=1)["loss"],
                      _steps(restored, "amp_edu", rank + 1, steps=1)["loss"]),
    }
    return out


def everything(rank: int, world_size: int) -> dict:
    _quiet()
    return {"runs": fsdp.fp8_all_gather(rank, world_size, steps=STEPS),
            "gathered": _gathered(False), "gathered_pow2": _gathered(True), "edge": _edge_cases(rank)}


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


def test_reshard_after_forward_false_gathers_once_per_layer_and_step(ranks):
    for rank in (0, 1):
        ours, ao = (ranks[rank]["edge"][lib]["no reshard"] for lib in ("amp_edu", "torchao"))
        assert ours["loss"] == ao["loss"]
        layers = len(fsdp.BYTES_WIDTHS) - 1
        # the first step's forward gathers every layer and keeps it for backward; later steps too
        assert ours["gathers"] == ao["gathers"] == [layers] * STEPS
        assert ours["all_reduces"] == ao["all_reduces"] == [layers] * STEPS


def test_precompute_before_the_first_step(ranks):
    for rank in (0, 1):
        for lib in fsdp.FP8_LIBRARIES:
            e = ranks[rank]["edge"][lib]
            assert e["precomputed before"]["loss"] == e["dynamic"]["loss"]      # the same scales
            assert e["precomputed before"]["all_reduces"] == [1] * STEPS          # only the precomputes
        assert ranks[rank]["edge"]["amp_edu"]["dynamic"]["loss"] == ranks[rank]["edge"]["torchao"]["dynamic"]["loss"]


def test_an_in_place_write_drops_the_precomputed_scale(ranks):
    """amp_edu: the written weight is gathered with a fresh (all-reduced) scale; torchao 0.18 keeps
    the stale one (fsdp_utils.py lines 233-241) and all-reduces nothing."""
    for rank in (0, 1):
        ours, ao = ranks[rank]["edge"]["amp_edu"]["after a write"], ranks[rank]["edge"]["torchao"]["after a write"]
        assert ours["dropped"] == [True, False, False] and ours["all_reduces"] == 1
        assert ao["dropped"] == [False, False, False] and ao["all_reduces"] == 0


def test_bias_free_weights_are_gathered_as_bytes(ranks):
    """Every input of the group fp8: torchao hands FSDP2 float8_e4m3fn, which gloo refuses;
    amp_edu hands it the same bytes as uint8."""
    for rank in (0, 1):
        ours, ao = (ranks[rank]["edge"]["bias-free"][lib] for lib in ("amp_edu", "torchao"))
        assert "Invalid scalar type" in ao["error"]
        assert ours["dtypes"] == ["uint8"]
        assert ours["input_bytes"] == 2 * sum(w.numel() for w in ours["full"]) // 2      # 1 B per weight, twice
        for got, w in zip(ours["seen"], ours["full"]):
            assert torch.equal(got, cast_to_float8(w, _E4).data.view(torch.uint8))


def test_state_dict_round_trip(ranks):
    full = ranks[0]["edge"]["state_dict"]["full weight"]
    for rank in (0, 1):
        sd = ranks[rank]["edge"]["state_dict"]
        for k, (outer, inner) in sd["types"].items():       # as torchao: the wrapper inside a DTensor
            assert outer == "DTensor" and inner == ("WeightWithFloat8AllGather" if k.endswith("weight") else "Tensor")
            assert sd["loaded types"][k] == inner
        assert set(sd["full types"].values()) == {"Tensor"}
        assert torch.equal(sd["full weight"], full) and full.dtype == torch.float32
        before, after = sd["next loss"]
        assert before == after          # restored weights, and no stale precomputed scale


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
