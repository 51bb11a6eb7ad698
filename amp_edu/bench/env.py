"""What a benchmark result depends on, recorded with it — and the TF32 switch, set explicitly.

A matmul "in fp32" on an Ampere-or-later GPU may silently run in **TF32** (fp32 inputs rounded to
10 mantissa bits on Tensor Cores, ~8× faster): PyTorch turned matmul TF32 *off* by default in 1.12
(convolutions keep it on), but a script may switch it on, and NVIDIA's containers may set
``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` which forces it on whatever the flag says
(``NVIDIA_TF32_OVERRIDE=0`` forces it off in cuBLAS/cuDNN). A result is only meaningful with these
settings next to it, so :func:`environment` records them, with the device, driver, CUDA, torch,
CPU model and instruction flags, threads and the date.

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
import time

import torch

from ..device import info

__all__ = ["tf32_enabled", "tf32", "tf32_override", "precision_flags", "others_busy", "environment"]

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


def precision_flags() -> dict:
    """The process-wide switches that change what an fp32/fp16/bf16 matmul computes."""
    m = torch.backends.cuda.matmul
    flags = {
        "matmul_tf32": tf32_enabled(),
        "cudnn_tf32": _safe(lambda: bool(torch.backends.cudnn.allow_tf32)),
        "float32_matmul_precision": _safe(torch.get_float32_matmul_precision),
        "fp16_reduced_precision_reduction": _safe(lambda: bool(m.allow_fp16_reduced_precision_reduction)),
        "bf16_reduced_precision_reduction": _safe(lambda: bool(m.allow_bf16_reduced_precision_reduction)),
        "mkldnn_enabled": bool(torch.backends.mkldnn.is_available()),
    }
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


def _busy_jiffies() -> tuple[int, int] | None:
    try:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def others_busy(window_s: float = 0.25) -> float | None:
    """Fraction of all cores that *other* processes kept busy during a short idle wait (Linux).

    This process sleeps for ``window_s`` while ``/proc/stat`` counts busy time on every core, so
    whatever was busy was someone else. Near 0 on a quiet machine; on a shared one, a CPU
    benchmark's multi-threaded timings are only trustworthy when it is small.
    """
    a = _busy_jiffies()
    if a is None:
        return None
    time.sleep(window_s)
    b = _busy_jiffies()
    total = b[1] - a[1]
    return round((b[0] - a[0]) / total, 3) if total > 0 else None


def environment(device: torch.device | str | None = None) -> dict:
    """Everything a benchmark result depends on, as a JSON-ready dict."""
    i = info(device)
    env = {
        "device": i.device,
        "device_name": i.name,
        "compute_capability": list(i.compute_capability) if i.compute_capability else None,
        "tensor_cores": i.tensor_cores,
        "bf16_native": i.bf16_native,
        "fp8": i.fp8,
        "cuda_version": i.cuda_version,
        "driver_version": _driver_version() if i.device == "cuda" else None,
        "torch_version": i.torch_version,
        "python_version": platform.python_version(),
        "precision_flags": precision_flags(),
        "cpu_model": i.cpu_model,
        "cpu_capability": i.cpu_capability,
        "cpu_flags": i.cpu_flags,
        "cpu_bf16_fast": i.cpu_bf16_fast,
        "cpu_fp16_fast": i.cpu_fp16_fast,
        "threads": i.threads,
        "thread_env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
        "cpu_count": os.cpu_count(),
        # other processes competing for the cores make multi-threaded CPU timings unreliable
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "others_busy_at_start": others_busy(),
        "os": platform.platform(),
        "smoke": i.smoke,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if i.device == "cuda":
        props = torch.cuda.get_device_properties(torch.device(i.device))
        env["gpu_memory_bytes"] = int(props.total_memory)
        env["sm_count"] = int(props.multi_processor_count)
    return env
