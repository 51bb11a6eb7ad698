"""Two ranks under FSDP2 and DDP, in one launch: the ShardedGradScaler against torch's, bit for
bit, and the claims lesson 11 prints, asserted (at smoke size)."""

import math
import tempfile

import pytest
import torch

from amp_edu.distributed import ddp, launch, lesson, parity, scaling



def everything(rank: int, world_size: int, size: dict, ckpt_dir: str) -> dict:
    """The lesson's experiments and every parity case (both scalers, and torch's fused check on
    DTensors) in one launch, so the rank start-up is paid once."""
    return {"lesson": lesson.all_experiments(rank, world_size, size, ckpt_dir),
            "parity": parity.scaler_parity(rank, world_size, None),
            "grad_scaler_parity": parity.grad_scaler_parity(rank, world_size, None),
            "dtensor_kernel": parity.dtensor_kernel_parity(rank, world_size),
            "controls": controls(rank, world_size)}


def controls(rank: int, world_size: int) -> dict:
    """The pitfalls' experiments where nothing should go wrong: the fp16 hooks on values fp16
    holds exactly (halves included), and a resume whose ranks agree on the scale."""
    values = [[1000.0, 3.0, 2.0 ** -20], [3000.0, 5.0, 2.0 ** -20]]
    return {"overflow": ddp.hook_overflow(rank, world_size, values=values),
            "resume": scaling.resume_mismatch(rank, world_size, scales=(2.0 ** 12, 2.0 ** 12))}


@pytest.fixture(scope="module")
def both_ranks():
    """One launch (starting ranks costs seconds) for everything below: the lesson's experiments at
    smoke size, and every parity case with torch's scaler and ours (the local-only scaler's
    disagreement is tested through the lesson's drift experiment)."""
    with tempfile.TemporaryDirectory() as ckpt_dir:
        out = launch(everything, lesson.sizes(True), ckpt_dir, world_size=2, timeout_s=600, progress=False)
    return out


@pytest.fixture(scope="module")
def two_ranks(both_ranks):
    return [r["parity"] for r in both_ranks]


@pytest.fixture(scope="module")
def exp(both_ranks):
    return [r["lesson"] for r in both_ranks]


@pytest.mark.parametrize("case", list(parity.CASES))
def test_fsdp2_two_ranks_bit_identical_to_torch(two_ranks, case):
    for rank in (0, 1):
        rec = two_ranks[rank][case]
        assert parity.compare_records(rec["torch"], rec["ours"]) == [], (rank, case)
    # the agreed decision: both ranks have the same scale, tracker and steps
    r0, r1 = two_ranks[0][case]["ours"], two_ranks[1][case]["ours"]
    assert (r0["scale"], r0["tracker"], r0["steps_taken"]) == (r1["scale"], r1["tracker"], r1["steps_taken"])


@pytest.mark.parametrize("case", list(parity.GRAD_SCALER_CASES))
def test_grad_scaler_on_dtensor_gradients_bit_identical_to_torch(both_ranks, case):
    """amp_edu.scaler.GradScaler against torch.amp.GradScaler under FSDP2: no all-reduce of their
    own, so any agreement across ranks comes from DTensor's MAX rule (torch's dispatcher for
    torch's class, applied by the scaler itself for ours)."""
    recs = [r["grad_scaler_parity"][case] for r in both_ranks]
    for rank in (0, 1):
        assert parity.compare_records(recs[rank]["torch"], recs[rank]["ours"]) == [], (rank, case)
    assert recs[0]["ours"]["found_inf"] == recs[1]["ours"]["found_inf"]          # the ranks agree ...
    assert (recs[0]["ours"]["scale"], recs[0]["ours"]["steps_taken"]) == (recs[1]["ours"]["scale"],
                                                                        recs[1]["ours"]["steps_taken"])


