"""The code books of block-wise quantized optimizer states: which float each code stands for.

A quantized state stores, per element, a small integer *code*, and per block of elements one fp32
*scale* (the block's largest magnitude). An element's value is ``qmap[code] * scale``. The map
decides where the precision goes:

* :func:`dynamic_map` — bitsandbytes' "dynamic" (tree) map (Dettmers et al. 2021, arXiv:2110.02861;
  after Dettmers 2015, arXiv:1511.04561): a code is a sign bit, a run of zeros that acts as a
  decimal exponent (0.1, 0.01, ... down to 10^-(E-1)), an indicator bit, and the remaining bits
  as a linear fraction. Small magnitudes get many codes, as Adam's moments need. 8 bits: 256
  values in [-1, 1] (signed, for the first moment) or [0, 1] (unsigned, for the second).
  torchao builds it with bitsandbytes' ``create_dynamic_map`` minus the zero padding
  (``torchao/optim/quant_utils.py`` lines 11-61); this module writes the same construction.
* :func:`linear_map` — 16 evenly spaced values 1/16, 2/16, ..., 1 (no zero): the map of the
  4-bit second moment in torchao's ``AdamW4bit`` (``subclass_4bit.py`` lines 26-41), after Li et
  al. 2023 ("Memory Efficient Optimizers with 4-bit States", arXiv:2309.01507) — who normalise
  the second moment rank-1 (per row and column), where torchao scales blocks of 128 values. Zero
  is left out on purpose: a second moment quantized to 0 would divide the update by eps alone.
* the 4-bit first moment uses :func:`dynamic_map` with 3 exponent bits and 4 bits in total.

fp8 states (``AdamWFp8``) need no map: the code is the e4m3 number itself.

The maps are built in fp32 whatever ``torch.get_default_dtype()`` is. torchao's
``create_dynamic_map`` uses the default dtype (``torch.linspace``) and caches the first result
(``get_qmap_signed``, ``lru_cache``), so a process whose first torchao optimizer is made under
``torch.set_default_dtype(torch.bfloat16)`` keeps a slightly different map; the tests fill its
cache in fp32 first.
"""

from __future__ import annotations

import functools

import torch

from ..validate import check_bool, check_int

__all__ = ["dynamic_map", "linear_map", "nearest_code"]


@functools.lru_cache(maxsize=None)
def _dynamic_values(signed: bool, exponent_bits: int, total_bits: int) -> tuple[float, ...]:
    data: list[float] = []
    non_sign = total_bits - 1
    extra = 2 ** (non_sign - exponent_bits) - 1   # codes whose exponent bits are all zero
    for i in range(exponent_bits):
        n = 2 ** (i + non_sign - exponent_bits) + 1 if signed else 2 ** (i + non_sign - exponent_bits + 1) + 1
        edges = torch.linspace(0.1, 1, n, dtype=torch.float32)
        means = (edges[:-1] + edges[1:]) / 2.0      # the fraction values: mid-points of a linear grid
        decade = 10 ** (-(exponent_bits - 1) + i)
        data += (decade * means).tolist()
        if signed:
            data += (-decade * means).tolist()
    if extra > 0:
        edges = torch.linspace(0.1, 1, extra + 1, dtype=torch.float32)
        means = (edges[:-1] + edges[1:]) / 2.0
        decade = 10 ** (-(exponent_bits - 1) + exponent_bits - 1)
        data += (decade * means).tolist()
        if signed:
            data += (-decade * means).tolist()
    data += [0.0, 1.0]
    if len(data) != 2 ** total_bits:
        raise ValueError(f"a dynamic map with {exponent_bits} exponent bits does not fill {total_bits} bits")
    return tuple(sorted(data))


def dynamic_map(signed: bool = True, exponent_bits: int = 7, total_bits: int = 8) -> torch.Tensor:
    """The dynamic map's ``2**total_bits`` values, sorted, as float32 (a new tensor each call)."""
    check_bool(signed, "signed")
    total_bits = check_int(total_bits, "total_bits", min=2, max=8)
    exponent_bits = check_int(exponent_bits, "exponent_bits", min=1, max=total_bits - 1)
    return torch.tensor(_dynamic_values(signed, exponent_bits, total_bits), dtype=torch.float32)


def linear_map(levels: int = 16) -> torch.Tensor:
    """``levels`` evenly spaced values ``1/levels, ..., 1`` (no zero) as float32."""
    levels = check_int(levels, "levels", min=2)
    return torch.linspace(0, 1, levels + 1, dtype=torch.float32)[1:].clone()   # its own storage


def nearest_code(x: torch.Tensor, qmap: torch.Tensor) -> torch.Tensor:
    """The code of the map value nearest to each element of ``x`` (already divided by its block's
    scale), as uint8. A value exactly half-way between two map values takes the upper one; values
    below the map's first entry take code 0.

    torchao finds the code with a branchless binary search (``quant_utils.py`` lines 75-112: the
    largest code with ``qmap[code] <= x``, one bit per comparison), then rounds up when
    ``x - qmap[code] >= gap * 0.5``. ``torch.searchsorted`` finds the same code in one call, and
    the rounding is the same comparison, so the codes are equal for every number (a NaN gets
    another code here, but its block's scale is NaN too, so it dequantizes to NaN either way).
    """
    n = qmap.numel()
    low = (torch.searchsorted(qmap, x, right=True) - 1).clamp_(min=0)   # largest code with qmap[c] <= x
    up = (low + 1).clamp_(max=n - 1)
    val_low, val_up = qmap[low], qmap[up]
    codes = torch.where(x - val_low >= (val_up - val_low) * 0.5, up, low)
    return codes.to(torch.uint8)
