"""What the machine can do for mixed precision, in one snapshot and in the lines lessons print.

:func:`info` gathers a :class:`DeviceInfo`: the GPU's compute capability and what it has natively
(Tensor Cores, bf16, fp8), or the CPU's model, threads, ATen kernels, instruction-set flags and
class (:mod:`.cpu_classes`). :func:`setup_line` is the line every lesson's setup cell prints,
:func:`provenance_line` its second half (where stored outputs were produced), and :func:`report`
the longer text of ``python -m amp_edu doctor``.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field

import torch

from .cpu_classes import CpuClass, cpu_class
from .cpu_features import CpuFeatures, cpu_flags, read_cpu_features
from .sizes import is_smoke, pick_device

__all__ = ["DeviceInfo", "info", "setup_line", "provenance_line", "report"]


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
