"""Exercise 05, part A: ``is_eligible(t, device_type)`` -- would autocast cast ``t`` at all?

The cases: a tensor of each kind a nearly-right answer gets wrong -- float32, bf16, fp16, float64,
integer, bool, complex, fp8, a parameter, a tensor on another device (``cuda`` asked about a CPU
tensor, a ``meta`` tensor), numbers and None -- then tensors of a drawn dtype, shape and kind, each
asked about a drawn device type. The reference is :func:`amp_edu.autocast.policy.is_eligible`.
"""

from __future__ import annotations

import torch

from ...autocast.policy import is_eligible
from ...plans import l05 as plan
from ...plans.l05 import build, meta_spec
from ..core import SELF_CHECK_SEED, Check, fail, returned

__all__ = ["check_is_eligible", "described"]

BF16, FP16, FP32, FP64 = torch.bfloat16, torch.float16, torch.float32, torch.float64


def described(t) -> str:
    """A tensor as a failure message names it: its shape, dtype and device (the values are drawn)."""
    if isinstance(t, torch.Tensor):
        return f"tensor(shape={tuple(t.shape)}, dtype={t.dtype}, device={t.device.type})"
    return repr(t)


_DRAWN_DTYPES = (FP32, BF16, FP16, FP64, torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64,
                 torch.float8_e4m3fn, torch.float8_e5m2)
_FLOATS = (FP32, BF16, FP16, FP64)


def _drawn_eligibility(seed: int, n: int = 8) -> list[tuple]:
    """``n`` tensors of a drawn dtype, shape and kind (plain, a parameter, on the meta device),
    each asked about a drawn device type."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        dtype = _DRAWN_DTYPES[int(torch.randint(len(_DRAWN_DTYPES), (), generator=g))]
        shape = [int(v) for v in torch.randint(1, 4, (int(torch.randint(1, 3, (), generator=g)),), generator=g)]
        kind = int(torch.randint(3, (), generator=g))
        device = ("cpu", "cuda", "xpu")[int(torch.randint(3, (), generator=g))]
        t = torch.randn(shape, generator=g).to(dtype) if dtype != torch.complex64 else \
            torch.randn(shape, generator=g, dtype=dtype)
        if kind == 1 and dtype in _FLOATS:
            spec = {"$parameter": t}
        elif kind == 2:
            spec = meta_spec(*shape, dtype=dtype)
        else:
            spec = t
        out.append((spec, device))
    return out


def _eligibility_cases(seed: int = SELF_CHECK_SEED):
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g)
    return [
        (r(2), "cpu"), (r(2).bfloat16(), "cpu"), (r(2).half(), "cpu"),
        (r(2).double(), "cpu"), (torch.arange(3), "cpu"), (torch.tensor([True]), "cpu"),
        (torch.randn(2, dtype=torch.complex64, generator=g), "cpu"), (r(2), "cuda"), (meta_spec(2), "cpu"),
        (r(2).to(torch.float8_e4m3fn), "cpu"), (1.5, "cpu"), (None, "cpu"),
        ({"$parameter": r(2)}, "cpu"),
        *_drawn_eligibility(seed),
    ]


def _eligibility_hint(t, dev, got) -> str:
    if type(got) is not bool:
        return "return a Python bool: True or False"
    hint = ("eligible means: a tensor, floating point (t.is_floating_point()), not float64, "
            "and on the autocast device (t.device.type == device_type)")
    if isinstance(t, torch.Tensor) and t.dtype == FP64:
        hint = "float64 tensors are never cast: the user asked for double precision on purpose"
    elif isinstance(t, torch.Tensor) and not t.is_floating_point():
        hint = "integer, bool and complex tensors are never cast (indices must stay integers)"
    elif isinstance(t, torch.Tensor) and t.device.type != dev:
        hint = "only tensors on the autocast device are cast: compare t.device.type with device_type"
    elif not isinstance(t, torch.Tensor):
        hint = "arguments that are not tensors (numbers, None) are never cast"
    elif t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        hint = "the rule is 'floating point and not float64', not a list of three dtypes"
    return hint


def _judge_eligible(cases, outcomes) -> str:
    name = "is_eligible"
    values, raised = (outcomes.get("values"), outcomes.get("raised")) if type(outcomes) is dict else (None, None)
    if type(values) is not list or len(values) > len(cases) or (raised is None) != (len(values) == len(cases)):
        raise fail(name, expected=f"{len(cases)} answers", got=outcomes,
                   hint="the grader could not read your function's answers")
    for i, (spec, dev) in enumerate(cases):
        t = build(spec)
        shown = f"is_eligible({described(t)}, {dev!r})"
        want = is_eligible(t, dev)
        got = returned(name, {"ok": values[i]} if i < len(values) else {"raised": raised}, input=shown, expected=want)
        if type(got) is not bool or got is not want:
            raise fail(name, input=shown, expected=want, got=got, hint=_eligibility_hint(t, dev, got))
    return f"{len(cases)} cases"


check_is_eligible = Check("is_eligible", cases=_eligibility_cases, plan=plan.is_eligible, judge=_judge_eligible)
"""Grade ``is_eligible(t, device_type) -> bool``: would autocast cast ``t``?"""