def test_grad_scaler_cases_inject_on_one_rank_and_skip_on_both(both_ranks):
    rec = [r["grad_scaler_parity"]["infs and a NaN on one rank at a time, Adam"]["ours"] for r in both_ranks]
    for step in (2, 4, 6):                        # an inf (or NaN) in one rank's shard only
        assert rec[0]["found_inf"][step] == rec[1]["found_inf"][step] == [1.0]    # MAX, not a SUM
    taken = [c[0] for c in rec[0]["steps_taken"]]
    assert taken[2] == taken[1] and taken[4] == taken[3] and taken[6] == taken[5]  # skipped
    assert taken[-1] == len(taken) - 3


@pytest.mark.parametrize("kind", list(parity.DTENSOR_KINDS) + ["mixed"])
def test_fused_check_on_dtensors_matches_torchs_dispatcher(both_ranks, kind):
    """Placements torch's rule reads (the first gradient's; Replicate dims not reduced; 2-d
    meshes) and the error for DTensors mixed with a plain tensor, on both ranks."""
    for rank in (0, 1):
        theirs, ours = both_ranks[rank]["dtensor_kernel"][kind]["torch"], both_ranks[rank]["dtensor_kernel"][kind]["ours"]
        assert theirs[0] == ours[0], (rank, kind)
        if isinstance(theirs[1], str):
            assert theirs[1] == ours[1] and "mixed torch.Tensor and DTensor" in ours[1]
        else:
            assert all(torch.equal(a, b) for a, b in zip(theirs[1], ours[1])), (rank, kind)
    first_replicated = kind in ("replicate", "replicate first, then shard", "2-d mesh, sharded on the inner (size-1) dim")
    if kind != "mixed":                           # the inf is in rank 1's piece only
        assert both_ranks[0]["dtensor_kernel"][kind]["ours"][0] == (0.0 if first_replicated else 1.0)
        assert both_ranks[1]["dtensor_kernel"][kind]["ours"][0] == 1.0


def test_the_empty_shard_case_really_has_an_empty_shard(two_ranks):
    name = "unscale_ then global clipping, two optimizers (one with an empty shard on rank 1)"
    numels = [two_ranks[r][name]["ours"]["local_numel"] for r in (0, 1)]
    assert numels[1][1] == 0 < numels[0][1], numels       # rank 1's second optimizer holds nothing
    assert numels[0][0] > 0 and numels[1][0] > 0


def test_infs_were_really_injected_and_skipped(two_ranks):
    rec = two_ranks[0]["fp16 params (mp_policy), injected infs"]["ours"]
    assert rec["found_inf"][2] == [2.0]            # rank 1's inf: MAX over the mesh, then SUM over 2 ranks
    assert rec["steps_taken"][-1][0] < len(rec["scale"])


def test_ddp_every_rank_takes_the_same_decision(exp):
    r0, r1 = exp[0]["ddp"]["skips"]["rows"], exp[1]["ddp"]["skips"]["rows"]
    injected = [b["step"] for a, b in zip(r0, r1) if b["injected"] and not a["injected"]]
    assert injected and all(a["found_inf"] and b["found_inf"] for a, b in zip(r0, r1) if a["step"] in injected)
    assert all(a["digest"] == b["digest"] and a["scale"] == b["scale"] for a, b in zip(r0, r1))


def test_compression_hooks_halve_the_bytes_and_fp16_flushes_tiny_gradients(exp):
    hooks = exp[0]["ddp"]["hooks"]
    for m in (1e-2, 1e-6, 1e-8):
        fp32 = hooks[("allreduce_hook", m)]
        assert fp32["dtype"] == "float32" and fp32["rel_error"] < 1e-6
        assert {h for h, mag in hooks if mag == m} == set(ddp.HOOKS)
        for h, dt in (("fp16_compress_hook", "float16"), ("bf16_compress_hook", "bfloat16")):
            assert hooks[(h, m)]["dtype"] == dt and hooks[(h, m)]["bytes"] * 2 == fp32["bytes"]
        assert hooks[("bf16_compress_hook", m)]["rel_error"] < 2.0 ** -7
    assert hooks[("fp16_compress_hook", 1e-8)]["flushed"] > 0.5
    assert hooks[("fp16_compress_hook", 1e-2)]["rel_error"] < hooks[("bf16_compress_hook", 1e-2)]["rel_error"]


