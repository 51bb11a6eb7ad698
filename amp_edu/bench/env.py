"""What a benchmark result depends on, recorded with it — and the TF32 switch, set explicitly.

A matmul "in fp32" on an Ampere-or-later GPU may silently run in **TF32** (fp32 inputs rounded to
10 mantissa bits on Tensor Cores, ~8× faster): PyTorch turned matmul TF32 *off* by default in 1.12
(convolutions keep it on), but a script may switch it on, and NVIDIA's containers may set
``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` which forces it on whatever the flag says
(``NVIDIA_TF32_OVERRIDE=0`` forces it off in cuBLAS/cuDNN). A result is only meaningful with these
settings next to it, so :func:`environment` records them, with the device, driver, CUDA, torch,
CPU model, instruction flags and class (the CPU class the run stands for, with any
``ONEDNN_MAX_CPU_ISA`` limit), threads and the date.

:func:`tf32` sets the matmul TF32 flag for a block and restores it afterwards. PyTorch ≥ 2.9 has a
second API for it (``torch.backends.cuda.matmul.fp32_precision``) and *raises* when code mixes the
two, so :func:`tf32` keeps to whichever API the process already uses (the legacy ``allow_tf32``
flag unless the new one has been set).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import shutil
import subprocess

import torch

from ..device import info
from ..measure.load import others_busy
from ..measure.timing import l2_bytes

__all__ = ["tf32_enabled", "tf32", "tf32_override", "precision_flags", "cache_sizes", "stands_for",
           "environment"]

_OVERRIDE_VARS = ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")


def _uses_new_api() -> bool:
    """True when reading the legacy flag raises because the new API was used in this process."""
    try:
        torch.backends.cuda.matmul.allow_tf32  # noqa: B018 - the read is the test
        return False
    except RuntimeError:
        return True


def tf32_enabled() -> bool:
    """Whether PyTorch asks cuBLAS for TF32 in fp32 matmuls (the flag, not the env overrides)."""
    if _uses_new_api():
        return torch.backends.cuda.matmul.fp32_precision == "tf32"
    return bool(torch.backends.cuda.matmul.allow_tf32)


def _set_tf32(on: bool) -> None:
    if _uses_new_api():
        torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = on


@contextlib.contextmanager
def tf32(enabled: bool):
    """Run the block with matmul TF32 ``enabled`` (True/False), then restore the previous setting.

    >>> with tf32(False):          # an honest fp32 (IEEE) baseline
    ...     c = a @ b               # doctest: +SKIP
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be True or False, got {enabled!r}")
    before = tf32_enabled()
    _set_tf32(enabled)
    try:
        yield
    finally:
        _set_tf32(before)


def tf32_override() -> str | None:
    """A sentence when an environment variable overrides the TF32 flag, else ``None``."""
    if os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "").strip() == "1":
        return ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1: cuBLAS uses TF32 for fp32 matmuls whatever the "
                "flag says, so an 'fp32' GPU result is really tf32")
    if os.environ.get("NVIDIA_TF32_OVERRIDE", "").strip() == "0":
        return "NVIDIA_TF32_OVERRIDE=0: cuBLAS/cuDNN never use TF32, so a 'tf32' GPU result is really fp32"
    return None


# The new (torch >= 2.9) per-backend precision settings: "ieee", "tf32", "bf16" or "none" (inherit).
# ``torch.backends.mkldnn.matmul.fp32_precision = "bf16"`` makes a CPU's fp32 matmul run in bf16.
_NEW_API = {
    "fp32_precision": ("fp32_precision",),
    "cuda_matmul_fp32_precision": ("cuda", "matmul", "fp32_precision"),
    "cudnn_fp32_precision": ("cudnn", "fp32_precision"),
    "cudnn_conv_fp32_precision": ("cudnn", "conv", "fp32_precision"),
    "cudnn_rnn_fp32_precision": ("cudnn", "rnn", "fp32_precision"),
    "mkldnn_fp32_precision": ("mkldnn", "fp32_precision"),
    "mkldnn_matmul_fp32_precision": ("mkldnn", "matmul", "fp32_precision"),
    "mkldnn_conv_fp32_precision": ("mkldnn", "conv", "fp32_precision"),
}


def _backend_setting(path: tuple[str, ...]):
    obj = torch.backends
    for part in path:
        obj = getattr(obj, part, None)
        if obj is None:
            return None                      # an older torch without the new API
    return obj if isinstance(obj, str) else None


