import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from amp_edu.device import cpu_classes, cpu_features, sizes, summary


def test_smoke_flag(monkeypatch):
    for v, want in [("1", True), ("true", True), ("0", False), ("", False), ("no", False)]:
        monkeypatch.setenv("AMP_EDU_SMOKE", v)
        assert sizes.is_smoke() is want


def test_pick_sizes(monkeypatch):
    monkeypatch.setenv("AMP_EDU_SMOKE", "1")
    assert sizes.pick(smoke=1, cpu=2, gpu=3) == 1
    monkeypatch.setenv("AMP_EDU_SMOKE", "0")
    want = 3 if torch.cuda.is_available() else 2
    assert sizes.pick(smoke=1, cpu=2, gpu=3) == want
    assert sizes.pick(smoke=1, cpu=2, gpu=3, device="cpu") == 2


def test_pick_device_rejects_bad_input():
    with pytest.raises(ValueError, match="'cpu', 'cuda'"):
        sizes.pick_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="is_available"):
            sizes.pick_device("cuda")
    assert sizes.pick_device("cpu").type == "cpu"


def test_info_and_report_on_cpu():
    i = summary.info("cpu")
    assert i.device == "cpu" and i.threads == torch.get_num_threads()
    assert set(i.cpu_flags) >= {"avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "amx_bf16", "avx512_fp16",
                                "bf16", "asimdhp"}
    assert i.cpu_class == cpu_classes.cpu_class()
    assert i.to_dict()["cpu_class"]["name"] == i.cpu_class.name
    line = summary.setup_line("cpu")
    assert f"CPU class {i.cpu_class.name}" in line
    first, second = line.split("\n")
    assert second == summary.provenance_line("cpu") or second.startswith("outputs below produced on: ")
    assert torch.__version__ in second and "differ on another machine" in second
    text = summary.report("cpu")
    assert "CPU bf16 matmul" in text and "oneDNN ISA" in text and torch.__version__ in text
    with pytest.raises(ValueError):
        summary.info("meta")


def test_doctor_cli(capsys):
    from amp_edu.__main__ import main
    assert main(["doctor"]) == 0
    assert "CPU fp16 matmul" in capsys.readouterr().out


def test_num_threads_restores_the_setting_even_on_error():
    from amp_edu import study
    assert study.num_threads is sizes.num_threads          # one owner, re-exported for the study
    n = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with sizes.num_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
    assert torch.get_num_threads() == n
    with pytest.raises(ValueError, match="threads must be None or a positive int"):
        with sizes.num_threads(0):
            pass
    for bad in (True, 1.0, "2"):
        with pytest.raises(TypeError, match="threads"):
            with sizes.num_threads(bad):
                pass
    assert torch.get_num_threads() == n


# --- the capability rule on recorded CPU samples -------------------------------------------------

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "cpuinfo"

# file: (class, bf16 supported, bf16 faster than fp32, fp16 supported)
EXPECTED = {
    "amd_epyc_7763_zen3.txt": ("AVX2", False, False, False),
    "amd_epyc_9654_zen4.txt": ("AVX512_BF16", True, True, False),
    "amd_epyc_9005_zen5.txt": ("AVX512_BF16", True, True, False),
    "intel_xeon_8175m_skylake.txt": ("AVX512_CORE", True, False, False),
    "intel_xeon_8480_sapphire_rapids.txt": ("AMX", True, True, True),
    "aws_graviton3.txt": ("ARM_BF16", True, None, False),
    "aws_graviton2.txt": ("ARM", False, None, False),
    "apple_m2_sysctl.txt": ("APPLE_BF16", True, None, False),
    "apple_m1_sysctl.txt": ("APPLE", False, None, False),
}


def _features(name):
    text = (SAMPLES / name).read_text()
    return cpu_features.parse_sysctl(text) if "sysctl" in name else cpu_features.parse_cpuinfo(text)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cpu_class_of_each_family(name):
    c = cpu_classes.cpu_class(_features(name), env={})
    assert (c.name, c.bf16.supported, c.bf16.fast, c.fp16.supported) == EXPECTED[name]
    assert c.name in cpu_classes.CLASSES and c.limit is None


def test_every_sample_is_tested():
    assert {p.name for p in SAMPLES.glob("*.txt")} == set(EXPECTED) | {"live_amd_epyc.txt"}


def test_the_sources_and_models_are_read():
    assert _features("aws_graviton3.txt").arch == "arm" and "bf16" in _features("aws_graviton3.txt").flags
    assert _features("aws_graviton3.txt").source == "/proc/cpuinfo Features"
    m2 = _features("apple_m2_sysctl.txt")
    assert (m2.arch, m2.apple, m2.model, m2.source) == ("arm", True, "Apple M2", "sysctl")
    assert "bf16" not in _features("apple_m1_sysctl.txt").flags            # FEAT_BF16: 0
    spr = _features("intel_xeon_8480_sapphire_rapids.txt")
    assert spr.model.startswith("Intel(R) Xeon(R) Platinum 8480")
    assert cpu_features.onednn_isa(spr) == "AVX10_1_512_AMX"
    assert cpu_features.onednn_isa(_features("intel_xeon_8175m_skylake.txt")) == "AVX512_CORE"
    assert cpu_features.onednn_isa(_features("amd_epyc_9654_zen4.txt")) == "AVX512_CORE_BF16"
    assert cpu_features.parse_cpuinfo("processor : 0\n").arch == "unknown"
    assert cpu_classes.cpu_class(cpu_features.parse_cpuinfo(""), env={}).name == "unknown"