def test_fsdp2_keeps_fp32_shards_and_16_bytes_per_parameter_over_n(exp):
    mem = exp[0]["fsdp"]["memory"]
    f, u, n = mem["fsdp2"], mem["unsharded"], mem["world_size"]
    assert f["params dtype"] == f["grads dtype"] == "float32" and f["transient dtype"] == "bfloat16"
    assert (u["params"] + u["grads"] + u["optimizer"]) == 16 * u["numel"]
    total_f = sum(exp[r]["fsdp"]["memory"]["fsdp2"][k] for r in range(2) for k in ("params", "grads", "optimizer"))
    assert total_f == 16 * u["numel"]                     # the shards add up to the whole, once
    assert set(exp[0]["fsdp"]["reduce"]["grad dtype kept"].values()) == {"float32"}
    assert 0 < exp[0]["fsdp"]["reduce"]["reduce only (bf16/bf16 vs bf16/fp32)"] < 2.0 ** -6


def test_fsdp2_policies_train_and_report_equal_curves_on_both_ranks(exp):
    t0, t1 = exp[0]["fsdp"]["train"], exp[1]["fsdp"]["train"]
    assert set(t0) == {"bf16/bf16", "bf16/fp32", "fp32/fp32"}
    for p in t0:
        for a, b in zip(t0[p], t1[p]):
            assert a["eval_loss"] == b["eval_loss"] and all(math.isfinite(v) for v in a["eval_loss"])


def test_the_scalers_on_dtensor_gradients(exp):
    c0, c1 = exp[0]["scaler"]["checks"], exp[1]["scaler"]["checks"]
    assert c0["torch.amp.GradScaler"] == c1["torch.amp.GradScaler"] == 1.0     # DTensor's MAX rule
    assert c0["amp_edu.scaler.GradScaler"] == c1["amp_edu.scaler.GradScaler"] == 1.0   # ... applied by ours
    assert c0["LocalShardGradScaler (the bug)"] == 0.0 and c1["LocalShardGradScaler (the bug)"] == 1.0
    assert c0["amp_edu ShardedGradScaler"] == c1["amp_edu ShardedGradScaler"] == c0["torch ShardedGradScaler"] == 2.0


def test_the_bug_drifts_and_the_fix_does_not_split(exp):
    d0, d1 = exp[0]["scaler"]["drift"]["rows"], exp[1]["scaler"]["drift"]["rows"]
    assert d0[-1]["drift"] > 0 and d0[-1]["drift"] == d1[-1]["drift"]
    assert any(a["bug_scale"] != b["bug_scale"] for a, b in zip(d0, d1))
    assert all(a["fix_scale"] == b["fix_scale"] and a["fix_stepped"] == b["fix_stepped"] for a, b in zip(d0, d1))


def test_pitfalls(exp):
    s0, s1 = exp[0]["scaler"], exp[1]["scaler"]
    assert not s0["resume"]["agree"] and s1["resume"]["norm_ratio"] > 10 > 1 > s0["resume"]["norm_ratio"]
    assert s0["clip"]["global_norm"] == s1["clip"]["global_norm"] > max(s0["clip"]["local_norm"], s1["clip"]["local_norm"])
    ck = s0["checkpoint"]
    assert ck["with scaler state"]["identical"] and not ck["without scaler state"]["identical"]
    assert ck["with scaler state"]["scales"] == ck["reference"]
    assert ck["without scaler state"]["scales"][0] > ck["reference"][0]


