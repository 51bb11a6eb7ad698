"""Matmul throughput per dtype, measured the careful way, with each dtype's error.

One measurement is :func:`run_matmul`: random operands (never zeros — a GPU multiplying zeros
draws less power and clocks higher), TF32 switched on or off *explicitly* for the run and restored
afterwards, then :func:`amp_edu.measure.timing.measure` (warm-up, CUDA events or a CPU ``Timer``
with all threads, median and IQR of many repeats). Throughput is ``2·m·k·n / median`` FLOP/s.

The error is the product's relative Frobenius error against float64 applied to the *same fp32
data*: it includes the rounding of the inputs to the dtype, so it is what you give up by running
the matmul in that dtype.

Dtype names follow ``torch.dtype`` (``float32``, ``float16``, ``bfloat16``, ``float8_e4m3fn``),
plus ``tf32``: fp32 storage with TF32 Tensor Core math. fp8 goes through ``torch._scaled_mm``
(per-tensor scales, bf16 output): on a GPU it needs compute capability 8.9+ and dimensions
divisible by 16; torch 2.13 also runs it on a CPU (any shape), where no fp8 units exist and it is
a slow path. Every dtype, fp8 included, is timed the same way (:mod:`amp_edu.measure.timing`).

A dtype the hardware cannot run fast (fp16 — or bf16 — matmul on a CPU without AVX512_FP16 /
AMX units) takes a slow fallback path; :func:`slow_path` names it so the sweep caps its size
instead of running for minutes.
"""

from __future__ import annotations

import torch

from .. import formats
from ..device import DeviceInfo
from . import roofline
from .env import cache_sizes, precision_flags, tf32
from ..measure.timing import measure

__all__ = ["DTYPES", "operands", "fp8_operands", "matmul_fn", "relative_error", "unsupported", "slow_path",
           "fits_in", "result_row", "run_matmul"]

DTYPES = ("float32", "tf32", "float16", "bfloat16", "float8_e4m3fn")
# Storage dtype per bench name (amp_edu.formats names them; tf32 has no dtype: it is stored as float32).
_TORCH = {name: formats.get(name).dtype or torch.float32 for name in DTYPES}
_FP8_MAX = formats.FP8_E4M3.max  # largest finite e4m3fn value, 448


def _check_dtype(dtype: str) -> str:
    if dtype not in _TORCH:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
    return dtype


def _check_shape(shape) -> tuple[int, int, int]:
    if not isinstance(shape, (list, tuple)) or len(shape) != 3:
        raise ValueError(f"shape must be [m, k, n] (A is m×k, B is k×n), got {shape!r}")
    roofline.matmul_flops(*shape)  # validates the three dims
    return tuple(shape)


