"""Mutants of the exercise solutions that no grader can reject, because they are not wrong.

``tools/mutate.py`` counts a surviving mutant as *equivalent* only when it is claimed here, with
the reason it cannot differ, and the original and the mutant give identical results on every
input of the claim's input set — the return value (or the exception: type and message) and every
argument after the call, compared bit for bit (``-0.0`` is not ``0.0``; NaN is NaN). The input set
is exhaustive where the domain is small, otherwise it holds the inputs on which the change could
matter (the reason says which). The check is rerun on every sweep, so a claim that becomes false
when a solution changes is reported, not trusted.

A claim names its mutant as ``tools/mutate.py --list`` prints it: the answer function, the
line in the solution block, the operator, the original code and its replacement (and its
``(#n)`` when the same change occurs twice on that line).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, Callable

import torch


@dataclasses.dataclass(frozen=True)
class Claim:
    lesson: str
    function: str
    line: int            # line in the solution block, as tools/mutate.py --list prints it
    operator: str
    original: str
    replacement: str
    reason: str
    inputs: Callable[[], list[tuple[tuple, dict]]]    # (args, kwargs) of each call to compare
    nth: int = 1         # the (#n) that --list prints after a repeated mutant


def identical(a: Any, b: Any) -> bool:
    """Same type and the same value to the last bit, recursively (NaN equal to NaN, -0.0 not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
            return False
        if a.is_floating_point() and a.element_size() in (2, 4, 8):
            from amp_edu.checks.core import same_bits
            return same_bits(a, b)
        return bool(torch.equal(a, b))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, BaseException):
        return str(a) == str(b)
    return a == b


def outcome(fn: Callable, args: tuple, kwargs: dict) -> tuple:
    """(result or exception, the arguments after the call) of ``fn`` on a deep copy of its inputs."""
    args, kwargs = copy.deepcopy((args, kwargs))
    try:
        result = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare
        result = exc
    return result, args, kwargs


def verify(claim: Claim, original: Callable, mutant: Callable) -> tuple[bool, str]:
    """Do ``original`` and ``mutant`` agree on every input of ``claim``?"""
    cases = claim.inputs()
    for args, kwargs in cases:
        want, got = outcome(original, args, kwargs), outcome(mutant, args, kwargs)
        if not identical(want, got):
            return False, f"differs on args={args!r:.200} kwargs={kwargs!r:.100}: {want[0]!r:.100} vs {got[0]!r:.100}"
    return True, f"identical on {len(cases)} inputs"


CLAIMS: list[Claim] = []