def test_fp16_compress_hook_casts_before_it_divides(exp):
    """A rank's gradient of 70000 is inf after the cast (fp16 rounds 65520 and up to inf), even
    where the average (40000) fits; dividing first (in fp32) keeps it. Where each rank's own
    value overflows, both give inf."""
    o = exp[0]["ddp"]["overflow"]
    assert o["grads"][0][0] == 70000.0 and o["exact"][0] == 40000.0
    assert o["fp16_compress_hook"][0] == math.inf and o["divide first, then cast"][0] == 40000.0
    assert o["fp16_compress_hook"][1:3] == o["divide first, then cast"][1:3] == o["exact"][1:3]
    assert o["fp16_compress_hook"][3] == math.inf           # 70000 on both ranks: average 70000 > 65504
    assert o["exact"][4] > 2.0 ** -25 and o["fp16_compress_hook"][4] == 0.0   # each share flushes


def test_the_controls_show_nothing_when_nothing_goes_wrong(both_ranks):
    """Where every value and its half fit in fp16, both fp16 hooks give the exact average; where
    the ranks resume with the same scale, the unscaled gradients are the right ones, exactly."""
    for rank in (0, 1):
        c = both_ranks[rank]["controls"]
        o = c["overflow"]
        assert o["exact"] == [2000.0, 4.0, 2.0 ** -20]
        assert o["fp16_compress_hook"] == o["divide first, then cast"] == o["exact"]
        r = c["resume"]
        assert r["agree"] and r["all_scales"] == [2.0 ** 12] * 2 and r["norm_ratio"] == 1.0


def test_fsdp2_all_gathers_in_param_dtype_and_reduce_scatters_in_reduce_dtype(exp):
    w = exp[0]["fsdp"]["wire"]
    n = w["numel"]
    for name, (ag, rs, ag_bytes, rs_bytes) in {"bf16/fp32": ("bfloat16", "float32", 2, 4),
                                               "bf16/bf16": ("bfloat16", "bfloat16", 2, 2),
                                               "fp32/fp32": ("float32", "float32", 4, 4)}.items():
        assert w[name]["all_gather"]["dtypes"] == [ag] and w[name]["reduce_scatter"]["dtypes"] == [rs]
        # forward and backward each gather every parameter once; each rank hands in its half
        assert w[name]["all_gather"]["input_bytes"] == 2 * ag_bytes * n // 2
        assert w[name]["reduce_scatter"]["input_bytes"] == rs_bytes * n


def test_torchao_fp8_all_gather_halves_the_bytes_and_precomputed_scales_one_all_reduce(exp):
    f = exp[0]["fsdp"]["fp8"]
    ao = f["torchao"]            # amp_edu's rows beside it: tests/fp8/test_fsdp_allgather.py
    bf16, fp8, pre = ao["bf16 all-gather"], ao["fp8 all-gather"], ao["fp8 all-gather, precomputed scales"]
    assert bf16[-1]["fsdp"]["all_gather"]["dtypes"] == ["bfloat16"]
    assert fp8[-1]["fsdp"]["all_gather"]["dtypes"] == ["uint8"]            # fp8 weights + bf16 biases as bytes
    bias = f["numel"] - f["weight_numel"]
    assert fp8[-1]["fsdp"]["all_gather"]["input_bytes"] == 2 * (f["weight_numel"] * 1 + bias * 2) // 2
    assert bf16[-1]["fsdp"]["all_gather"]["input_bytes"] == 2 * f["numel"] * 2 // 2
    n_gathers = fp8[-1]["fsdp"]["all_gather"]["calls"]
    assert fp8[-1]["calls"].get("all_reduce") == n_gathers                # one amax all-reduce per gathered weight
    assert pre[-1]["calls"].get("all_reduce") == 1                        # one for all weights, after the step
    assert [r["loss"] for r in fp8] == [r["loss"] for r in pre]           # the same scales, the same training
