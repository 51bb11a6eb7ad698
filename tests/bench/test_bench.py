"""amp_edu.bench: the method (agreement with an independent timer), the JSON contract, the CLI,
the roofline arithmetic and bad input. Benchmarks are not timed tests: sizes here are tiny."""

import json
import math

import pytest
import torch

from amp_edu import bench
from amp_edu.bench import env, matmul, peaks, report, roofline
from amp_edu.measure import timing
from amp_edu.bench.bandwidth import copy_bandwidth
from amp_edu.bench.train_step import recipe_dtype, run_train_step
from amp_edu.device import DeviceInfo, info

TINY = bench.Config(groups={"square": [[32, 32, 32], [64, 64, 64]], "align": [[63, 63, 63], [64, 64, 64]],
                            "skinny": [[4, 128, 128]]},
                    slow_cap_flops=2 * 48 ** 3, rounds=1, repeats=3, min_time_s=0.002,
                    train=dict(batch=8, in_features=16, width=16, depth=1), bandwidth_bytes=1 << 16)


@pytest.fixture(scope="module")
def doc():
    return bench.run(TINY, device="cpu", progress=None)


# --- roofline arithmetic -------------------------------------------------------------------------

def test_flops_bytes_intensity():
    assert roofline.matmul_flops(2, 3, 4) == 48
    assert roofline.matmul_bytes(2, 3, 4, torch.float16) == (6 + 12 + 8) * 2
    assert roofline.matmul_bytes(2, 3, 4, "fp8", out_dtype=torch.bfloat16) == 6 + 12 + 16
    assert roofline.arithmetic_intensity(4096, 4096, 4096, "bf16") == pytest.approx(2 * 4096 / 6)
    assert roofline.itemsize("tf32") == 4 and roofline.itemsize(torch.float8_e5m2) == 1


def test_ridge_and_bound():
    assert roofline.ridge_point(989.0, 3350.0) == pytest.approx(295.2, abs=0.1)
    assert roofline.attainable_tflops(10.0, 989.0, 3350.0) == pytest.approx(33.5)
    assert roofline.attainable_tflops(1e4, 989.0, 3350.0) == 989.0
    ai_skinny = roofline.arithmetic_intensity(16, 8192, 8192, "bf16")
    assert roofline.bound(ai_skinny, 989.0, 3350.0) == "memory"
    assert roofline.bound(roofline.arithmetic_intensity(8192, 8192, 8192, "bf16"), 989.0, 3350.0) == "compute"


def test_tile_waves_staircase():
    one = roofline.tile_waves(128 * 12, 128 * 11, sm_count=132)        # 132 tiles: one full wave
    more = roofline.tile_waves(128 * 12 + 1, 128 * 11, sm_count=132)   # 143 tiles: a second wave
    assert (one["tiles"], one["waves"], one["efficiency"]) == (132, 1, 1.0)
    assert more["waves"] == 2 and more["efficiency"] == pytest.approx(143 / 264)


@pytest.mark.parametrize("call, exc", [
    (lambda: roofline.matmul_flops(0, 1, 1), ValueError),
    (lambda: roofline.matmul_flops(1.5, 1, 1), TypeError),
    (lambda: roofline.itemsize("int8"), ValueError),
    (lambda: roofline.itemsize(torch.int32), ValueError),
    (lambda: roofline.itemsize(3), TypeError),
    (lambda: roofline.ridge_point(0, 1), ValueError),
    (lambda: roofline.bound(float("nan"), 1, 1), ValueError),
    (lambda: roofline.tile_waves(10, 10, sm_count=0), ValueError),
    (lambda: roofline.tile_waves(10, 10, sm_count=True), TypeError),
    (lambda: roofline.tile_waves(10, 10, sm_count="132"), TypeError),
    (lambda: roofline.tile_waves(10, 10, sm_count=1, tile=(128,)), ValueError),
    (lambda: roofline.tile_waves(10, 10, sm_count=1, tile=(128, 0)), ValueError),
    (lambda: roofline.tile_waves(10, 10, sm_count=1, tile=(128.0, 128)), TypeError),
    (lambda: copy_bandwidth(True), TypeError),
    (lambda: copy_bandwidth(4.0), TypeError),
    (lambda: copy_bandwidth(3), ValueError),
])
def test_roofline_bad_input(call, exc):
    with pytest.raises(exc):
        call()


