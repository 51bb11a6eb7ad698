"""What a narrow GEMM accumulator costs: fp8 products summed with fewer bits than float32 keeps.

The products of two fp8 values are exact in float32 (at most 4 × 4 significant bits), so all of
an fp8 GEMM's error beyond the casts comes from *adding* them up. ``torch._scaled_mm`` is said to
"accumulate in fp32", but with ``use_fast_accum=True`` (which torchao sets for the forward GEMM,
``Float8LinearConfig.gemm_config_output``) Hopper's fp8 Tensor Cores keep only about 14 bits of
the running sum (DeepSeek-V3 technical report, arXiv:2412.19437, section 3.3.2, measured on
H800; it reports a maximum relative error of nearly 2% for K = 4096). DeepSeek-V3's fix: every 128 elements
of K, the partial sum is promoted into a float32 accumulator on the CUDA cores.

:func:`narrow_accumulate_mm` emulates both on a CPU: the running sum is rounded to
``significand_bits`` (14 by default: 13 stored mantissa bits and the implicit one) after every
addition, to nearest (ties to even) or truncated toward zero, and with ``promote_every=n`` each
chunk of ``n`` products is summed narrowly and then added in float32. The real hardware's
rounding is not documented, so the emulation shows both: nearest rounding errs like a random
walk (grows as sqrt(K)), truncation errs in one direction (grows as K), and the measured errors
estimate the mechanism, not a particular GPU.
"""

from __future__ import annotations

import torch

from ..validate import check_int

__all__ = ["ACCUMULATOR_ROUNDINGS", "round_significand", "narrow_accumulate_mm"]


#: How the narrow running sum is rounded after each addition (the hardware's rule is undocumented).
ACCUMULATOR_ROUNDINGS = ("nearest", "truncate")


def round_significand(x: torch.Tensor, significand_bits: int, rounding: str = "nearest") -> torch.Tensor:
    """float32 ``x`` rounded to ``significand_bits`` significant bits: to nearest (ties to even)
    or truncated (toward zero)."""
    bits = check_int(significand_bits, "significand_bits", min=1, max=24)
    if rounding not in ACCUMULATOR_ROUNDINGS:
        raise ValueError(f"rounding must be one of {ACCUMULATOR_ROUNDINGS}, got {rounding!r}")
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise TypeError("x must be a float32 tensor")
    drop = 24 - bits
    if drop == 0:
        return x
    i = x.view(torch.int32)
    mask = ~((1 << drop) - 1)
    if rounding == "truncate":
        rounded = i & mask
    else:
        rounded = (i + ((1 << (drop - 1)) - 1) + ((i >> drop) & 1)) & mask
    return torch.where(torch.isfinite(x), rounded.view(torch.float32), x)


def narrow_accumulate_mm(a: torch.Tensor, b: torch.Tensor, significand_bits: int = 14,
                         promote_every: int | None = None, rounding: str = "nearest") -> torch.Tensor:
    """``a @ b`` (float32 operands, e.g. dequantized fp8) with a narrow running sum over K.

    ``promote_every=None``: one narrow accumulator over all of K; ``n``: the narrow sum restarts
    every ``n`` elements and each partial sum is added to a float32 total (DeepSeek-V3: 128).
    """
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dim() != 2 or b.dim() != 2 \
            or a.shape[1] != b.shape[0]:
        raise ValueError("narrow_accumulate_mm needs matrices (m, k) @ (k, n)")
    k = a.shape[1]
    every = k if promote_every is None else check_int(promote_every, "promote_every", min=1)
    a, b = a.float(), b.float()
    total = torch.zeros(a.shape[0], b.shape[1])
    part = torch.zeros_like(total)
    for i in range(k):
        part = round_significand(part + a[:, i:i + 1] * b[i:i + 1, :], significand_bits, rounding)
        if (i + 1) % every == 0 or i == k - 1:
            total += part
            part = torch.zeros_like(total)
    return total
