"""What this machine can do, and how big the course's experiments should be here.

Mixed precision pays off only where the hardware has fast low-precision units:

* NVIDIA GPUs have **Tensor Cores** from Volta (compute capability 7.0) on: fp16 there,
  bf16 and tf32 from Ampere (8.0), fp8 from Ada/Hopper (8.9 / 9.0).
* ``torch.cuda.is_bf16_supported()`` says True on a T4 (7.5) because bf16 *runs* there through
  emulation; we ask ``including_emulation=False`` to learn whether it runs *natively*.
* A CPU's bf16 matmul goes through oneDNN wherever torch says so
  (``torch.ops.mkldnn._is_mkldnn_bf16_supported()``: AVX512BW/VL/DQ is enough), but it is *faster*
  than fp32 only with AVX512_BF16 or AMX; :func:`cpu_class` tells the classes apart (see below).
  fp16 matmul without AVX512_FP16/AMX-FP16 takes a slow path (pytorch/pytorch#146508).

The course runs everywhere: :func:`pick_device` takes CUDA when present, else the CPU, and
:func:`pick` chooses problem sizes for the mode — ``AMP_EDU_SMOKE=1`` (set by the tests) shrinks
everything so a notebook runs in seconds; otherwise sizes suit a laptop CPU or, larger, a GPU.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import torch

from .validate import check_int

__all__ = ["DeviceInfo", "is_smoke", "pick_device", "pick", "info", "setup_line", "provenance_line", "report",
           "num_threads", "CpuFeatures", "parse_cpuinfo", "parse_sysctl", "read_cpu_features", "cpu_flags",
           "ONEDNN_ISAS", "onednn_limit", "onednn_isa", "LowPrecisionMatmul", "CpuClass", "CLASSES", "cpu_class"]

_TRUE = {"1", "true", "yes", "on"}


def is_smoke() -> bool:
    """True when ``AMP_EDU_SMOKE`` is set to 1/true/yes/on: tiny sizes, for tests."""
    return os.environ.get("AMP_EDU_SMOKE", "").strip().lower() in _TRUE


def pick_device(prefer: str | None = None) -> torch.device:
    """The device the lessons run on: CUDA when available, else the CPU.

    ``prefer="cpu"`` forces the CPU; ``prefer="cuda"`` raises if there is no GPU.
    ``AMP_EDU_DEVICE`` in the environment does the same as ``prefer``.
    """
    prefer = prefer or os.environ.get("AMP_EDU_DEVICE") or None
    if prefer is not None and prefer not in ("cpu", "cuda"):
        raise ValueError(f"prefer must be 'cpu', 'cuda' or None, got {prefer!r}")
    if prefer == "cuda" and not torch.cuda.is_available():
        raise ValueError("prefer='cuda' but torch.cuda.is_available() is False on this machine")
    if prefer == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


def pick(*, smoke, cpu, gpu=None, device: torch.device | str | None = None):
    """Choose a size for this mode: ``smoke`` under AMP_EDU_SMOKE, ``gpu`` on CUDA, else ``cpu``.

    >>> pick(smoke=8, cpu=256, gpu=4096)   # doctest: +SKIP
    """
    if is_smoke():
        return smoke
    dev = torch.device(device) if device is not None else pick_device()
    if dev.type == "cuda" and gpu is not None:
        return gpu
    return cpu


@contextlib.contextmanager
def num_threads(n: int | None):
    """Run the block with ``torch.set_num_threads(n)`` (``None``: leave the setting alone).

    The course's models are tiny: splitting their small matmuls over CPU threads costs more in
    synchronisation than it saves — on a busy machine, many times more — so the study's, the
    graders' and the benchmarks' CPU runs can ask for one thread. The previous setting is
    restored afterwards.
    """
    if n is None:
        yield
        return
    n = check_int(n, "threads")
    if n < 1:
        raise ValueError(f"threads must be None or a positive int, got {n!r}")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


# --- the CPU: what torch says, and what the instruction set says where torch cannot --------------
#
# torch answers the question that matters for a bf16/fp16 matmul itself:
# ``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` (``..._fp16_...``) is True when oneDNN has a
# bf16 (fp16) path on this CPU. On x86 it asks oneDNN for the ISA it may dispatch to
# (``ideep::has_bf16_type_support()``), so it follows ``ONEDNN_MAX_CPU_ISA`` too — a cell of
# lesson 00 and tests/test_device.py run it under several settings. What torch cannot tell is
# whether that path is *faster* than fp32: oneDNN's bf16 matmul needs only AVX512BW/VL/DQ
# ("AVX512_CORE"), where it converts to fp32 inside and runs at 0.5-0.9× fp32 (nearer 0.9× on
# larger matmuls); with
# AVX512_BF16 (or Intel's AMX on top) it multiplies bf16 directly and beats fp32 several times;
# below AVX512_CORE torch falls back to a loop 1/16-1/600 of fp32 (slower on larger matmuls). Those classes were measured
# with the course's bench (amp_edu/reference/), so :func:`cpu_class` reads the instruction set —
# from torch's ``torch.cpu.get_capabilities()`` where it exists, else from ``/proc/cpuinfo`` (x86
# ``flags``, ARM ``Features``) or macOS ``sysctl`` — only to tell them apart, and says "not
# measured" where the course has no measurement.

# oneDNN's ISA names and bit masks (torch/include/oneapi/dnnl/dnnl_types.h:2941-3007 in torch
# 2.13.0): an ISA is allowed under a limit L when its mask is a subset of L's mask, which is the
# partial order of dnnl.h:3967-3982 (SSE41 < AVX < AVX2 < AVX2_VNNI < AVX2_VNNI_2; AVX2 <
# AVX512_CORE < AVX512_CORE_VNNI < AVX512_CORE_BF16 < AVX10_1_512 < AVX10_1_512_AMX < ...).
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


# torch.cpu.get_capabilities() (torch/cpu/__init__.py:35-78 in torch 2.13.0, read by cpuinfo at
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


def _allows(isa: str | None, name: str) -> bool:
    return isa is not None and ONEDNN_ISAS[isa] & ONEDNN_ISAS[name] == ONEDNN_ISAS[name]


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
    if _allows(isa, "AVX512_CORE_BF16"):
        return LowPrecisionMatmul(True, True, "faster than fp32 (bf16 dot-product instructions)", _MEASURED)
    if _allows(isa, "AVX512_CORE"):
        return LowPrecisionMatmul(True, False, "slower than fp32 (oneDNN converts to fp32 inside): about 0.5× "
                                  "at 256³, 0.8-0.9× at 1024³-2048³ in the course's run", _MEASURED)
    if _allows(isa, "AVX2_VNNI_2"):
        return LowPrecisionMatmul(True, None, "supported; speed against fp32 " + _NOT_MEASURED, _NOT_MEASURED)
    return LowPrecisionMatmul(False, False, "tens to hundreds of times slower than fp32 (torch's fallback loop): "
                              "1/16-1/100 up to 512³, 1/150-1/600 at 1024³-2048³ in the course's runs", _MEASURED)


def _x86_fp16(isa: str | None) -> LowPrecisionMatmul:
    if _allows(isa, "AVX10_1_512") or _allows(isa, "AVX2_VNNI_2"):
        return LowPrecisionMatmul(True, None, "supported; speed against fp32 " + _NOT_MEASURED, _NOT_MEASURED)
    return LowPrecisionMatmul(False, False, "tens to hundreds of times slower than fp32 (a slow path, "
                              "pytorch/pytorch#146508)", _MEASURED)


def cpu_class(features: CpuFeatures | None = None, *, env=None) -> CpuClass:
    """The class of ``features`` (default: this machine) under ``env``'s ``ONEDNN_MAX_CPU_ISA``.

    For this machine (``features=None``) ``bf16.supported``/``fp16.supported`` are torch's own
    answers; for recorded features they are the rule's, which tests/test_device.py checks
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
        name = ("AMX" if _allows(isa, "AVX10_1_512_AMX") else "AVX512_BF16" if _allows(isa, "AVX512_CORE_BF16")
                else "AVX512_CORE" if _allows(isa, "AVX512_CORE") else "AVX2_VNNI_2" if _allows(isa, "AVX2_VNNI_2")
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


def _cpu_model(features: CpuFeatures) -> str:
    return features.model or platform.processor() or platform.machine()


@dataclass
class DeviceInfo:
    """A snapshot of what the device can do for mixed precision.

    ``cpu_class`` is the CPU's class (:func:`cpu_class`): whether bf16/fp16 matmuls are supported
    by oneDNN here and whether they are faster than fp32 (``cpu_class.bf16.fast``)."""

    device: str
    name: str
    torch_version: str
    threads: int
    smoke: bool
    compute_capability: tuple[int, int] | None = None
    tensor_cores: bool = False
    bf16_native: bool = False
    fp8: bool = False
    cuda_version: str | None = None
    cpu_model: str = ""
    cpu_capability: str = ""
    cpu_flags: dict[str, bool] = field(default_factory=dict)
    cpu_class: CpuClass | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def info(device: torch.device | str | None = None) -> DeviceInfo:
    """Describe ``device`` (default: :func:`pick_device`)."""
    dev = torch.device(device) if device is not None else pick_device()
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be a cpu or cuda device, got {dev}")
    feats = read_cpu_features()
    common = dict(
        torch_version=torch.__version__,
        threads=torch.get_num_threads(),
        smoke=is_smoke(),
        cpu_model=_cpu_model(feats),
        # ATen's own vectorised kernels (elementwise ops, reductions); ATEN_CPU_CAPABILITY sets it
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        cpu_flags=cpu_flags(feats),
        cpu_class=cpu_class(),
    )
    if dev.type == "cuda":
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        cc = torch.cuda.get_device_capability(idx)
        try:
            bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # torch < 2.3 has no including_emulation
            bf16 = cc >= (8, 0)
        return DeviceInfo(
            device="cuda",
            name=torch.cuda.get_device_name(idx),
            compute_capability=tuple(cc),
            tensor_cores=cc >= (7, 0),
            bf16_native=bool(bf16),
            fp8=cc >= (8, 9),
            cuda_version=torch.version.cuda,
            **common,
        )
    return DeviceInfo(device="cpu", name=common["cpu_model"] or "CPU", **common)


def _cpu_support(c: CpuClass) -> str:
    word = lambda p: ("fast" if p.fast else "runs, not faster than fp32" if p.supported and p.fast is False  # noqa: E731
                      else "runs, speed not measured" if p.supported else "slow path" if p.fast is False
                      else "unknown")
    limit = f" (ONEDNN_MAX_CPU_ISA={c.limit})" if c.limit else ""
    return f"CPU class {c.name}{limit}: bf16 matmul {word(c.bf16)}, fp16 matmul {word(c.fp16)}"


def provenance_line(device: torch.device | str | None = None, *, when=None) -> str:
    """A line saying where the outputs below were produced, for a reader of the stored page.

    A lesson is stored executed, so its outputs are read on a code host by people who never ran
    it: this line (printed by every setup cell, through :func:`setup_line`) names the machine, its
    class and torch, and says that a run elsewhere differs. It is true for the learner's own run
    too: then it names the learner's machine."""
    import datetime as _dt

    i = info(device)
    when = when or _dt.datetime.now(_dt.timezone.utc)
    if i.device == "cuda":
        where = f"{i.name} (sm_{''.join(map(str, i.compute_capability))}, CUDA {i.cuda_version})"
    else:
        where = f"{i.name} ({i.cpu_class.name} class, {i.threads} thread{'s' if i.threads != 1 else ''})"
    return (f"outputs below produced on: {where}, torch {i.torch_version}, {when:%Y-%m-%d}; "
            f"timings, speed-ups and anything that depends on the machine's class differ on another machine")


def setup_line(device: torch.device | str | None = None) -> str:
    """The line every lesson's setup cell prints — device, low-precision support, mode — followed
    by :func:`provenance_line`, so every stored lesson opens with where its outputs come from."""
    i = info(device)
    mode = "smoke (tiny sizes)" if i.smoke else "full"
    if i.device == "cuda":
        cc = ".".join(map(str, i.compute_capability))
        support = (f"sm_{cc}, Tensor Cores {'yes' if i.tensor_cores else 'no'}, "
                   f"native bf16 {'yes' if i.bf16_native else 'no'}, fp8 {'yes' if i.fp8 else 'no'}")
    else:
        support = (f"{i.threads} thread{'s' if i.threads != 1 else ''}, ATen {i.cpu_capability}, "
                   f"{_cpu_support(i.cpu_class)}")
    return (f"device: {i.device} ({i.name}) | {support} | torch {i.torch_version} | mode: {mode}\n"
            + provenance_line(device))


def report(device: torch.device | str | None = None) -> str:
    """A multi-line report of :func:`info`, printed by ``python -m amp_edu doctor``."""
    i = info(device)
    c = i.cpu_class
    yn = lambda b: "unknown" if b is None else "yes" if b else "no"  # noqa: E731
    limit = f", limited by ONEDNN_MAX_CPU_ISA={c.limit}" if c.limit else ""
    lines = [
        f"torch {i.torch_version} on Python {platform.python_version()}",
        f"device            {i.device}: {i.name}",
        f"mode              {'smoke (AMP_EDU_SMOKE=1)' if i.smoke else 'full'}",
        f"CPU               {i.cpu_model} ({i.threads} threads, ATen kernels {i.cpu_capability})",
        f"CPU class         {c.name}: {c.description}",
        f"oneDNN ISA        {c.isa or '-'} (hardware {c.hardware_isa or '-'}{limit}; flags from {c.source})",
        f"CPU bf16 matmul   supported {yn(c.bf16.supported)}, faster than fp32 {yn(c.bf16.fast)}: {c.bf16.speed}",
        f"CPU fp16 matmul   supported {yn(c.fp16.supported)}, faster than fp32 {yn(c.fp16.fast)}: {c.fp16.speed}",
    ]
    if i.device == "cuda":
        lines += [
            f"compute capability {'.'.join(map(str, i.compute_capability))}, CUDA {i.cuda_version}",
            f"Tensor Cores      {yn(i.tensor_cores)}",
            f"native bf16       {yn(i.bf16_native)}",
            f"fp8 matmul        {yn(i.fp8)}",
        ]
    else:
        lines.append("GPU               none found: the course runs on the CPU with smaller sizes; "
                     "GPU-only cells say why they skip")
    return "\n".join(lines)