# --- peaks -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, key", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", None), ("NVIDIA H100 NVL", None),
    ("NVIDIA H200", "H200"), ("Tesla T4", "T4"), ("NVIDIA L4", "L4"), ("NVIDIA L40S", None),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB"), ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
    ("NVIDIA A100 80GB PCIe", None), ("Tesla V100-SXM2-16GB", "V100 SXM2"), ("NVIDIA GeForce RTX 4090", None),
    ("NVIDIA GH200 480GB", None), ("NVIDIA GH200 144G HBM3e", None), ("NVIDIA H200 NVL", None),
])
def test_lookup_matches_only_the_datasheet_variant(name, key):
    entry = peaks.lookup(name)
    assert (entry.name if entry else None) == key


def test_peak_tflops():
    assert peaks.peak_tflops("NVIDIA H100 80GB HBM3", "bfloat16") == 989.0
    assert peaks.peak_tflops("Tesla T4", "bfloat16") is None        # no bf16 Tensor Cores
    assert peaks.peak_tflops("some GPU", "float32") is None
    with pytest.raises(ValueError, match="accepted"):
        peaks.peak_tflops("NVIDIA H200", "int8")
    with pytest.raises(TypeError):
        peaks.lookup(None)
    for e in peaks.KNOWN_GPUS.values():
        assert e.source.startswith("https://") and e.fp32 > 0 and e.bandwidth_gbs > 0


# --- environment and the TF32 switch ---------------------------------------------------------------

def test_tf32_switch_is_explicit_and_restored():
    before = env.tf32_enabled()
    with env.tf32(True):
        assert env.tf32_enabled() is True
        with env.tf32(False):
            assert env.tf32_enabled() is False
        assert env.tf32_enabled() is True
    assert env.tf32_enabled() == before
    with pytest.raises(TypeError):
        with env.tf32(1):
            pass


