"""Graders for lesson 07 (memory): predict saved-activation bytes, then the largest batch.

The expected values are *measured*: the grader builds the model (:func:`amp_edu.memory.relu_mlp`),
runs its forward under autocast and counts what autograd saves (:func:`amp_edu.memory.saved_bytes`,
parameters excluded). Cases cover fp32 and both 16-bit dtypes, one layer and several, batch 1
(where weight copies dominate) and large batches, then widths, batches, dtypes and budgets drawn
from the seed; a failure names the likely slip. Every case is plain numbers, a list of widths and a
dtype: the generic plan :func:`amp_edu.plans.runner.each` calls the learner's function on each.
"""

from __future__ import annotations

import functools

import torch

from .. import memory
from ..plans.runner import each
from .core import Check, judge_each, same

__all__ = ["check_predict_saved_bytes", "check_predict_largest_batch"]

_DTYPES = (torch.bfloat16, torch.float32, torch.float16)

_CASES = [
    ([16, 32, 8], 4, torch.bfloat16),
    ([16, 32, 8], 4, torch.float32),
    ([10, 24, 24, 3], 1, torch.float16),
    ([10, 24, 24, 3], 32, torch.float16),
    ([7, 5], 9, torch.bfloat16),
    ([7, 5], 9, torch.float32),
    ([12, 40, 6, 20, 4], 3, torch.bfloat16),
    ([12, 40, 6, 20, 4], 17, torch.float32),
]


def measured_saved_bytes(widths, batch, dtype) -> int:
    """Bytes autograd saves for ``relu_mlp(widths)`` on a ``batch``, under autocast for 16-bit dtypes."""
    return _measured(tuple(widths), batch, dtype)


@functools.lru_cache(maxsize=256)
def _measured(widths: tuple, batch: int, dtype) -> int:
    return memory.relu_mlp_saved_bytes(list(widths), batch, dtype)


def _line(widths, dtype) -> tuple[int, int]:
    """``(fixed, per_sample)`` of :func:`amp_edu.memory.relu_mlp_line`, from the same measurements."""
    one, two = measured_saved_bytes(widths, 1, dtype), measured_saved_bytes(widths, 2, dtype)
    return 2 * one - two, two - one


def _randint(g: torch.Generator, lo: int, hi: int) -> int:
    """An int in [lo, hi) drawn from ``g``."""
    return int(torch.randint(lo, hi, (1,), generator=g))


def _drawn_widths(g: torch.Generator) -> list[int]:
    return [_randint(g, 1, 49) for _ in range(_randint(g, 2, 6))]


def _drawn_saved(seed: int, n: int = 4) -> list[tuple]:
    """``n`` cases drawn from ``seed``: 2-5 widths of 1 .. 48, a batch of 1 .. 40, any of the dtypes."""
    g = torch.Generator().manual_seed(seed)
    return [(_drawn_widths(g), _randint(g, 1, 41), _DTYPES[_randint(g, 0, len(_DTYPES))]) for _ in range(n)]


def _saved_cases(seed: int) -> list[tuple]:
    return _CASES + _drawn_saved(seed)


def _slips(widths, batch, dtype):
    """Values that plausible mistakes produce, with the hint for each."""
    amp = dtype != torch.float32
    s = dtype.itemsize
    hidden = sum(widths[1:-1])
    copies = lambda first=False: sum(widths[i] * widths[i + 1] for i in range(0 if first else 1, len(widths) - 1))  # noqa: E731
    base_acts = batch * (widths[0] + hidden)
    right_copies = copies() * s if amp else 0
    return {
        "under autocast the saved tensors are 16-bit copies: 2 bytes per element, not 4":
            base_acts * 4 + copies() * 4 * amp,
        "autocast keeps a low-precision copy of each weight it multiplies by, and backward needs it":
            base_acts * s,
        "the first Linear's input needs no gradient, so its weight (copy) is not saved":
            base_acts * s + copies(True) * s * amp,
        "a ReLU's output is also the next Linear's input: one storage, count it once":
            base_acts * s + batch * hidden * s + right_copies,
        "the input x is saved too (as a cast copy under autocast): the first Linear needs it for its weight gradient":
            batch * hidden * s + right_copies,
        "parameters are not saved activations: in fp32 the saved weight IS the parameter, already in memory":
            base_acts * s + copies() * 4,
        "the last Linear's output is not saved (nothing after it needs it for backward)":
            base_acts * s + batch * widths[-1] * s + right_copies,
    }


