"""Published dense peak throughput of known GPUs — the yardstick for "% of peak".

Vendor datasheets print Tensor Core figures *with* 2:4 structured sparsity in large type; the
dense figure (what an ordinary matmul can reach) is half of it. Every figure below is dense, in
TFLOP/s, with the datasheet it comes from; ``None`` means the GPU has no such mode (a V100 has no
TF32 or bf16 Tensor Cores, a T4 neither). Measured large GEMMs through PyTorch typically reach
80–90 % of these numbers; small ones much less.

A CPU has no entry: lessons compare a CPU's matmuls against its own *measured* fp32 rate instead.

:func:`lookup` finds a GPU by the name ``torch.cuda.get_device_name()`` returns. Variants with
other clocks or memory (H100 PCIe/NVL, H200 NVL, the GH200 superchip) are deliberately not
matched, so that no percentage is computed against the wrong datasheet: an unknown GPU gets no
"% of peak" rather than an invented one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import formats

__all__ = ["GpuPeaks", "KNOWN_GPUS", "lookup", "peak_tflops"]


@dataclass(frozen=True)
class GpuPeaks:
    """Dense peaks (TFLOP/s) of one GPU, its memory bandwidth (GB/s) and the source."""

    name: str
    fp32: float
    tf32: float | None
    fp16: float | None
    bf16: float | None
    fp8: float | None
    bandwidth_gbs: float
    sm_count: int
    source: str


KNOWN_GPUS: dict[str, GpuPeaks] = {
    "V100 SXM2": GpuPeaks("V100 SXM2", 15.7, None, 125.0, None, None, 900.0, 80,
                          "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"),
    "T4": GpuPeaks("T4", 8.1, None, 65.0, None, None, 320.0, 40,
                   "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf"),
    "L4": GpuPeaks("L4", 30.3, 60.0, 121.0, 121.0, 242.0, 300.0, 58,
                   "https://www.nvidia.com/en-us/data-center/l4/ (datasheet: sparse figures halved)"),
    "A100 40GB": GpuPeaks("A100 40GB", 19.5, 156.0, 312.0, 312.0, None, 1555.0, 108,
                          "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"),
    "A100 80GB": GpuPeaks("A100 80GB", 19.5, 156.0, 312.0, 312.0, None, 2039.0, 108,
                          "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"),
    "H100 SXM": GpuPeaks("H100 SXM", 67.0, 494.5, 989.0, 989.0, 1979.0, 3350.0, 132,
                         "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"),
    "H200": GpuPeaks("H200", 67.0, 494.5, 989.0, 989.0, 1979.0, 4800.0, 132,
                     "https://www.nvidia.com/en-us/data-center/h200/"),
}

# (substrings that must all occur, substrings that must not occur, key), first match wins.
_RULES = [
    (("V100", "SXM2"), (), "V100 SXM2"),
    (("T4",), (), "T4"),
    (("L4",), ("L40",), "L4"),
    (("A100", "80GB"), ("PCIE",), "A100 80GB"),
    (("A100",), ("80GB",), "A100 40GB"),
    (("H100",), ("PCIE", "NVL"), "H100 SXM"),
    (("H200",), ("NVL", "GH200"), "H200"),   # GH200 (Grace Hopper) has its own datasheet
]

# The datasheet column for every name of a format amp_edu.formats knows (both fp8s share "fp8").
_DTYPE_FIELD = {k: "fp8" if f.name.startswith("fp8") else f.name
                for f in formats.FORMATS.values() for k in (f.name, f.torch_name)} | {"fp8": "fp8"}


def lookup(device_name: str) -> GpuPeaks | None:
    """The datasheet entry for a GPU name such as ``"NVIDIA H100 80GB HBM3"``, or ``None``."""
    if not isinstance(device_name, str):
        raise TypeError(f"device_name must be a str, got {type(device_name).__name__}")
    up = device_name.upper()
    for need, avoid, key in _RULES:
        if all(s in up for s in need) and not any(s in up for s in avoid):
            # "T4" and "L4" are short: require them as separate words
            if key in ("T4", "L4") and key not in up.replace("-", " ").split():
                continue
            return KNOWN_GPUS[key]
    return None


def peak_tflops(device_name: str, dtype: str) -> float | None:
    """Dense peak TFLOP/s of ``dtype`` (``"float32"``, ``"tf32"``, ``"bfloat16"``, ...) on the GPU
    named ``device_name``; ``None`` when the GPU is unknown or has no such mode."""
    if dtype not in _DTYPE_FIELD:
        raise ValueError(f"unknown dtype {dtype!r}; accepted: {', '.join(sorted(_DTYPE_FIELD))}")
    entry = lookup(device_name)
    return None if entry is None else getattr(entry, _DTYPE_FIELD[dtype])