def test_environment_records_what_results_depend_on(monkeypatch):
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    e = env.environment("cpu")
    for key in ("device", "device_name", "compute_capability", "cuda_version", "driver_version", "torch_version",
                "precision_flags", "cpu_model", "cpu_flags", "cpu_class", "stands_for", "threads", "date",
                "load_average_1min"):
        assert key in e
    assert e["precision_flags"]["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] == "1"
    assert "really tf32" in e["precision_flags"]["override_note"]
    json.dumps(e)  # JSON-ready


# --- one matmul --------------------------------------------------------------------------------------

def test_operands_are_random_seeded_and_never_zero():
    a, b = matmul.operands([8, 16, 4], seed=3)
    a2, _ = matmul.operands([8, 16, 4], seed=3)
    assert a.shape == (8, 16) and b.shape == (16, 4) and torch.equal(a, a2)
    assert (a != 0).float().mean() > 0.99 and a.std() > 0.5


def test_errors_order_the_dtypes():
    a, b = matmul.operands([64, 256, 64])
    err = {dt: matmul.relative_error(matmul.matmul_fn(a, b, dt)(), a, b) for dt in ("float32", "float16", "bfloat16")}
    assert err["float32"] < 1e-5 < err["float16"] < err["bfloat16"] < 2e-2


def test_fp8_path_through_scaled_mm():
    a, b = matmul.operands([32, 64, 48])
    try:
        c = matmul.matmul_fn(a, b, "float8_e4m3fn")()
    except (RuntimeError, NotImplementedError) as exc:  # a torch without a CPU _scaled_mm
        pytest.skip(f"torch._scaled_mm does not run here: {exc}")
    assert c.dtype == torch.bfloat16 and c.shape == (32, 48)
    assert 1e-3 < matmul.relative_error(c, a, b) < 0.1


def _fake(flags="avx2 sse4_1", limit=None, **kw):
    """A DeviceInfo of a CPU with these /proc/cpuinfo flags (default: an AVX2-only x86)."""
    from amp_edu import device
    feats = device.parse_cpuinfo(f"flags : {flags}")
    env = {"ONEDNN_MAX_CPU_ISA": limit} if limit else {}
    base = dict(device="cpu", name="x", torch_version="", threads=1, smoke=False,
                cpu_class=device.cpu_class(feats, env=env))
    base.update(kw)
    return DeviceInfo(**base)


_SKYLAKE = "avx2 sse4_1 avx512f avx512bw avx512vl avx512dq"
_ZEN4 = _SKYLAKE + " avx512_vnni avx512_bf16"


def test_slow_paths_follow_the_cpu_class():
    """bf16 is capped only where oneDNN has no bf16 path: an AVX512_CORE CPU (≈0.8× fp32) is not
    a slow path, an AVX2 one (or an AVX512_BF16 one run as AVX2) is."""
    assert "AVX2 class" in matmul.slow_path("bfloat16", _fake())
    assert matmul.slow_path("bfloat16", _fake(_SKYLAKE)) is None
    assert matmul.slow_path("bfloat16", _fake(_ZEN4)) is None
    assert "AVX2 class" in matmul.slow_path("bfloat16", _fake(_ZEN4, limit="AVX2"))
    assert "fp16" in matmul.slow_path("float16", _fake(_ZEN4))
    assert matmul.slow_path("float16", _fake(_ZEN4 + " avx512_fp16")) is None
    assert env.stands_for(_fake(_ZEN4, limit="AVX512_CORE")) == "AVX512_CORE"


def test_environment_records_the_class_it_stands_for(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    e = env.environment("cpu")
    assert e["onednn_max_cpu_isa"] == "AVX2"
    assert e["stands_for"] == e["cpu_class"]["name"]
    assert e["cpu_class"]["limit"] in ("AVX2", None)       # None: a CPU below AVX2 ignores the limit


def test_unsupported_and_slow_paths_have_reasons():
    cpu = _fake()
    assert "CPU" in matmul.unsupported("tf32", (64, 64, 64), cpu)
    assert matmul.unsupported("float8_e4m3fn", (63, 64, 64), cpu) in (None, "this torch has no CPU torch._scaled_mm")
    assert "fp8" in matmul.slow_path("float8_e4m3fn", cpu)
    assert matmul.unsupported("float16", (64, 64, 64), cpu) is None
    assert "AVX512_FP16" in matmul.slow_path("float16", cpu)
    assert matmul.slow_path("bfloat16", _fake(_ZEN4 + " avx512_fp16 amx_tile amx_int8 amx_bf16")) is None
    t4 = _fake(device="cuda", compute_capability=(7, 5), tensor_cores=True)
    assert "8.0" in matmul.unsupported("tf32", (64, 64, 64), t4)
    assert "native bf16" in matmul.unsupported("bfloat16", (64, 64, 64), t4)
    h100 = _fake(device="cuda", compute_capability=(9, 0), tensor_cores=True, bf16_native=True, fp8=True)
    assert matmul.unsupported("float8_e4m3fn", (4096, 4096, 4096), h100) is None
    assert "16" in matmul.unsupported("float8_e4m3fn", (4095, 4096, 4096), h100)
    assert matmul.slow_path("float16", h100) is None


def test_run_matmul_row():
    row = matmul.run_matmul("float32", [16, 32, 8], repeats=3, min_time_s=0.001)
    assert row["kind"] == "matmul" and row["shape"] == [16, 32, 8] and row["flops"] == 2 * 16 * 32 * 8
    assert row["tflops"] == pytest.approx(row["flops"] / row["median_s"] / 1e12)
    assert row["rel_error"] < 1e-5


@pytest.mark.parametrize("kw, exc", [
    (dict(dtype="fp64", shape=[4, 4, 4]), ValueError),
    (dict(dtype="float32", shape=[4, 4]), ValueError),
    (dict(dtype="float32", shape=[4, 0, 4]), ValueError),
])
def test_run_matmul_bad_input(kw, exc):
    with pytest.raises(exc):
        matmul.run_matmul(kw["dtype"], kw["shape"])


# --- the method: what the bench times, side by side, and what it records ------------------------------

class _FakeCompare:
    """Stands in for timing.compare: records each call and hands back fixed times per dtype."""

    def __init__(self, seconds):
        self.seconds, self.calls = seconds, []

    def __call__(self, fns, **kw):
        self.calls.append((sorted(fns), kw))
        for fn in fns.values():
            fn()                          # each variant must run (tf32's flag switch included)
        return {dt: timing.Timing.from_times([self.seconds[dt]] * 3, method="fake", cache="warm")
                for dt in fns}


def test_run_times_every_dtype_of_a_shape_side_by_side_and_derives_rows_from_those_times(monkeypatch):
    fake = _FakeCompare({"float32": 4e-3, "tf32": 1e-3, "bfloat16": 2e-3})
    monkeypatch.setattr(bench, "compare", fake)
    monkeypatch.setattr(bench, "unsupported", lambda dt, shape, dinfo: None)   # tf32 "runs" here
    monkeypatch.setattr(bench, "slow_path", lambda dt, dinfo: None)
    cfg = bench.Config(groups={"square": [[32, 32, 32], [64, 64, 64]], "skinny": [[4, 64, 64]]},
                       dtypes=("float32", "tf32", "bfloat16"), rounds=1, repeats=3, min_time_s=0)
    with env.tf32(True):                   # the bench must not inherit the caller's TF32 setting...
        d = bench.run(cfg, device="cpu", progress=None)
        assert env.tf32_enabled() is True  # ...and must hand it back unchanged
    assert [c[0] for c in fake.calls] == [["bfloat16", "float32", "tf32"]] * 3   # one interleaved call per shape
    assert all(c[1]["flush_l2"] is False for c in fake.calls)                      # a CPU cannot flush
    for r in report.rows(d, "matmul"):
        assert r["tflops"] == pytest.approx(2 * math.prod(r["shape"]) / fake.seconds[r["dtype"]] / 1e12)
        assert r["speedup_vs_fp32"] == pytest.approx(4e-3 / fake.seconds[r["dtype"]])
        assert r["precision_flags"]["matmul_tf32"] is (r["dtype"] == "tf32")       # per row, as timed
        assert r["timing_method"] == "fake" and r["cache"] == "warm"


def test_gpu_rows_compared_with_the_dram_roofline_are_timed_cold(monkeypatch):
    """On CUDA the skinny (memory-bound) group is timed with the L2 flushed; the sweep is warm."""
    fake = _FakeCompare({"float32": 1e-3})
    monkeypatch.setattr(bench, "compare", fake)
    cuda = _fake(device="cuda", compute_capability=(9, 0), tensor_cores=True, bf16_native=True, fp8=True)
    monkeypatch.setattr(bench, "info", lambda dev: cuda)
    monkeypatch.setattr(bench, "environment", lambda dev: {"device": "cuda", "device_name": "NVIDIA H200",
                                                          "torch_version": "x", "precision_flags": {},
                                                          "threads": 1, "date": "2026-01-01"})
    monkeypatch.setattr(bench, "cache_sizes", lambda dev: {"L2": 50 << 20})
    monkeypatch.setattr(bench, "operands", lambda shape, device: matmul.operands(shape))
    cfg = bench.Config(groups={"square": [[64, 64, 64]], "skinny": [[4, 64, 64]]}, dtypes=("float32",),
                       rounds=1, repeats=3, min_time_s=0)
    d = bench.run(cfg, device="cpu", progress=None)
    assert [c[1]["flush_l2"] for c in fake.calls] == [False, True]
    assert {r["fits_in"] for r in report.rows(d, "matmul")} == {"L2"}


def test_speedups_compare_dtypes_at_the_same_shape():
    """fp32 peaks at 1024³ and fp16 at 4096³: the ratio is taken at one shape, not best over best."""
    def row(dt, s, tflops):
        flops = 2 * s ** 3
        return {"kind": "matmul", "dtype": dt, "shape": [s, s, s], "group": "square", "flops": flops,
                "median_s": flops / tflops / 1e12, "iqr_s": 0.0, "tflops": tflops}
    d = {"environment": {"device": "cpu", "device_name": "x"},
         "results": [row("float32", 1024, 2.0), row("float32", 4096, 1.0), row("float16", 1024, 1.0),
                     row("float16", 4096, 4.0), row("float16", 8192, 9.0)]}
    assert report.same_shape_ratio(d, "float16") == (pytest.approx(4.0), (4096, 4096, 4096))
    assert report.throughput_ratio(d, "float16") == pytest.approx(4.0)    # not 9 / 2 = 4.5
    report.annotate(d)
    assert all(r["pct_of_peak"] is None and r["peak_source"] is None for r in d["results"])  # a CPU: no peak
    best = {r["dtype"]: r["pct_of_best_same_dtype"] for r in d["results"] if r["pct_of_best_same_dtype"] == 100}
    assert set(best) == {"float32", "float16"}


def test_fp8_row_measured_the_same_way_as_the_others(doc):
    """torch 2.13 runs torch._scaled_mm on a CPU: the bench has a float8_e4m3fn row, timed side by
    side with the others, with its error and the slow-path label."""
    if matmul.unsupported("float8_e4m3fn", (32, 32, 32), info("cpu")):
        pytest.skip("this torch has no CPU torch._scaled_mm")
    fp8 = report.rows(doc, "matmul", dtype="float8_e4m3fn")
    assert fp8 and {tuple(r["shape"]) for r in fp8} <= {tuple(r["shape"]) for r in report.rows(doc, "matmul", dtype="float32")}
    for r in fp8:
        assert 1e-3 < r["rel_error"] < 0.1 and "fp8" in r["note"] and r["timing_method"].startswith("torch.utils")
        assert r["bytes"] == roofline.matmul_bytes(*r["shape"], "fp8", out_dtype=torch.bfloat16)


def test_rows_say_which_cache_holds_their_operands(doc):
    caches = doc["environment"]["cache_bytes"]
    for r in report.rows(doc, "matmul"):
        assert r["fits_in"] == matmul.fits_in(r["bytes"], caches)
    assert matmul.fits_in(100, {"L1d": 64, "L2": 1000, "L3": 10 ** 6}) == "L2"
    assert matmul.fits_in(10 ** 7, {"L1d": 64, "L2": 1000, "L3": 10 ** 6}) is None
    if "cache_bandwidth" in doc:
        assert doc["cache_bandwidth"]["level"] == max(caches, key=caches.get)


def test_precision_flags_record_the_new_api_without_raising():
    """After the new fp32_precision API is used, reading the legacy flags raises in torch 2.13;
    recording must not (run in a child process: the switch cannot be undone in this one)."""
    code = ("import json, torch; from amp_edu.bench import env; "
            "torch.backends.cuda.matmul.fp32_precision = 'tf32'; "
            "torch.backends.mkldnn.matmul.fp32_precision = 'bf16'; print(json.dumps(env.precision_flags()))")
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    flags = json.loads(out.stdout)
    assert flags["cuda_matmul_fp32_precision"] == "tf32" and flags["matmul_tf32"] is True
    assert flags["mkldnn_matmul_fp32_precision"] == "bf16"
    assert "float32_matmul_precision" in flags["legacy_unreadable"] and flags["float32_matmul_precision"] is None


@pytest.mark.parametrize("mutate, msg", [
    (lambda d: d.pop("environment"), "environment"),
    (lambda d: d["results"][0].update(kind="conv"), "kind"),
    (lambda d: d["results"][0].update(dtype="fp16"), "dtype"),
    (lambda d: d["results"][0].update(shape=[4, 4]), "[m, k, n]"),
    (lambda d: d["results"][0].update(median_s=float("nan")), "median_s"),
    (lambda d: d["results"][0].pop("tflops"), "tflops"),
])
def test_validate_names_the_problem(doc, mutate, msg):
    bad = json.loads(json.dumps(doc))
    mutate(bad)
    with pytest.raises(ValueError, match=msg.replace("[", r"\[")):
        report.validate(bad)


def test_cli_writes_json(tmp_path, capsys, monkeypatch):
    from amp_edu.__main__ import main
    asked = []

    def small(quick=False, device=None):
        asked.append(quick)
        return bench.Config(groups={"square": [[16, 16, 16]]}, dtypes=("float32", "tf32"), rounds=1, repeats=2,
                            min_time_s=0.001)

    monkeypatch.setattr(bench, "config", small)   # the sizes are the run's business, tested above
    path = tmp_path / "b.json"
    assert main(["bench", "--quick", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    got = report.load(path)
    assert asked == [True] and f"wrote {path}" in out and "median ms" in out and "skipped matmul tf32" in out
    assert got["environment"]["quick"] is True and got["results"][0]["shape"] == [16, 16, 16]


def test_smoke_config_is_small():
    cfg = bench.config(quick=True, device="cpu")   # AMP_EDU_SMOKE=1 under the tests
    assert all(2 * math.prod(s) <= 2 * 128 ** 3 for g in cfg.groups.values() for s in g)
    assert cfg.train["batch"] <= 16


def test_references_are_valid_real_runs():
    refs = report.references()
    assert refs, "amp_edu/reference/ holds at least this course's CPU run"
    for name, d in refs.items():
        assert not d["environment"]["smoke"], f"{name} is a smoke run, not a real one"
        assert report.rows(d, "matmul") and report.rows(d, "train_step")


def test_busy_warning():
    d = {"environment": {"others_busy_at_start": 0.1, "others_busy_at_end": 0.9, "cpu_count": 2}}
    assert "90%" in report.busy_warning(d)
    d["environment"]["others_busy_at_end"] = 0.2
    assert report.busy_warning(d) is None


def test_bad_config_and_run_input():
    with pytest.raises(ValueError, match="accepted"):
        bench.Config(groups={}, dtypes=("fp16",))
    with pytest.raises(TypeError):
        bench.run({"square": []}, device="cpu")


def test_report_queries_reject_names_outside_the_contract():
    doc = next(iter(report.references().values()))
    assert report.rows(doc, "matmul", dtype="float16")          # the contract's name matches
    for call in (lambda: report.rows(doc, "matmull"), lambda: report.rows(doc, "matmul", dtype="fp16"),
                 lambda: report.best_rate(doc, "fp16"), lambda: report.speedups(doc, "half"),
                 lambda: report.throughput_ratio(doc, "bf16")):
        with pytest.raises(ValueError, match="float16|matmul"):
            call()
    with pytest.raises(TypeError):
        report.rows(doc, "matmul", group=1)


# --- the training step ------------------------------------------------------------------------------

def test_train_step_row_and_memory():
    rows = {r: run_train_step(r, batch=8, in_features=16, width=16, depth=1, repeats=2, min_time_s=0.001)
            for r in ("fp32", "amp_bf16")}
    assert rows["fp32"]["saved_weight_copy_bytes"] == 0 and rows["amp_bf16"]["saved_weight_copy_bytes"] > 0
    assert rows["amp_bf16"]["saved_activation_bytes"] < rows["fp32"]["saved_activation_bytes"]
    assert rows["fp32"]["peak_memory_bytes"] is None  # no GPU allocator on a CPU
    with pytest.raises(ValueError, match="recipe"):
        recipe_dtype("fp16_pure")
    with pytest.raises(ValueError, match="batch"):
        run_train_step("fp32", batch=0, in_features=4, width=4, depth=1)
    for kw in (dict(batch=True), dict(width=4.0), dict(depth="1"), dict(n_classes=None)):
        with pytest.raises(TypeError, match=next(iter(kw))):
            run_train_step("fp32", **{**dict(batch=8, in_features=4, width=4, depth=1), **kw})


def test_group_bars_are_labelled_even_when_a_dtype_misses_the_first_shape():
    import matplotlib
    matplotlib.use("Agg")
    from amp_edu.bench import plots

    doc = next(iter(report.references().values()))
    first = min(tuple(r["shape"]) for r in report.rows(doc, "matmul") if "align" in r.get("groups", []))
    doc = {**doc, "results": [r for r in doc["results"]
                              if not (r["dtype"] == "float16" and tuple(r["shape"]) == first)]}
    ax = plots.plot_groups(doc, "align")
    assert "shape" in ax.get_xlabel() and "TFLOP/s" in ax.get_ylabel()
    assert "fp16" in [t.get_text() for t in ax.get_legend().get_texts()]


# --- noise-aware comparisons and the roofs lesson 06 prints ----------------------------------------

def _row(shape, median_s, iqr_s, dtype="float32"):
    return {"kind": "matmul", "dtype": dtype, "shape": list(shape), "flops": 2 * math.prod(shape),
            "median_s": median_s, "iqr_s": iqr_s, "tflops": 2 * math.prod(shape) / median_s / 1e12}


def test_rate_verdict_compares_throughput_beyond_the_spread():
    aligned = _row((128, 128, 128), 1.0e-3, 0.05e-3)
    odd_same_rate = _row((127, 127, 127), 1.0e-3 * (127 / 128) ** 3 * 1.03, 0.10e-3)   # 3% slower, wide box
    odd_slow = _row((127, 127, 127), 1.0e-3 * (127 / 128) ** 3 * 1.5, 0.05e-3)
    assert report.rate_verdict(odd_same_rate, aligned).word == "within noise"
    assert report.rate_verdict(odd_slow, aligned).word == "slower"
    assert report.rate_verdict(aligned, odd_slow).word == "faster"
    stalled = _row((127, 127, 127), 1.0e-3 * (127 / 128) ** 3 * 1.5, 0.6e-3)     # repeats spread 40%
    v = report.rate_verdict(stalled, aligned)
    assert v.word == "no verdict" and "busy" in v.sentence("127³", "128³")


def test_doc_load_reads_the_recorded_load():
    busy = {"environment": {"load_average_1min": 9.0, "cpu_count": 2, "threads": 2}}
    assert "busy" in report.doc_load(busy).caveat
    quiet = {"environment": {"load_average_1min": 0.3, "cpu_count": 2, "threads": 2}}
    assert report.doc_load(quiet).caveat is None


def test_ratio_range_and_claim_verdict():
    slow, fast = _row((8, 8, 8), 4e-3, 0.4e-3), _row((8, 8, 8), 1e-3, 0.2e-3)
    lo, ratio, hi = report.ratio_range(slow, fast)
    assert (lo, ratio, hi) == (pytest.approx(3.8e-3 / 1.1e-3), 4.0, pytest.approx(4.2e-3 / 0.9e-3))
    assert report.claim_verdict(lo, ratio, hi, 2, 8) == "inside"
    assert report.claim_verdict(lo, ratio, hi, 4, 8) == "at the edge of"      # 4.0 inside, spread not
    assert report.claim_verdict(0.1, 0.2, 0.3, 2, 8) == "below"
    assert report.claim_verdict(9, 10, 11, 2, 8) == "above"
    assert math.isinf(report.ratio_range(slow, _row((8, 8, 8), 1e-3, 3e-3))[2])
    assert report.ratio_text(1, 2, math.inf) == "2.00× (1.00–∞×)"


def test_roofs_are_datasheet_on_a_known_gpu_and_measured_per_dtype_elsewhere():
    from amp_edu.bench import plots
    cpu = {"environment": {"device": "cpu", "device_name": "x"}, "bandwidth": {"gb_per_s": 20.0},
           "results": [_row((64, 64, 64), 1e-3, 0), _row((64, 64, 64), 5e-4, 0, "bfloat16")]}
    r = plots.roofs(cpu)
    assert r["float32"][0] == pytest.approx(cpu["results"][0]["tflops"]) and r["float32"][1] == 20.0
    assert r["bfloat16"][0] == pytest.approx(cpu["results"][1]["tflops"])   # its own roof, not fp32's
    gpu = {"environment": {"device": "cuda", "device_name": "NVIDIA H200"}, "bandwidth": {"gb_per_s": 1.0},
           "results": [dict(_row((64, 64, 64), 1e-3, 0, "bfloat16"), peak_tflops=989.0)]}
    assert plots.roofs(gpu) == {"bfloat16": (989.0, 4800.0, "datasheet (H200)")}


def test_cache_roof_is_measured_only_when_the_dram_copy_really_left_the_caches(doc):
    """The smoke-sized copy fits in this CPU's caches: it is flagged, and no cache roof is added
    next to a 'DRAM' figure that was itself a cache figure."""
    bw = doc["bandwidth"]
    assert bw["fits_in"] == matmul.fits_in(bw["bytes"], doc["environment"]["cache_bytes"])
    if bw["fits_in"] is not None:
        assert "cache_bandwidth" not in doc


def test_a_cache_resident_copy_is_measured_beside_a_dram_copy(monkeypatch):
    monkeypatch.setattr(bench, "cache_sizes", lambda dev: {"L1d": 1 << 12, "L2": 1 << 14})
    cfg = bench.Config(groups={"square": [[16, 16, 16]]}, dtypes=("float32",), rounds=1, repeats=2,
                       min_time_s=0, bandwidth_bytes=1 << 16)
    d = bench.run(cfg, device="cpu", progress=None)
    assert d["bandwidth"]["fits_in"] is None                     # 128 KiB moved > the 16 KiB "L2"
    c = d["cache_bandwidth"]
    assert c["level"] == "L2" and c["cache_bytes"] == 1 << 14 and c["bytes"] <= (1 << 14) // 2   # src + dst in it
    assert c["gb_per_s"] == pytest.approx(c["bytes"] / c["median_s"] / 1e9)
    assert "L2-resident copy bandwidth" in report.table(d)


# --- the reference runs and the classes they stand for ---------------------------------------------

def test_every_reference_says_what_it_stands_for_and_how_it_was_made():
    from amp_edu import device
    from amp_edu.bench import classes
    for name, d in report.references().items():
        prov = d.get("provenance")
        assert prov and {"stands_for", "machine", "command", "recorded", "how"} <= set(prov), name
        assert classes.stands_for(d) == prov["stands_for"] == d["environment"]["stands_for"]
        assert prov["stands_for"] in device.CLASSES or d["environment"]["device"] == "cuda", name
        limit = d["environment"].get("onednn_max_cpu_isa")
        assert (limit is None) == ("ONEDNN_MAX_CPU_ISA" not in prov["command"]), name
        if limit:     # a limited run stands for the class of its limit, not of its real flags
            assert prov["stands_for"] == device.cpu_class(device.parse_cpuinfo(
                "flags : " + " ".join(f for f, on in d["environment"]["cpu_flags"].items() if on)
                + " avx512bw avx512vl avx512dq avx512_vnni"), env={"ONEDNN_MAX_CPU_ISA": limit}).name


def test_the_shipped_classes_show_the_measured_ladder():
    """bf16 vs fp32 at 1024³: AVX512_BF16 faster, AVX512_CORE a little slower, AVX2 far slower —
    the figures the capability rule's 'fast' is built on."""
    from amp_edu.bench import classes
    refs = report.references()
    ratio = {classes.stands_for(d): classes.ratio_at(d, "bfloat16", 1024) for n, d in refs.items() if "zen5" in n}
    assert ratio["AVX512_BF16"][0] > 2                    # the whole spread above 2×
    assert 0.5 < ratio["AVX512_CORE"][1] < 1 and ratio["AVX512_CORE"][2] < 1
    assert ratio["AVX2"][1] < 0.05


def test_class_rows_put_the_learner_beside_each_class():
    from amp_edu.bench import classes
    from amp_edu.measure.timing import Timing
    mine = {"float32": Timing(2e-3, 1e-4, []), "bfloat16": Timing(1e-3, 1e-4, [])}
    rows = classes.class_rows(report.references(), 256, mine=("your run", "AVX2", mine))
    assert rows[0]["mine"] and rows[0]["bfloat16"][1] == pytest.approx(2.0) and rows[0]["float16"] is None
    text = classes.class_table(rows, 256)
    assert "your run" in text and "◀ your class" in text and "1/" in text
    with pytest.raises(ValueError, match="float32"):
        classes.class_rows({}, 256, mine=("x", "AVX2", {"bfloat16": mine["bfloat16"]}))
    # a small ratio with a wide spread: each bound in its own form, never "1/0"
    assert classes._cell((1 / 148, 1 / 140, 1 / 137)) == "1/140 (1/148–1/137)"
    assert classes._cell((0.0, 1 / 27, 4.0)) == "1/27 (0–4.00×)"
    assert classes._cell((1 / 50, 1 / 27, math.inf)) == "1/27 (1/50–∞)"
    with pytest.raises(TypeError, match="dict"):
        classes.class_rows([], 256)
    with pytest.raises(ValueError, match="dtype"):
        classes.plot_classes(rows, dtype="fp16")
