"""Stochastic rounding fp32 → bf16: round up with the probability of the distance, so the
*expected* stored value is the exact one.

bf16 keeps the upper 16 bits of an fp32 number (sign, 8 exponent bits, 7 mantissa bits). Rounding
to nearest drops the lower 16 bits and rounds to whichever bf16 neighbour is closer, so an update
smaller than half the gap (half an ulp) is lost *every* time it is applied. Stochastic rounding
instead reads the lower 16 bits as a fraction ``f / 2^16`` of the gap and rounds away from zero with
exactly that probability::

    bits  = x.view(int32)
    trunc = bits & 0xFFFF0000                   # round toward zero: keep the upper 16 bits
    r     = randint(0, 2**16)                   # 16 fresh random bits per element
    out   = trunc + 0x10000 if r < (bits & 0xFFFF) else trunc

``P(round away) = (bits & 0xFFFF) / 2^16``, so ``E[out] = x``: a tiny update moves the weight by a
full ulp once in ``ulp / update`` steps, and on average by exactly the update. The rounding error of
one draw is larger than round-to-nearest's (up to one ulp instead of half), but it is unbiased.

This is the rule torchao uses (``torchao/optim/quant_utils.py``, ``_fp32_to_bf16_sr``, lines
121-162 in torchao 0.18.0) with the same random draw (``torch.randint(0, 1 << 16, shape,
dtype=torch.int32)``), so with the same generator state the two give the same bits.
A ``DTensor`` (an FSDP2 weight) is rounded shard by shard, each rank drawing its own bits, and
comes back as a ``DTensor`` of the same layout, as torchao's does.
Adding 0x10000 to the largest finite bf16 magnitude carries into the exponent and gives inf, as
round-to-nearest does for values that close to the top of the range.
"""

from __future__ import annotations

import torch

from ..scaler.dtensor import is_dtensor, local_tensor

__all__ = ["random_bits", "stochastic_round", "round_up_probability"]


def _check_fp32(x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor of dtype torch.float32, got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise ValueError(f"x must be torch.float32 (the value before rounding), got {x.dtype}")
    return x


def random_bits(shape, *, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
    """16 random bits per element as int32 in ``[0, 2^16)``: the draw torchao makes."""
    return torch.randint(0, 1 << 16, tuple(shape), generator=generator, device=device, dtype=torch.int32)


def stochastic_round(x: torch.Tensor, *, generator: torch.Generator | None = None,
                     rand: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` (float32) rounded to bfloat16 stochastically: away from zero with probability
    (lower 16 bits) / 2^16. ``rand``: the 16-bit draws to use (int32 in ``[0, 2^16)``, ``x``'s
    shape); else they are drawn from ``generator`` (``None``: torch's default generator)."""
    x = _check_fp32(x)
    if is_dtensor(x):                            # FSDP2: round this rank's shard, keep the layout
        from torch.distributed.tensor import DTensor
        if rand is not None:
            rand = local_tensor(rand)
        out = stochastic_round(x.to_local(), generator=generator, rand=rand)
        return DTensor.from_local(out, x.device_mesh, x.placements, run_check=False, shape=x.shape,
                                  stride=x.stride())
    if rand is None:
        rand = random_bits(x.shape, generator=generator, device=x.device)
    elif not isinstance(rand, torch.Tensor) or rand.dtype != torch.int32 or rand.shape != x.shape:
        raise ValueError("rand must be an int32 tensor of x's shape with values in [0, 2**16)")
    bits = x.contiguous().view(torch.int32)
    trunc = bits & -65536                        # 0xFFFF0000 as a signed int32
    up = torch.where(rand < (bits & 0xFFFF), trunc + 0x10000, trunc)
    return up.view(torch.float32).bfloat16()    # exact: the lower 16 bits are 0


def round_up_probability(x: torch.Tensor) -> torch.Tensor:
    """The probability that :func:`stochastic_round` rounds each element away from zero."""
    bits = _check_fp32(x).contiguous().view(torch.int32)
    return (bits & 0xFFFF).double() / 65536.0
