"""What this machine can do, and how big the course's experiments should be here.

Mixed precision pays off only where the hardware has fast low-precision units:

* NVIDIA GPUs have **Tensor Cores** from Volta (compute capability 7.0) on: fp16 there,
  bf16 and tf32 from Ampere (8.0), fp8 from Ada/Hopper (8.9 / 9.0).
* ``torch.cuda.is_bf16_supported()`` says True on a T4 (7.5) because bf16 *runs* there through
  emulation; we ask ``including_emulation=False`` to learn whether it runs *natively*.
* CPUs run bf16 matmuls fast with AVX512_BF16 or AMX, fp16 with AVX512_FP16 or AMX-FP16;
  without them fp16 matmul falls back to a slow path (pytorch/pytorch#146508).

The course runs everywhere: :func:`pick_device` takes CUDA when present, else the CPU, and
:func:`pick` chooses problem sizes for the mode — ``AMP_EDU_SMOKE=1`` (set by the tests) shrinks
everything so a notebook runs in seconds; otherwise sizes suit a laptop CPU or, larger, a GPU.
"""

from __future__ import annotations

import contextlib
import os
import platform
from dataclasses import asdict, dataclass, field

import torch

from .validate import check_int

__all__ = ["DeviceInfo", "is_smoke", "pick_device", "pick", "info", "setup_line", "report", "cpu_flags",
           "num_threads"]

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


_CPU_FLAG_NAMES = {
    "avx2": "avx2",
    "avx512f": "avx512f",
    "avx512_bf16": "avx512_bf16",
    "avx512_fp16": "avx512_fp16",
    "amx_bf16": "amx_bf16",
    "amx_fp16": "amx_fp16",
    "amx_tile": "amx_tile",
    "f16c": "f16c",
}


def cpu_flags() -> dict[str, bool]:
    """The CPU instruction-set flags that matter for low precision (Linux ``/proc/cpuinfo``).

    On other systems the flags are unknown and all reported False.
    """
    found: set[str] = set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    found = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    return {name: flag in found for name, flag in _CPU_FLAG_NAMES.items()}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass
class DeviceInfo:
    """A snapshot of what the device can do for mixed precision."""

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

    @property
    def cpu_bf16_fast(self) -> bool:
        """bf16 matmul has hardware support on this CPU (AVX512_BF16 or AMX-BF16)."""
        return self.cpu_flags.get("avx512_bf16", False) or self.cpu_flags.get("amx_bf16", False)

    @property
    def cpu_fp16_fast(self) -> bool:
        """fp16 matmul has hardware support on this CPU (AVX512_FP16 or AMX-FP16)."""
        return self.cpu_flags.get("avx512_fp16", False) or self.cpu_flags.get("amx_fp16", False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cpu_bf16_fast"] = self.cpu_bf16_fast
        d["cpu_fp16_fast"] = self.cpu_fp16_fast
        return d


def info(device: torch.device | str | None = None) -> DeviceInfo:
    """Describe ``device`` (default: :func:`pick_device`)."""
    dev = torch.device(device) if device is not None else pick_device()
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be a cpu or cuda device, got {dev}")
    common = dict(
        torch_version=torch.__version__,
        threads=torch.get_num_threads(),
        smoke=is_smoke(),
        cpu_model=_cpu_model(),
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        cpu_flags=cpu_flags(),
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


def setup_line(device: torch.device | str | None = None) -> str:
    """The one line every lesson's setup cell prints: device, low-precision support, mode."""
    i = info(device)
    mode = "smoke (tiny sizes)" if i.smoke else "full"
    if i.device == "cuda":
        cc = ".".join(map(str, i.compute_capability))
        support = (f"sm_{cc}, Tensor Cores {'yes' if i.tensor_cores else 'no'}, "
                   f"native bf16 {'yes' if i.bf16_native else 'no'}, fp8 {'yes' if i.fp8 else 'no'}")
    else:
        support = (f"{i.threads} threads, {i.cpu_capability}, fast bf16 {'yes' if i.cpu_bf16_fast else 'no'}, "
                   f"fast fp16 {'yes' if i.cpu_fp16_fast else 'no'}")
    return f"device: {i.device} ({i.name}) | {support} | torch {i.torch_version} | mode: {mode}"


def report(device: torch.device | str | None = None) -> str:
    """A multi-line report of :func:`info`, printed by ``python -m amp_edu doctor``."""
    i = info(device)
    yn = lambda b: "yes" if b else "no"  # noqa: E731
    lines = [
        f"torch {i.torch_version} on Python {platform.python_version()}",
        f"device            {i.device}: {i.name}",
        f"mode              {'smoke (AMP_EDU_SMOKE=1)' if i.smoke else 'full'}",
        f"CPU               {i.cpu_model} ({i.threads} threads, ATen kernels {i.cpu_capability})",
        f"CPU bf16 units    {yn(i.cpu_bf16_fast)} (avx512_bf16 {yn(i.cpu_flags.get('avx512_bf16'))}, "
        f"amx_bf16 {yn(i.cpu_flags.get('amx_bf16'))})",
        f"CPU fp16 units    {yn(i.cpu_fp16_fast)} (avx512_fp16 {yn(i.cpu_flags.get('avx512_fp16'))}, "
        f"amx_fp16 {yn(i.cpu_flags.get('amx_fp16'))}, f16c converts only: {yn(i.cpu_flags.get('f16c'))})",
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
