"""The class of a CPU for mixed precision: what torch says, and what the instruction set says where torch cannot.

torch answers the question that matters for a bf16/fp16 matmul itself:
``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` (``..._fp16_...``) is True when oneDNN has a
bf16 (fp16) path on this CPU. On x86 it asks oneDNN for the ISA it may dispatch to
(``ideep::has_bf16_type_support()``), so it follows ``ONEDNN_MAX_CPU_ISA`` too — a cell of
lesson 00 and tests/device/test_device.py run it under several settings. What torch cannot tell is
whether that path is *faster* than fp32: oneDNN's bf16 matmul needs only AVX512BW/VL/DQ
("AVX512_CORE"), where it converts to fp32 inside and runs at 0.5-0.9× fp32 (nearer 0.9× on
larger matmuls); with AVX512_BF16 (or Intel's AMX on top) it multiplies bf16 directly and beats
fp32 several times; below AVX512_CORE torch falls back to a loop 1/16-1/600 of fp32 (slower on
larger matmuls). Those classes were measured with the course's bench (amp_edu/reference/), so
:func:`cpu_class` reads the instruction set (:mod:`.cpu_features`) only to tell them apart, and
says "not measured" where the course has no measurement.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from .cpu_features import CpuFeatures, allows, onednn_isa, onednn_limit, read_cpu_features

__all__ = ["LowPrecisionMatmul", "CpuClass", "CLASSES", "cpu_class"]


@dataclass(frozen=True)
class LowPrecisionMatmul:
    """What a CPU does with one low-precision dtype's matmul.

    ``supported``: oneDNN runs the dtype (torch's ``_is_mkldnn_*_supported``); ``fast``: faster
    than fp32 (``None``: not measured for this class); ``speed``: a phrase to print; ``basis``:
    where the speed comes from."""

    supported: bool | None
    fast: bool | None
    speed: str
    basis: str


@dataclass(frozen=True)
class CpuClass:
    """The class of CPU a run stands for: the name lessons and reference runs use, the oneDNN ISA
    behind it, any ``ONEDNN_MAX_CPU_ISA`` limit, and what bf16 and fp16 matmuls do there."""

    name: str
    description: str
    isa: str | None
    hardware_isa: str | None
    limit: str | None
    bf16: LowPrecisionMatmul
    fp16: LowPrecisionMatmul
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


CLASSES = {   # name: what it stands for
    "AMX": "x86 with AMX-BF16 tiles (Intel Sapphire Rapids and later)",
    "AVX512_BF16": "x86 with AVX512_BF16 (AMD Zen 4/5, Intel Cooper Lake)",
    "AVX512_CORE": "x86 with AVX512BW/VL/DQ but no AVX512_BF16 (Intel Skylake-SP to Ice Lake)",
    "AVX2_VNNI_2": "x86 with AVX-NE-CONVERT but no AVX512 (recent Intel client chips)",
    "AVX2": "x86 without AVX512 (AVX2 and older: AMD Zen 1-3, most laptops before 2023)",
    "ARM_BF16": "Arm with the BF16 extension (e.g. AWS Graviton 3/4, Neoverse V1/V2)",
    "ARM": "Arm without the BF16 extension (e.g. Graviton 2, Neoverse N1)",
    "APPLE_BF16": "Apple silicon with FEAT_BF16 (M2 and later)",
    "APPLE": "Apple silicon without FEAT_BF16 (M1)",
    "unknown": "a CPU whose instruction set was not found",
}
_MEASURED = "measured with the course's bench (amp_edu/reference/)"
_NOT_MEASURED = "not measured by the course"


def _x86_bf16(isa: str | None) -> LowPrecisionMatmul:
    if allows(isa, "AVX512_CORE_BF16"):
        return LowPrecisionMatmul(True, True, "faster than fp32 (bf16 dot-product instructions)", _MEASURED)
    if allows(isa, "AVX512_CORE"):
        return LowPrecisionMatmul(True, False, "slower than fp32 (oneDNN converts to fp32 inside): about 0.5× "
                                  "at 256³, 0.8-0.9× at 1024³-2048³ in the course's run", _MEASURED)
    if allows(isa, "AVX2_VNNI_2"):
        return LowPrecisionMatmul(True, None, "supported; speed against fp32 " + _NOT_MEASURED, _NOT_MEASURED)
    return LowPrecisionMatmul(False, False, "tens to hundreds of times slower than fp32 (torch's fallback loop): "
                              "1/16-1/100 up to 512³, 1/150-1/600 at 1024³-2048³ in the course's runs", _MEASURED)


def _x86_fp16(isa: str | None) -> LowPrecisionMatmul:
    if allows(isa, "AVX10_1_512") or allows(isa, "AVX2_VNNI_2"):
        return LowPrecisionMatmul(True, None, "supported; speed against fp32 " + _NOT_MEASURED, _NOT_MEASURED)
    return LowPrecisionMatmul(False, False, "tens to hundreds of times slower than fp32 (a slow path, "
                              "pytorch/pytorch#146508)", _MEASURED)


def cpu_class(features: CpuFeatures | None = None, *, env=None) -> CpuClass:
    """The class of ``features`` (default: this machine) under ``env``'s ``ONEDNN_MAX_CPU_ISA``.

    For this machine (``features=None``) ``bf16.supported``/``fp16.supported`` are torch's own
    answers; for recorded features they are the rule's, which tests/device/test_device.py checks
    against torch's answer on the live machine under each limit."""
    live = features is None
    f = read_cpu_features() if live else features
    if not isinstance(f, CpuFeatures):
        raise TypeError(f"features must be a CpuFeatures (from parse_cpuinfo/parse_sysctl) or None, "
                        f"got {type(f).__name__}")
    limit = onednn_limit(env)
    if f.arch == "x86":
        isa = onednn_isa(f, limit)
        hw = onednn_isa(f, None)
        name = ("AMX" if allows(isa, "AVX10_1_512_AMX") else "AVX512_BF16" if allows(isa, "AVX512_CORE_BF16")
                else "AVX512_CORE" if allows(isa, "AVX512_CORE") else "AVX2_VNNI_2" if allows(isa, "AVX2_VNNI_2")
                else "AVX2" if isa is not None else "unknown")
        bf16, fp16 = _x86_bf16(isa), _x86_fp16(isa)
    elif f.arch == "arm":
        isa = hw = None
        has_bf16 = "bf16" in f.flags
        name = ("APPLE" if f.apple else "ARM") + ("_BF16" if has_bf16 else "")
        bf16 = LowPrecisionMatmul(has_bf16, None, "supported; speed against fp32 " + _NOT_MEASURED
                                  if has_bf16 else "no bf16 instructions; speed " + _NOT_MEASURED, _NOT_MEASURED)
        # torch's oneDNN fp16 check is x86-only (mkldnn_fp16_device_check returns false elsewhere)
        fp16 = LowPrecisionMatmul(False, None, "not a oneDNN path on Arm; speed " + _NOT_MEASURED, _NOT_MEASURED)
    else:
        isa = hw = None
        name = "unknown"
        bf16 = LowPrecisionMatmul(None, None, "unknown (no instruction-set flags found)", _NOT_MEASURED)
        fp16 = bf16
    if live:
        bf16 = _with_torch(bf16, torch.ops.mkldnn._is_mkldnn_bf16_supported())
        fp16 = _with_torch(fp16, torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return CpuClass(name, CLASSES[name], isa, hw, limit, bf16, fp16, f.source)


def _with_torch(p: LowPrecisionMatmul, supported: bool) -> LowPrecisionMatmul:
    """torch's answer overrides the rule's ``supported`` (they agree wherever tested)."""
    return p if p.supported == supported else LowPrecisionMatmul(supported, p.fast if supported else False,
                                                                 p.speed, p.basis + "; support as torch reports")
