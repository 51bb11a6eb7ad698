"""Argument checks with one wording, so bad input fails early with a message that says what fits.

Python's ``bool`` is a subclass of ``int`` (``isinstance(True, int)`` is True), so a bare
``isinstance(n, int)`` lets ``True`` through as 1 — and an int check that forgets it passes a
flag to torch, which fails far away with an unrelated error. These helpers refuse ``bool``
wherever a number is meant, accept numpy integer scalars (``numbers.Integral``), and raise
``TypeError`` for the wrong type and ``ValueError`` for a value out of range, naming the argument::

    batch = check_int(batch, "batch_size", min=1)       # TypeError for True or 2.0, ValueError for 0
    lr = check_number(lr, "lr", positive=True)
"""

from __future__ import annotations

import math
import numbers

__all__ = ["check_int", "check_number", "check_bool"]


def check_int(value, name: str, *, min: int | None = None, max: int | None = None) -> int:
    """``value`` as an ``int`` if it is an integer (not a bool) in ``[min, max]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):   # numpy ints are Integral
        raise TypeError(f"{name} must be an int{_range(min, max)}, got {value!r} ({type(value).__name__})")
    v = int(value)
    if (min is not None and v < min) or (max is not None and v > max):
        raise ValueError(f"{name} must be an int{_range(min, max)}, got {v}")
    return v


def check_number(value, name: str, *, min: float | None = None, max: float | None = None,
                 positive: bool = False, finite: bool = True) -> float:
    """``value`` as a ``float`` if it is a real number (not a bool): finite unless ``finite=False``,
    ``> 0`` if ``positive``, in ``[min, max]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number (int or float), got {value!r} ({type(value).__name__})")
    v = float(value)
    if math.isnan(v) or (finite and math.isinf(v)):
        raise ValueError(f"{name} must be a finite number, got {v}")
    if positive and not v > 0:
        raise ValueError(f"{name} must be > 0, got {v:g}")
    if (min is not None and v < min) or (max is not None and v > max):
        raise ValueError(f"{name} must be a number{_range(min, max)}, got {v:g}")
    return v


def check_bool(value, name: str) -> bool:
    """``value`` if it is ``True`` or ``False`` (not 0/1, not None)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return value


def _range(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f" in {lo:g}..{hi:g}" if isinstance(lo, float) or isinstance(hi, float) else f" in {lo}..{hi}"
    if lo is not None:
        return {0: " >= 0", 1: " >= 1 (a positive int)"}.get(lo, f" >= {lo:g}")
    if hi is not None:
        return f" <= {hi:g}"
    return ""