@pytest.mark.parametrize("limit, want", [
    ("AVX2", ("AVX2", False, False)), ("avx512_core", ("AVX512_CORE", True, False)),
    ("AVX512_CORE_BF16", ("AVX512_BF16", True, True)), ("AVX512_CORE_AMX", ("AMX", True, True)),
    ("ALL", ("AMX", True, True)), ("bogus", ("AMX", True, True))])
def test_onednn_max_cpu_isa_lowers_the_class(limit, want):
    """Under ONEDNN_MAX_CPU_ISA=AVX2 bf16 is not fast, whatever the flags say."""
    spr = _features("intel_xeon_8480_sapphire_rapids.txt")
    c = cpu_classes.cpu_class(spr, env={"ONEDNN_MAX_CPU_ISA": limit})
    assert (c.name, c.bf16.supported, c.bf16.fast) == want
    assert c.hardware_isa == "AVX10_1_512_AMX"
    assert cpu_classes.cpu_class(spr, env={"DNNL_MAX_CPU_ISA": limit}).name == want[0]   # oneDNN's old name


def test_bad_input_names_what_is_accepted():
    with pytest.raises(TypeError, match="CpuFeatures"):
        cpu_classes.cpu_class("avx2")
    with pytest.raises(TypeError, match="/proc/cpuinfo"):
        cpu_features.parse_cpuinfo(b"flags : avx2")
    with pytest.raises(TypeError, match="sysctl"):
        cpu_features.parse_sysctl(None)


def test_the_live_machine_agrees_with_torch():
    """The rule's 'supported' on this machine's own cpuinfo equals torch's answer."""
    live = cpu_features.read_cpu_features()
    rule = cpu_classes.cpu_class(live)                      # the rule only (recorded features)
    c = cpu_classes.cpu_class()                             # torch's answers
    assert c.bf16.supported is torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert c.fp16.supported is torch.ops.mkldnn._is_mkldnn_fp16_supported()
    if live.arch == "x86":
        assert (rule.bf16.supported, rule.fp16.supported) == (c.bf16.supported, c.fp16.supported)
    rec = cpu_features.parse_cpuinfo((SAMPLES / "live_amd_epyc.txt").read_text())
    assert cpu_classes.cpu_class(rec, env={}).name == "AVX512_BF16"


def _torch_answers(env):
    code = ("import torch; print(torch.ops.mkldnn._is_mkldnn_bf16_supported(), "
            "torch.ops.mkldnn._is_mkldnn_fp16_supported())")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    return tuple(v == "True" for v in out)


@pytest.mark.skipif(cpu_features.read_cpu_features().arch != "x86", reason="ONEDNN_MAX_CPU_ISA is an x86 switch")
@pytest.mark.parametrize("limit", ["AVX2", "AVX512_CORE"])
def test_the_rule_follows_torch_under_a_limit(limit):
    """torch's own query follows ONEDNN_MAX_CPU_ISA (it asks oneDNN); so does the rule."""
    live = cpu_features.read_cpu_features()
    if cpu_features.onednn_isa(live) is None or not cpu_features.allows(cpu_features.onednn_isa(live), limit):
        pytest.skip(f"this CPU is below {limit}")
    c = cpu_classes.cpu_class(live, env={"ONEDNN_MAX_CPU_ISA": limit})
    assert _torch_answers({"ONEDNN_MAX_CPU_ISA": limit}) == (c.bf16.supported, c.fp16.supported)


def test_torch_capabilities_are_read_first_and_agree_with_cpuinfo():
    """torch.cpu.get_capabilities() (torch >= 2.9) is asked before /proc/cpuinfo; both give one ISA."""
    if not hasattr(torch.cpu, "get_capabilities"):
        pytest.skip("this torch has no torch.cpu.get_capabilities()")
    live = cpu_features.read_cpu_features()
    assert live.source == "torch.cpu.get_capabilities()"
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo to compare with")
    proc = cpu_features.parse_cpuinfo(text)
    assert live.arch == proc.arch
    if proc.arch == "x86":
        assert cpu_features.onednn_isa(live) == cpu_features.onednn_isa(proc)
        assert cpu_classes.cpu_class(live, env={}).name == cpu_classes.cpu_class(proc, env={}).name


def test_torch_capability_names_become_linux_names():
    spr = {"architecture": "x86_64", "cpu_name": "Intel Xeon", "avx512_f": True, "avx512_bw": True,
           "avx512_vl": True, "avx512_dq": True, "avx512_vnni": True, "avx512_bf16": True, "avx512_fp16": True,
           "amx_tile": True, "amx_int8": True, "amx_bf16": True, "amx_fp16": False, "sse4_1": True,
           "avx": True, "avx2": True, "l2_cache_size": 2097152}
    f = cpu_features.parse_torch_capabilities(spr)
    assert (f.arch, f.model, cpu_features.onednn_isa(f)) == ("x86", "Intel Xeon", "AVX10_1_512_AMX")
    assert "amx_fp16" not in f.flags and "l2_cache_size" not in f.flags
    g3 = cpu_features.parse_torch_capabilities({"architecture": "aarch64", "neon": True, "bf16": True, "sve": True,
                                          "sve_bf16": True, "fp16_arith": True, "i8mm": True})
    assert g3.arch == "arm" and {"asimd", "bf16", "svebf16", "fphp", "asimdhp"} <= g3.flags
    with pytest.raises(TypeError, match="get_capabilities"):
        cpu_features.parse_torch_capabilities("avx2")
