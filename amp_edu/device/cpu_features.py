"""The CPU's instruction set, as torch, Linux or macOS report it, and the oneDNN ISA it allows.

A CPU's bf16 or fp16 matmul goes through oneDNN, which dispatches to the best *instruction set
architecture* (ISA) the CPU has, unless ``ONEDNN_MAX_CPU_ISA`` limits it. To tell CPU classes
apart (:mod:`.cpu_classes`) the course reads the CPU's features:

* from torch first: ``torch.cpu.get_capabilities()`` (torch >= 2.9, read by cpuinfo at run time),
  :func:`parse_torch_capabilities`;
* else from Linux's ``/proc/cpuinfo`` (x86 ``flags``, ARM ``Features``), :func:`parse_cpuinfo`;
* else from macOS ``sysctl``, :func:`parse_sysctl`;

all in Linux's names (:class:`CpuFeatures`), and finds the highest oneDNN ISA those features
allow under a limit (:func:`onednn_isa`, :func:`onednn_limit`).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass

import torch

__all__ = ["CpuFeatures", "parse_cpuinfo", "parse_sysctl", "parse_torch_capabilities", "read_cpu_features",
           "cpu_flags", "ONEDNN_ISAS", "onednn_limit", "onednn_isa", "allows"]

# oneDNN's ISA names and bit masks (torch 2.13.0's oneDNN headers: the ``dnnl_cpu_isa_t`` enum in
# torch/include/oneapi/dnnl/dnnl_types.h): an ISA is allowed under a limit L when its mask is a
# subset of L's mask, which is the partial order that the documentation of
# ``dnnl_set_max_cpu_isa`` in torch/include/oneapi/dnnl/dnnl.h states (SSE41 < AVX < AVX2 <
# AVX2_VNNI < AVX2_VNNI_2; AVX2 < AVX512_CORE < AVX512_CORE_VNNI < AVX512_CORE_BF16 < AVX10_1_512 <
# AVX10_1_512_AMX < ...).
ONEDNN_ISAS = {
    "SSE41": 0x1, "AVX": 0x3, "AVX2": 0x7, "AVX2_VNNI": 0xF, "AVX2_VNNI_2": 0x1F,
    "AVX512_CORE": 0x27, "AVX512_CORE_VNNI": 0x67, "AVX512_CORE_BF16": 0xE7,
    "AVX10_1_512": 0x1EF, "AVX10_1_512_AMX": 0xFEF, "AVX10_1_512_AMX_FP16": 0x1FEF,
    "AVX10_2": 0x201FF, "AVX10_2_AMX_2": 0x22FFF,
}
_ISA_ALIASES = {"AVX512_CORE_FP16": "AVX10_1_512", "AVX512_CORE_AMX": "AVX10_1_512_AMX",
                "AVX512_CORE_AMX_FP16": "AVX10_1_512_AMX_FP16", "AVX10_2_512": "AVX10_2",
                "AVX10_2_512_AMX_2": "AVX10_2_AMX_2"}
# the Linux flags each ISA needs, on top of the ISA before it in its chain
_ISA_NEEDS = {
    "SSE41": ("sse4_1",), "AVX": ("avx",), "AVX2": ("avx2",), "AVX2_VNNI": ("avx2", "avx_vnni"),
    "AVX2_VNNI_2": ("avx2", "avx_vnni", "avx_vnni_int8", "avx_ne_convert"),
    "AVX512_CORE": ("avx512f", "avx512bw", "avx512vl", "avx512dq"),
    "AVX512_CORE_VNNI": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"),
    "AVX512_CORE_BF16": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16"),
    "AVX10_1_512": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16", "avx512_fp16"),
    "AVX10_1_512_AMX": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16",
                        "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16"),
    "AVX10_1_512_AMX_FP16": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16",
                             "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "amx_fp16"),
}
_X86_FLAGS = tuple(sorted({f for need in _ISA_NEEDS.values() for f in need} | {"f16c"}))
_ARM_FEATURES = ("asimd", "fphp", "asimdhp", "bf16", "sve", "svebf16", "sve2", "i8mm")
# macOS sysctl names of the same Arm features (hw.optional.arm.FEAT_*)
_SYSCTL_FEATURES = {"FEAT_BF16": ("bf16",), "FEAT_FP16": ("fphp", "asimdhp"), "FEAT_I8MM": ("i8mm",),
                    "AdvSIMD": ("asimd",), "FEAT_SVE": ("sve",)}
_SYSCTL_X86 = {"avx1_0": "avx", "avx2_0": "avx2", "avx512vnni": "avx512_vnni", "sse4_1": "sse4_1"}


@dataclass(frozen=True)
class CpuFeatures:
    """The instruction-set features of a CPU that matter here, and where they were read.

    ``arch`` is ``"x86"``, ``"arm"`` or ``"unknown"``; ``flags`` the Linux names (x86 ``flags``,
    ARM ``Features``; macOS ``FEAT_*`` translated to them); ``source`` says what was parsed."""

    arch: str
    flags: frozenset
    model: str = ""
    source: str = "none"
    apple: bool = False


def parse_cpuinfo(text: str) -> CpuFeatures:
    """Read a Linux ``/proc/cpuinfo`` text: the first ``flags`` (x86) or ``Features`` (ARM) line."""
    if not isinstance(text, str):
        raise TypeError(f"text must be the str of a /proc/cpuinfo file, got {type(text).__name__}")
    model = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key == "flags":
            return CpuFeatures("x86", frozenset(value.split()), model, "/proc/cpuinfo flags")
        elif key == "Features":
            return CpuFeatures("arm", frozenset(value.split()), model or _arm_model(text), "/proc/cpuinfo Features")
    return CpuFeatures("unknown", frozenset(), model, "/proc/cpuinfo (no flags or Features line)")


def _arm_model(text: str) -> str:
    fields = dict(l.split(":", 1) for l in text.splitlines() if ":" in l)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return f"Arm implementer {fields.get('CPU implementer', '?')} part {fields.get('CPU part', '?')}"


def parse_sysctl(text: str) -> CpuFeatures:
    """Read macOS ``sysctl hw.optional machdep.cpu.brand_string`` output (``name: value`` lines).

    Apple silicon reports its Arm features as ``hw.optional.arm.FEAT_BF16: 1`` and so on; an
    Intel Mac reports ``hw.optional.avx512bw: 1``-style x86 names."""
    if not isinstance(text, str):
        raise TypeError(f"text must be the str output of sysctl, got {type(text).__name__}")
    vals = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            vals[key.strip()] = value.strip()
    model = vals.get("machdep.cpu.brand_string", "")
    arm = vals.get("hw.optional.arm64") == "1" or any(k.startswith("hw.optional.arm.") for k in vals)
    flags = set()
    for key, value in vals.items():
        if value != "1" or not key.startswith("hw.optional."):
            continue
        name = key.rsplit(".", 1)[1]
        if arm:
            flags.update(_SYSCTL_FEATURES.get(name, ()))
        else:
            flags.add(_SYSCTL_X86.get(name, name.lower()))
    return CpuFeatures("arm" if arm else "x86", frozenset(flags), model, "sysctl", apple=arm)


# torch.cpu.get_capabilities() (torch/cpu/__init__.py, ``get_capabilities``; read by cpuinfo at
# run time) names a few features differently from Linux; everything else has the Linux name
_TORCH_TO_LINUX = {"avx512_f": ("avx512f",), "avx512_bw": ("avx512bw",), "avx512_vl": ("avx512vl",),
                   "avx512_dq": ("avx512dq",), "avx512_cd": ("avx512cd",),
                   "neon": ("asimd",), "fp16_arith": ("fphp", "asimdhp"), "sve_bf16": ("svebf16",)}


def parse_torch_capabilities(caps) -> CpuFeatures:
    """Read the mapping ``torch.cpu.get_capabilities()`` returns (``{feature: bool, ...,
    "architecture": "x86_64" | "aarch64" | ..., "cpu_name": ...}``) into Linux feature names."""
    if not isinstance(caps, Mapping):
        raise TypeError(f"caps must be the mapping torch.cpu.get_capabilities() returns, got {type(caps).__name__}")
    machine = str(caps.get("architecture", "")).lower()
    arch = ("x86" if machine in ("x86_64", "amd64", "x86", "i686") else
            "arm" if machine in ("aarch64", "arm64") else "unknown")
    flags = set()
    for key, value in caps.items():
        if value is True:
            flags.update(_TORCH_TO_LINUX.get(key, (key,)))
    apple = arch == "arm" and platform.system() == "Darwin"
    return CpuFeatures(arch, frozenset(flags), str(caps.get("cpu_name", "")), "torch.cpu.get_capabilities()",
                       apple=apple)


def read_cpu_features() -> CpuFeatures:
    """This machine's features: torch's own answer (``torch.cpu.get_capabilities()``, where this torch has it)
    where it has one; else ``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS, else unknown."""
    get = getattr(torch.cpu, "get_capabilities", None)
    if get is not None:
        try:
            f = parse_torch_capabilities(get())
            if f.arch != "unknown":
                return f
        except (RuntimeError, TypeError):
            pass
    try:
        with open("/proc/cpuinfo") as fh:
            return parse_cpuinfo(fh.read())
    except OSError:
        pass
    if platform.system() == "Darwin":
        import subprocess
        try:
            out = subprocess.run(["sysctl", "hw.optional", "machdep.cpu.brand_string"], capture_output=True,
                                 text=True, timeout=10).stdout
            return parse_sysctl(out)
        except (OSError, subprocess.SubprocessError):
            pass
    return CpuFeatures("unknown", frozenset(), platform.processor() or platform.machine(), "none")


def cpu_flags(features: CpuFeatures | None = None) -> dict[str, bool]:
    """The flags that matter for low precision, as ``{name: present}`` (x86 and ARM names)."""
    f = features if features is not None else read_cpu_features()
    return {name: name in f.flags for name in (*_X86_FLAGS, *_ARM_FEATURES)}


def onednn_limit(env=None) -> str | None:
    """The ISA ``ONEDNN_MAX_CPU_ISA`` (or its old name ``DNNL_MAX_CPU_ISA``) limits oneDNN to, as
    a key of :data:`ONEDNN_ISAS`; ``None`` when unset, ``ALL``/``DEFAULT`` or not a name oneDNN
    knows (oneDNN ignores those; run under ``=bogus``, torch still reports bf16 support)."""
    env = os.environ if env is None else env
    raw = (env.get("ONEDNN_MAX_CPU_ISA") or env.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    raw = _ISA_ALIASES.get(raw, raw)
    return raw if raw in ONEDNN_ISAS else None


def onednn_isa(features: CpuFeatures, limit: str | None = None) -> str | None:
    """The highest oneDNN ISA an x86 CPU with ``features`` may dispatch to under ``limit``
    (``None``: no limit): its hardware has every flag the ISA needs and the ISA's mask lies
    inside the limit's. ``None`` for a non-x86 CPU or one below SSE4.1."""
    if features.arch != "x86":
        return None
    cap = ONEDNN_ISAS[limit] if limit is not None else ~0
    allowed = [name for name, mask in ONEDNN_ISAS.items() if mask & cap == mask
               and name in _ISA_NEEDS and all(f in features.flags for f in _ISA_NEEDS[name])]
    # the order is partial (AVX2_VNNI is not below AVX512_CORE): the ISA with the most bits wins
    return max(allowed, key=lambda n: (bin(ONEDNN_ISAS[n]).count("1"), ONEDNN_ISAS[n]), default=None)


def allows(isa: str | None, name: str) -> bool:
    """Does oneDNN ISA ``isa`` (None: none) include everything ISA ``name`` has?"""
    return isa is not None and ONEDNN_ISAS[isa] & ONEDNN_ISAS[name] == ONEDNN_ISAS[name]