def operands(shape, *, device="cpu", seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random fp32 ``A`` (m×k) and ``B`` (k×n), standard normal, from a seeded generator."""
    m, k, n = _check_shape(shape)
    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(seed)
    return (torch.randn(m, k, generator=g, device=dev), torch.randn(k, n, generator=g, device=dev))


def _fp8(x: torch.Tensor, column_major: bool):
    scale = (x.abs().amax().float() / _FP8_MAX).clamp(min=1e-12)
    q = (x / scale).to(torch.float8_e4m3fn)
    if column_major:  # _scaled_mm wants its second operand column-major
        q = q.t().contiguous().t()
    return q, scale


def fp8_operands(a: torch.Tensor, b: torch.Tensor):
    """``(qa, scale_a, qb, scale_b)``: ``a`` and ``b`` cast to e4m3 with one per-tensor scale each
    (amax → 448), ``qb`` column-major, as ``torch._scaled_mm(qa, qb, scale_a=..., scale_b=...)``
    takes them; ``q * scale`` is the value each fp8 element stands for."""
    qa, sa = _fp8(a, column_major=False)
    qb, sb = _fp8(b, column_major=True)
    return qa, sa, qb, sb


def matmul_fn(a: torch.Tensor, b: torch.Tensor, dtype: str):
    """``fn()`` computing ``a @ b`` in ``dtype`` on operands cast once, outside the timed call.

    For ``tf32`` the caller must switch TF32 on (:func:`amp_edu.bench.env.tf32`).
    """
    _check_dtype(dtype)
    if dtype == "float8_e4m3fn":
        qa, sa, qb, sb = fp8_operands(a, b)

        def fn():
            out = torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
            return out[0] if isinstance(out, tuple) else out  # torch < 2.4 returned (out, amax)
        return fn
    ca, cb = a.to(_TORCH[dtype]), b.to(_TORCH[dtype])
    return lambda: ca @ cb


def relative_error(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    """``‖c − a·b‖ / ‖a·b‖`` (Frobenius) with ``a·b`` computed in float64."""
    ref = a.double() @ b.double()
    return float((c.double() - ref).norm() / ref.norm())


def unsupported(dtype: str, shape, dev: DeviceInfo) -> str | None:
    """Why ``dtype`` cannot run at ``shape`` on this device, or ``None`` if it can."""
    _check_dtype(dtype)
    if dtype == "tf32":
        if dev.device != "cuda":
            return "TF32 is a Tensor Core input mode of NVIDIA GPUs (compute capability 8.0+); a CPU has none"
        if dev.compute_capability < (8, 0):
            return f"TF32 needs compute capability 8.0+, this GPU has {dev.compute_capability}"
    if dtype == "bfloat16" and dev.device == "cuda" and not dev.bf16_native:
        return "this GPU has no native bf16 (it would be emulated)"
    if dtype == "float8_e4m3fn":
        if dev.device != "cuda":
            return None if _cpu_scaled_mm() else "this torch has no CPU torch._scaled_mm"
        if not dev.fp8:
            return f"fp8 matmul needs compute capability 8.9+, this GPU has {dev.compute_capability}"
        if any(d % 16 for d in shape):
            return "torch._scaled_mm needs every dimension divisible by 16"
    return None


_CPU_SCALED_MM: list[bool] = []


def _cpu_scaled_mm() -> bool:
    """Does this torch run ``torch._scaled_mm`` on a CPU (2.13 does)? Asked once, on 16×16."""
    if not _CPU_SCALED_MM:
        try:
            a, b = operands([16, 16, 16])
            matmul_fn(a, b, "float8_e4m3fn")()
            _CPU_SCALED_MM.append(True)
        except (RuntimeError, NotImplementedError, TypeError):
            _CPU_SCALED_MM.append(False)
    return _CPU_SCALED_MM[0]


def slow_path(dtype: str, dev: DeviceInfo) -> str | None:
    """A label when ``dtype`` matmul is much slower than fp32 here (so the sweep caps its size).

    On a CPU this follows the CPU's class (:func:`amp_edu.device.cpu_class`): bf16 is capped only
    where oneDNN has no bf16 path (below AVX512_CORE, or under ``ONEDNN_MAX_CPU_ISA=AVX2``); an
    AVX512_CORE CPU runs it at 0.5-0.9× fp32 (by size), which is timed at every size."""
    _check_dtype(dtype)
    if dev.device != "cpu":
        return None
    c = dev.cpu_class
    if dtype == "float16" and c is not None and c.fp16.fast is False:
        return f"slow path: {c.name} class has no oneDNN fp16 path (no AVX512_FP16/AMX-FP16), so fp16 matmul is emulated"
    if dtype == "bfloat16" and c is not None and c.bf16.supported is False:
        return f"slow path: {c.name} class has no oneDNN bf16 path (below AVX512_CORE), so bf16 matmul is emulated"
    if dtype == "float8_e4m3fn":
        # aten/src/ATen/native/Blas.cpp, _scaled_mm_out_cpu: oneDNN only with AMX-INT8 and
        # per-tensor scales; otherwise _scaled_mm_out_cpu_emulated (dequantise, fp32 matmul)
        return ("slow path: a CPU has no fp8 matrix units, so torch._scaled_mm dequantises to fp32 "
                "(with AMX-INT8 and per-tensor scales it hands the product to oneDNN)")
    return None


def fits_in(nbytes: int, caches: dict[str, int] | None) -> str | None:
    """The smallest cache level (``"L2"``, ``"L3"``, ...) that holds ``nbytes``, or ``None``."""
    for level, size in sorted((caches or {}).items(), key=lambda kv: kv[1]):
        if nbytes <= size:
            return level
    return None


def result_row(dtype: str, shape, timing, rel_error: float | None = None, *,
               caches: dict[str, int] | None = None, flags: dict | None = None) -> dict:
    """The bench's result row for a timed ``[m, k, n]`` matmul in ``dtype`` (a :class:`Timing`).

    Beside the contract's fields it records how the time was taken (``timing_method``,
    ``calls_per_repeat``, ``cache``: ``"warm"`` or ``"l2 flushed"``; on a CPU ``cpu_share``, the
    share of the time its threads ran on a core), the smallest cache level of
    ``caches`` that holds all three operands (``fits_in``; ``None``: they stream from DRAM) and the
    precision ``flags`` in force while this row was timed.
    """
    _check_dtype(dtype)
    m, k, n = _check_shape(shape)
    flops = roofline.matmul_flops(m, k, n)
    out_dtype = torch.bfloat16 if dtype == "float8_e4m3fn" else None
    nbytes = roofline.matmul_bytes(m, k, n, _TORCH[dtype], out_dtype)
    return {
        "kind": "matmul", "dtype": dtype, "shape": [m, k, n],
        "median_s": timing.median_s, "iqr_s": timing.iqr_s, "n_repeats": timing.n,
        "tflops": flops / timing.median_s / 1e12,
        "flops": flops,
        "bytes": nbytes,
        "intensity": roofline.arithmetic_intensity(m, k, n, _TORCH[dtype], out_dtype),
        "rel_error": rel_error,
        "timing_method": getattr(timing, "method", ""), "calls_per_repeat": getattr(timing, "calls_per_repeat", 1),
        "cache": getattr(timing, "cache", None), "fits_in": fits_in(nbytes, caches),
        "cpu_share": getattr(timing, "cpu_share", None),
        "precision_flags": flags,
    }


def run_matmul(dtype: str, shape, *, device="cpu", repeats: int = 10, min_time_s: float = 0.1,
               warmup: int = 2, error: bool = True, seed: int = 0, flush_l2: bool = False) -> dict:
    """Time one ``[m, k, n]`` matmul in ``dtype`` on its own; returns a result row.

    ``error=False`` skips the float64 reference (it costs a float64 matmul of the same size).
    To compare dtypes, time them side by side instead (:func:`amp_edu.bench.run` does).
    """
    _check_dtype(dtype)
    shape = _check_shape(shape)
    dev = torch.device(device)
    a, b = operands(shape, device=dev, seed=seed)
    fn = matmul_fn(a, b, dtype)
    with tf32(dtype == "tf32"):  # explicit either way, restored afterwards
        t = measure(fn, device=dev, warmup=warmup, repeats=repeats, min_time_s=min_time_s, flush_l2=flush_l2)
        err = relative_error(fn(), a, b) if error else None
        flags = precision_flags()
    return result_row(dtype, shape, t, err, caches=cache_sizes(dev), flags=flags)