def precision_flags() -> dict:
    """The process-wide switches that change what an fp32/fp16/bf16 matmul computes: the legacy
    flags and the new ``fp32_precision`` settings (CUDA, cuDNN, mkldnn). Reading a legacy flag
    *raises* in torch 2.13 once the new API has set it; such a flag is recorded as ``None`` and
    ``legacy_unreadable`` names it, so recording never fails and never changes a setting."""
    m = torch.backends.cuda.matmul
    legacy = {
        "cudnn_tf32": lambda: bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision,
    }
    flags = {
        "matmul_tf32": tf32_enabled(),
        "fp16_reduced_precision_reduction": _safe(lambda: bool(m.allow_fp16_reduced_precision_reduction)),
        "bf16_reduced_precision_reduction": _safe(lambda: bool(m.allow_bf16_reduced_precision_reduction)),
        "mkldnn_enabled": bool(torch.backends.mkldnn.is_available()),
    }
    flags["legacy_unreadable"] = []
    for name, read in legacy.items():
        flags[name] = _safe(read)
        if flags[name] is None:
            flags["legacy_unreadable"].append(name)
    for name, path in _NEW_API.items():
        flags[name] = _backend_setting(path)
    for var in _OVERRIDE_VARS:
        flags[var] = os.environ.get(var)
    flags["override_note"] = tf32_override()
    return flags


def _safe(fn):
    try:
        return fn()
    except (RuntimeError, AttributeError):  # a mixed-API process, or an older torch
        return None


def _driver_version() -> str | None:
    """The NVIDIA driver version from nvidia-smi (torch does not expose it), or ``None``."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def _cpu_caches(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, int]:
    """``{"L1d": bytes, "L2": ..., "L3": ...}`` of CPU 0 from Linux sysfs; ``{}`` elsewhere.

    L3 is usually shared by several cores (the size is the whole cache); L1/L2 are per core."""
    sizes: dict[str, int] = {}
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return sizes
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            read = lambda f: open(os.path.join(root, entry, f)).read().strip()  # noqa: E731
            level, kind, size = read("level"), read("type"), read("size")
        except OSError:
            continue
        if kind == "Instruction":
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:].upper(), 1)
        digits = size.rstrip("KMGkmg")
        if digits.isdigit():
            sizes[f"L{level}{'d' if kind == 'Data' else ''}"] = int(digits) * mult
    return sizes


def cache_sizes(device: torch.device | str | None = None) -> dict[str, int]:
    """The caches between the compute units and DRAM, in bytes: a GPU's ``L2`` (what torch
    reports), or a CPU's ``L1d``/``L2``/``L3`` (Linux sysfs). An operand smaller than these may be
    read from cache rather than DRAM, so it can beat a roofline drawn with DRAM bandwidth."""
    dev = torch.device(device) if device is not None else torch.device(info(None).device)
    if dev.type == "cuda":
        l2 = l2_bytes(dev)
        return {"L2": l2} if l2 else {}
    return _cpu_caches()


def stands_for(dev) -> str:
    """The class of machine a run on ``dev`` (a :class:`~amp_edu.device.DeviceInfo`) stands for:
    the GPU's name, or the CPU class name (:func:`amp_edu.device.cpu_class`), e.g.
    ``"AVX512_CORE"`` for an AVX512_BF16 CPU run under ``ONEDNN_MAX_CPU_ISA=AVX512_CORE``."""
    if dev.device == "cuda":
        return dev.name
    return dev.cpu_class.name if dev.cpu_class is not None else "unknown"


def environment(device: torch.device | str | None = None) -> dict:
    """Everything a benchmark result depends on, as a JSON-ready dict."""
    i = info(device)
    # what amp_edu.device detected (each DeviceInfo field, the CPU's class among them), under the
    # report's names: "device_name" for the name, the compute capability as a JSON list
    detected = i.to_dict()
    detected["device_name"] = detected.pop("name")
    if detected["compute_capability"] is not None:
        detected["compute_capability"] = list(detected["compute_capability"])
    env = {
        **detected,
        "driver_version": _driver_version() if i.device == "cuda" else None,
        "python_version": platform.python_version(),
        "precision_flags": precision_flags(),
        "thread_env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
        "cpu_count": os.cpu_count(),
        # other processes competing for the cores make multi-threaded CPU timings unreliable
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "cache_bytes": cache_sizes(i.device),
        "others_busy_at_start": others_busy(),
        "os": platform.platform(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        # the CPU class this run stands for: the machine's own, or a lower one oneDNN was limited
        # to (ONEDNN_MAX_CPU_ISA limits oneDNN's bf16/fp16 paths only, not fp32 sgemm)
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA"),
        "stands_for": stands_for(i),
    }
    if i.device == "cuda":
        props = torch.cuda.get_device_properties(torch.device(i.device))
        env["gpu_memory_bytes"] = int(props.total_memory)
        env["sm_count"] = int(props.multi_processor_count)
    return env
