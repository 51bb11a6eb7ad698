"""Bit-level comparison of two results: how many units in the last place apart, and where.

Two floats of one format are ``k`` ulps apart when ``k - 1`` representable numbers lie between
them. Reading the bits as integers makes that a subtraction: for a format with a sign bit, map
each bit pattern ``b`` to ``b`` when the sign is clear and to ``-(b without its sign)`` when it is
set; consecutive floats then map to consecutive integers (and +0 and -0 both to 0), so the
distance is the difference of the mapped integers. This is how "compiled differs from eager by one
ulp in 3% of the outputs" is measured, format-independently (bf16's ulp is 2^-7 of a value's power
of two, fp32's 2^-23).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["ulp_distance", "UlpReport", "compare_bits"]

_INT = {torch.float32: (torch.int32, 31), torch.bfloat16: (torch.int16, 15), torch.float16: (torch.int16, 15),
        torch.float64: (torch.int64, 63)}


def _ordered(t: torch.Tensor) -> torch.Tensor:
    itype, sign_bit = _INT[t.dtype]
    b = t.contiguous().view(itype).to(torch.int64)
    magnitude = b & ((1 << sign_bit) - 1)
    return torch.where(b < 0, -magnitude, magnitude)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise distance in ulps between two tensors of the same float dtype and shape
    (int64; NaN anywhere is an error: compare finite results)."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError(f"a and b must be tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.dtype != b.dtype or a.shape != b.shape:
        raise ValueError(f"a and b must share dtype and shape, got {a.dtype}{tuple(a.shape)} and {b.dtype}{tuple(b.shape)}")
    if a.dtype not in _INT:
        raise ValueError(f"dtype must be one of {', '.join(str(d) for d in _INT)}, got {a.dtype}")
    if bool(a.isnan().any() | b.isnan().any()):
        raise ValueError("a or b holds NaN; ulp distance is defined for numbers")
    return (_ordered(a.detach()) - _ordered(b.detach())).abs()


@dataclass
class UlpReport:
    """Summary of :func:`ulp_distance`: how many elements differ, the largest distance, and where."""

    n: int
    differ: int
    max_ulps: int
    worst_index: tuple
    histogram: dict

    @property
    def fraction(self) -> float:
        return self.differ / self.n if self.n else 0.0

    def sentence(self, what: str = "outputs") -> str:
        if not self.differ:
            return f"all {self.n} {what} are bit-identical"
        shown = [(k, v) for k, v in sorted(self.histogram.items()) if k]
        hist = ", ".join(f"{k} ulp: {v}" for k, v in shown[:4]) + (f", … ({len(shown) - 4} more distances)" if len(shown) > 4 else "")
        return (f"{self.differ} of {self.n} {what} ({self.fraction:.1%}) differ, by at most {self.max_ulps} ulp "
                f"(at index {self.worst_index}); {hist}")


def compare_bits(a: torch.Tensor, b: torch.Tensor) -> UlpReport:
    """Compare two results bit for bit (see :func:`ulp_distance`)."""
    d = ulp_distance(a, b)
    flat = d.flatten()
    worst = int(flat.argmax()) if flat.numel() else 0
    idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), d.shape)) if d.dim() else ()
    values, counts = torch.unique(flat, return_counts=True)
    return UlpReport(n=flat.numel(), differ=int((flat > 0).sum()), max_ulps=int(flat.max()) if flat.numel() else 0,
                     worst_index=idx, histogram={int(v): int(c) for v, c in zip(values, counts)})