def _saved_hint(case, expected, got):
    for hint, value in _slips(*case).items():
        if got == value and value != expected:
            return hint
    return ("count, per unique storage: the input x, each hidden ReLU output, and under autocast a 16-bit "
            "copy of every weight after the first; nothing else (no parameters, no biases, no final output)")


def _same_number(got, expected) -> bool:
    """The same number as an int (or a float of the same value); never a bool or a tensor."""
    return type(got) in (int, float) and same(got, expected)


def _judge_saved(cases, result) -> str:
    return judge_each("predict_saved_bytes", cases, result, measured_saved_bytes, hint=_saved_hint,
                      compare=_same_number)


check_predict_saved_bytes = Check("predict_saved_bytes", cases=_saved_cases, plan=each, judge=_judge_saved,
                                  echo=True)
"""``fn(widths, batch, dtype)`` must return the saved bytes of ``relu_mlp(widths)`` on ``batch``
inputs — under ``torch.autocast(dtype)`` for float16/bfloat16, plain for float32."""


def _largest(widths, dtype, budget):
    fixed, per_sample = _line(widths, dtype)
    return memory.largest_batch(budget, fixed, per_sample)


def _largest_hint(case, expected, got):
    widths, dtype, budget = case
    fixed, per_sample = _line(widths, dtype)
    if type(got) in (int, float):
        if got == budget // per_sample:
            return "the weight copies take memory too, whatever the batch: subtract them from the budget first"
        if got < 0 and expected == 0:
            return (f"here the fixed bytes alone ({fixed:g}, the weight copies) exceed the budget ({budget}): "
                    "no batch fits, so the answer is 0, not the negative floor((budget − fixed) / per_sample)")
        if got < 0:
            return ("a batch size cannot be negative: subtract the fixed bytes from the budget, "
                    "floor((budget − fixed) / per_sample), not the other way round")
        if got != int(got):
            return "a batch size is a whole number: return an int (floor of the division)"
        if got in (round((budget - fixed) / per_sample), -(-(budget - fixed) // per_sample)) and got != expected:
            return "round down: a batch one larger than fits does not fit"
    return "largest B with fixed + B·per_sample <= budget: B = floor((budget − fixed) / per_sample), at least 0"


_LARGEST_CASES = [([16, 32, 8], torch.bfloat16, 10_000), ([10, 24, 24, 3], torch.float16, 4_000),
                  ([10, 24, 24, 3], torch.float16, 1_000), ([10, 24, 24, 3], torch.float32, 55_000),
                  ([12, 40, 6, 20, 4], torch.bfloat16, 2_330), ([7, 5], torch.float32, 27)]


def _drawn_largest(seed: int, n: int = 3) -> list[tuple]:
    """``n`` cases drawn from ``seed``: 2-5 widths of 1 .. 48, any of the dtypes, a budget of
    0 .. 2^k bytes, k = 6 .. 16 (below the weight copies alone at times: then 0 fits)."""
    g = torch.Generator().manual_seed(seed + 1)
    return [(_drawn_widths(g), _DTYPES[_randint(g, 0, len(_DTYPES))], _randint(g, 0, 2 ** _randint(g, 6, 17) + 1))
            for _ in range(n)]


def _largest_cases(seed: int) -> list[tuple]:
    return _LARGEST_CASES + _drawn_largest(seed)


def _judge_largest(cases, result) -> str:
    return judge_each("predict_largest_batch", cases, result, _largest, hint=_largest_hint, compare=_same_number)


check_predict_largest_batch = Check("predict_largest_batch", cases=_largest_cases, plan=each,
                                    judge=_judge_largest, echo=True)
"""``fn(widths, dtype, budget_bytes)`` must return the largest batch whose saved bytes fit."""
