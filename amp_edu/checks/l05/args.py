"""Exercise 05, part B: ``autocast_args(op, args, kwargs, *, policy, device_type, dtype)`` -- the cast decision.

The cases are ops the lesson did not show -- ``addbmm``, ``cosh``, ``cumprod``, ``scatter_add``,
``index_copy``, ``huber_loss``, ... -- with the arguments a nearly-right answer gets wrong: float64
and integer tensors, tensors inside a list, a tensor on another device, an explicit ``dtype=``
(keyword and positional) and ``dtype=None``, promotion with and without an fp32 input, in-place
ops and ``out=``, the banned op. The reference is :func:`amp_edu.autocast.policy.decide`.

An answer must return the arguments autocast passes -- each tensor's dtype, the containers, the
keywords -- not merely arguments with which the op gives the same result (``add`` of bf16 and fp32
is float32 whether or not the bf16 input was cast first; a dropped ``dim=`` can be the op's
default), and raise with autocast's own messages; it must leave the caller's tensors as they were.
The judge therefore compares three things per case (:func:`_judge_calls`): the op's result on the
answer's arguments, the arguments' *layout* (:func:`_layout`), and the caller's arguments after
the call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...autocast.policy import decide, is_eligible, kind_of
from ...device import num_threads
from ...plans import l05 as plan
from ...plans.l05 import build, meta_spec
from ..core import SELF_CHECK_SEED, Check, fail, returned, same
from .eligible import described

__all__ = ["check_autocast_args"]

BF16, FP16, FP32, FP64 = torch.bfloat16, torch.float16, torch.float32, torch.float64


# the callables the cases' ops are run with (a case names one by its key: a function cannot travel)
_CALLABLES = {
    "torch.addbmm": torch.addbmm, "torch.conv1d": torch.conv1d, "torch.addr": torch.addr,
    "torch.prelu": torch.prelu, "torch.cosh": torch.cosh, "torch.rsqrt": torch.rsqrt, "torch.pow": torch.pow,
    "torch.cumprod": torch.cumprod, "torch.softmax": torch.softmax, "torch.logsumexp": torch.logsumexp,
    "torch.prod": torch.prod, "torch.linalg.vector_norm": torch.linalg.vector_norm, "torch.mm": torch.mm,
    "torch._C._nn.huber_loss": torch._C._nn.huber_loss, "torch.renorm": torch.renorm,
    "torch.linalg.multi_dot": torch.linalg.multi_dot, "torch.scatter_add": torch.scatter_add,
    "torch.vdot": torch.vdot, "torch.atan2": torch.atan2, "torch.addcdiv": torch.addcdiv,
    "torch.index_copy": torch.index_copy, "torch.stack": torch.stack, "torch.cat": torch.cat,
    "torch.Tensor.exp_": torch.Tensor.exp_, "torch.Tensor.addmm_": torch.Tensor.addmm_, "torch.bmm": torch.bmm,
    "torch.add": torch.add, "torch.nn.functional.linear": F.linear,
    "torch._C._nn.binary_cross_entropy": torch._C._nn.binary_cross_entropy,
}


def _case_specs(seed: int = SELF_CHECK_SEED):
    """(label, policy, low dtype, op name, callable's key, args, kwargs), the tensors' values drawn
    from ``seed``; meta tensors described (:func:`amp_edu.plans.l05.build` makes them)."""
    g = torch.Generator().manual_seed(seed)

    def _r(*shape, dtype=FP32):
        return torch.randn(*shape, generator=g).to(dtype)

    idx = torch.tensor([[0, 1], [1, 0]])
    meta = meta_spec(3, 3)
    h, b = _r(6, dtype=FP16), _r(6, dtype=BF16)
    return [
        ("addbmm, fp32 inputs", "cuda", FP16, "addbmm", "torch.addbmm", (_r(3, 3), _r(2, 3, 4), _r(2, 4, 3)), {}),
        ("addbmm, CPU policy", "cpu", BF16, "addbmm", "torch.addbmm", (_r(3, 3), _r(2, 3, 4), _r(2, 4, 3)), {}),
        ("conv1d with a float64 input", "cpu", BF16, "conv1d", "torch.conv1d",
         (_r(1, 2, 5, dtype=FP64), _r(3, 2, 2, dtype=FP64)), {}),
        ("addr with a float64 bias", "cuda", FP16, "addr", "torch.addr", (_r(3, 4, dtype=FP64), _r(3), _r(4)), {}),
        ("prelu", "cuda", BF16, "prelu", "torch.prelu", (_r(2, 3), _r(1)), {}),
        ("cosh of fp16", "cuda", FP16, "cosh", "torch.cosh", (h,), {}),
        ("cosh of fp16, CPU policy", "cpu", FP16, "cosh", "torch.cosh", (h,), {}),
        ("rsqrt of bf16 in a bf16 region", "cuda", BF16, "rsqrt", "torch.rsqrt", (b.abs(),), {}),
        ("pow(2.0, fp16 tensor)", "cuda", FP16, "pow", "torch.pow", (2.0, h), {}),
        ("cumprod of fp16", "cuda", FP16, "cumprod", "torch.cumprod", (h, 0), {}),
        ("cumprod with dtype= keyword", "cuda", FP16, "cumprod", "torch.cumprod", (h, 0), {"dtype": FP16}),
        ("softmax with a positional dtype", "cuda", FP16, "softmax", "torch.softmax", (h.view(2, 3), 1, FP16), {}),
        ("softmax with dim= keyword", "cuda", FP16, "softmax", "torch.softmax", (h.view(2, 3),), {"dim": 1}),
        ("cumprod with dtype=None (no dtype chosen)", "cuda", FP16, "cumprod", "torch.cumprod", (h, 0), {"dtype": None}),
        ("logsumexp of fp16", "cuda", FP16, "logsumexp", "torch.logsumexp", (h.view(2, 3), 1), {}),
        ("prod of a float64 tensor", "cuda", FP16, "prod", "torch.prod", (_r(4, dtype=FP64),), {}),
        ("prod of bf16, CPU policy (fp32, not fp32_dtype)", "cpu", BF16, "prod", "torch.prod", (b,), {"dtype": BF16}),
        ("linalg_vector_norm of a tensor on another device", "cuda", FP16, "linalg_vector_norm",
         "torch.linalg.vector_norm", (meta,), {}),
        ("mm of tensors on another device", "cpu", BF16, "mm", "torch.mm", (meta, meta), {}),
        ("huber_loss of bf16", "cpu", BF16, "huber_loss", "torch._C._nn.huber_loss", (b, b.flip(0)), {}),
        ("renorm of fp16", "cuda", FP16, "renorm", "torch.renorm", (h.view(2, 3), 2, 0, 1.0), {}),
        ("linalg_multi_dot of a list of fp32 matrices", "cuda", FP16, "linalg_multi_dot", "torch.linalg.multi_dot",
         ([_r(3, 4), _r(4, 5), _r(5, 2)],), {}),
        ("scatter_add: fp32 self, integer index, fp16 src", "cuda", FP16, "scatter_add", "torch.scatter_add",
         (_r(2, 2), 0, idx, _r(2, 2, dtype=FP16)), {}),
        ("scatter_add: all fp16", "cuda", FP16, "scatter_add", "torch.scatter_add",
         (_r(2, 2, dtype=FP16), 0, idx, _r(2, 2, dtype=FP16)), {}),
        ("vdot of fp16 and fp32", "cuda", FP16, "vdot", "torch.vdot", (h, _r(6)), {}),
        ("atan2 of fp16 and float64", "cuda", FP16, "atan2", "torch.atan2", (h, _r(6, dtype=FP64)), {}),
        ("addcdiv of bf16 and fp16 in an fp16 region", "cuda", FP16, "addcdiv", "torch.addcdiv",
         (h, b, h.abs() + 1), {}),
        ("index_copy: bf16 self, fp32 source", "cpu", BF16, "index_copy", "torch.index_copy",
         (_r(3, 2, dtype=BF16), 0, torch.tensor([0, 2]), _r(2, 2)), {}),
        ("stack of a tuple: bf16, fp32", "cpu", BF16, "stack", "torch.stack", ((b, _r(6)),), {}),
        ("stack of a list: bf16, bf16", "cpu", BF16, "stack", "torch.stack", ([b, b.flip(0)],), {}),
        ("cat of a list: bf16, fp32", "cpu", BF16, "cat", "torch.cat", ([b, _r(6)],), {}),
        ("atan2 of fp16 with an fp32 other= keyword", "cuda", FP16, "atan2", "torch.atan2", (h,), {"other": _r(6)}),
        ("cat of a list: int64, int64", "cpu", BF16, "cat", "torch.cat", ([idx, idx],), {}),
        ("exp_ (in place) of fp32", "cuda", FP16, "exp_", "torch.Tensor.exp_", (_r(4),), {}),
        ("addmm_ (in place)", "cpu", BF16, "addmm_", "torch.Tensor.addmm_", (_r(3, 3), _r(3, 3), _r(3, 3)), {}),
        ("bmm with out=", "cpu", BF16, "bmm", "torch.bmm", (_r(2, 3, 3), _r(2, 3, 3)), {"out": torch.zeros(2, 3, 3)}),
        ("add (not in the tables) of bf16 and fp32", "cpu", BF16, "add", "torch.add", (b, _r(6)), {}),
        # a lower op casts EVERY eligible floating input to the region's dtype, not only the fp32 ones
        ("mm of a bf16 and an fp32 matrix in an fp16 region", "cuda", FP16, "mm", "torch.mm",
         (_r(3, 3, dtype=BF16), _r(3, 3)), {}),
        ("linear: fp16 input, fp32 weight, in a bf16 region (CPU policy)", "cpu", BF16, "linear",
         "torch.nn.functional.linear", (_r(2, 4, dtype=FP16), _r(3, 4)), {}),
        ("binary_cross_entropy, CUDA policy", "cuda", FP16, "binary_cross_entropy", "torch._C._nn.binary_cross_entropy",
         (h.sigmoid(), h.sigmoid().flip(0)), {}),
        ("binary_cross_entropy, CPU policy", "cpu", BF16, "binary_cross_entropy", "torch._C._nn.binary_cross_entropy",
         (b.sigmoid(), b.sigmoid().flip(0)), {}),
    ]


def _cases(seed: int = SELF_CHECK_SEED):
    """(label, policy, low dtype, op name, callable, args, kwargs), every object built (for tools
    that call answers on the graded inputs)."""
    return [(label, pol, low, op, _CALLABLES[key], build(args), build(kwargs))
            for label, pol, low, op, key, args, kwargs in _case_specs(seed)]


class _Raised:
    """An exception, by value: its type's name and its message (the learner's arrive so)."""

    def __init__(self, type_name: str, message: str):
        self.type, self.message = type_name, message

    @classmethod
    def of(cls, exc: BaseException) -> "_Raised":
        return cls(type(exc).__name__, str(exc))

    def __repr__(self):
        return f"{self.type}({self.message!r})"


def _reference(op, args, kwargs, policy, dtype):
    kind = kind_of(policy, op, args, kwargs)
    if kind is None or kwargs.get("out") is not None:
        return args, kwargs
    return decide(kind, args, kwargs, device_type="cpu", dtype=dtype)


def _run(fn, args, kwargs):
    try:
        return fn(*[a.clone() if isinstance(a, torch.Tensor) and not a.is_meta else a for a in args], **kwargs)
    except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare
        return _Raised.of(exc)


def _same_outcome(got, want) -> bool:
    if isinstance(want, _Raised) or isinstance(got, _Raised):
        return (isinstance(got, _Raised) and isinstance(want, _Raised) and got.type == want.type
                and got.message == want.message)
    if isinstance(want, torch.Tensor) and want.is_meta:
        return isinstance(got, torch.Tensor) and got.dtype == want.dtype
    return same(got, want)


def _shown(out):
    if isinstance(out, _Raised):
        return f"{out.type}: {(out.message.splitlines() or [''])[0]}"
    return described(out) if isinstance(out, torch.Tensor) else out


def _layout(obj):
    """What autocast hands the op, without the values: each tensor's dtype, device and shape,
    container types, keyword names, every other argument as it is. Two answers with the same op
    result can still differ here (an fp32 input cast to bf16 that the op's own type promotion
    would have widened again, a keyword dropped that had its default value)."""
    if isinstance(obj, torch.Tensor):
        return ("tensor", obj.dtype, obj.device.type, tuple(obj.shape))
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, tuple(_layout(o) for o in obj))
    if isinstance(obj, dict):
        return ("dict", tuple(sorted((k, _layout(v)) for k, v in obj.items())))
    return ("value", type(obj).__name__, repr(obj))


def _shown_args(pair) -> str:
    """``(args, kwargs)`` with each tensor shown as its dtype."""
    def one(o):
        if isinstance(o, torch.Tensor):
            return f"<{str(o.dtype).replace('torch.', '')} tensor>"
        if isinstance(o, (list, tuple)):
            inner = ", ".join(one(x) for x in o)
            return f"[{inner}]" if isinstance(o, list) else f"({inner}{',' if len(o) == 1 else ''})"
        return repr(o)
    args, kwargs = pair
    return f"args={one(tuple(args))}, kwargs={{{', '.join(f'{k!r}: {one(v)}' for k, v in kwargs.items())}}}"


def _flat(obj):
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _flat(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in _flat(item)]
    return [obj]


def _why_not_eligible(t) -> str:
    if t.dtype == FP64:
        return "float64 tensors are never cast (and promote ignores them when it picks the widest dtype)"
    if not t.is_floating_point():
        return "integer and bool tensors (indices) are never cast"
    return "tensors that are not on the autocast device are not cast"


def _hint(kind, args, kwargs, mine) -> str:
    """Name the likely mistake: compare the learner's arguments with the originals."""
    if kind is None:
        return ("this op is not in the policy's table (in-place ops and unlisted ops are never "
                "autocast): return args and kwargs unchanged")
    if kwargs.get("out") is not None:
        return "out= calls are never autocast (only out-of-place overloads are): leave them alone"
    if isinstance(mine, tuple) and len(mine) == 2 and isinstance(mine[1], dict):
        before, after = _flat((args, kwargs)), _flat((mine[0], mine[1]))
        if len(before) == len(after):
            for a, b in zip(before, after):
                if (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype != b.dtype
                        and not is_eligible(a, "cpu")):
                    return _why_not_eligible(a)
    if kind == "fp32_dtype":
        return ("fp32_dtype ops keep their inputs and get dtype=torch.float32 added — unless the caller "
                "chose a dtype (keyword, or a torch.dtype passed positionally; dtype=None is no choice), or the "
                "first argument is not eligible")
    if kind == "promote":
        return ("promote casts every eligible input (look inside lists and tuples) to the widest eligible "
                "dtype present: float32 if any input is fp32, else the region's dtype; another "
                "low-precision dtype (bf16 in an fp16 region) is a RuntimeError")
    if kind == "banned":
        return "binary_cross_entropy is banned under the CUDA policy: raise RuntimeError"
    if kind == "fp32":
        return "fp32 ops cast every eligible input to float32"
    low = [t for t in _flat((args, kwargs)) if isinstance(t, torch.Tensor) and is_eligible(t, "cpu")
           and t.dtype not in (FP32,)]
    if low and isinstance(mine, tuple) and len(mine) == 2 and any(
            isinstance(t, torch.Tensor) and t.dtype in (FP16, BF16) for t in _flat(mine)):
        return ("lower ops cast EVERY eligible floating input to the region's dtype — a bf16 input in an "
                "fp16 region (or fp16 in a bf16 one) too, not only the float32 ones")
    return "lower ops cast every eligible floating input to the region's dtype (look inside lists too)"


def _layout_hint(kind, args, kwargs, ref, mine) -> str:
    """The likely mistake when the op's result agrees but the arguments do not."""
    if kind is None or kwargs.get("out") is not None:
        return _hint(kind, args, kwargs, mine)
    first = args[0] if args else None
    if kind == "fp32_dtype" and isinstance(first, torch.Tensor) and not is_eligible(first, "cpu") \
            and "dtype" in mine[1] and "dtype" not in ref[1]:
        return (_why_not_eligible(first) + "; an fp32_dtype op whose first argument is not eligible gets no "
                "dtype= either")
    if set(ref[1]) - set(mine[1]):
        return ("keep the caller's keyword arguments: add dtype=torch.float32 to them "
                "({**kwargs, 'dtype': torch.float32}), don't replace them")
    if kind == "promote" and any(isinstance(v, torch.Tensor) for v in kwargs.values()):
        return ("promote reads keyword tensors too (torch.atan2(x, other=y)): the widest eligible dtype "
                "over the positional AND keyword arguments")
    if kind == "promote" and any(isinstance(a, list) for a in args) and _layout(ref[0]) != _layout(mine[0]):
        return ("promote picks the widest dtype over the tensors inside lists too: torch.cat([bf16, fp32]) "
                "casts both to float32")
    return _hint(kind, args, kwargs, mine)


def _plain(obj, depth: int = 0) -> bool:
    """Only built-in containers, tensors and plain values (what an answer can be made of)."""
    if depth > 16:
        return False
    t = type(obj)
    if t is list or t is tuple:
        return all(_plain(o, depth + 1) for o in obj)
    if t is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in obj.items())
    return t in (torch.Tensor, torch.dtype, int, float, bool, str, type(None))


def _copy(obj):
    """``obj`` with every tensor (but a meta one) cloned and its containers rebuilt."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.is_meta else obj.clone()
    if type(obj) in (list, tuple):
        return type(obj)(_copy(o) for o in obj)
    if type(obj) is dict:
        return {k: _copy(v) for k, v in obj.items()}
    return obj


def _unchanged(before, after) -> bool:
    """The tensors of ``after`` (what a function was handed, after the call) are those of ``before``."""
    a, b = _flat(before), _flat(after)
    return len(a) == len(b) and all(
        not isinstance(x, torch.Tensor) or (type(y) is torch.Tensor and _layout(x) == _layout(y)
                                            and (x.is_meta or same(x, y)))
        for x, y in zip(a, b))


_UNCHANGED_HINT = ("autocast_args must leave the caller's tensors as they are: return new (cast) tensors "
                   "made with t.to(dtype), don't change args in place")


def _judge_args(cases, result) -> str:
    with num_threads(1):        # small ops: one thread is faster, much faster on a busy machine
        return _judge_calls(cases, result)


def _judge_calls(cases, result) -> str:
    name = "autocast_args"
    if type(result) is not list or len(result) != len(cases):
        raise fail(name, expected=f"{len(cases)} answers", got=result,
                   hint="the grader could not read your function's answers")
    for (label, pol, low, op, key, args_spec, kwargs_spec), got in zip(cases, result):
        # copies: running the op may write into them (out=), the originals are what the learner was handed
        args, kwargs, call = _copy(build(args_spec)), _copy(build(kwargs_spec)), _CALLABLES[key]
        shown = f"{op} [{label}] under policy={pol!r}, dtype={low}: args=({', '.join(map(described, args))})"
        try:
            ref = _reference(op, args, dict(kwargs), pol, low)
            want = _run(call, *ref)
        except RuntimeError as exc:
            ref = want = _Raised.of(exc)
        if type(got) is not dict:
            raise fail(name, input=shown, expected=_shown(want), got=got,
                       hint="the grader could not read your function's answers")
        # the banned op's right answer is a RuntimeError: returned, then compared with torch's
        mine = returned(name, got.get("outcome"), input=shown, expected=_shown(want), returns=("RuntimeError",))
        if type(got.get("outcome")) is dict and "raised" in got["outcome"]:
            mine = _Raised(mine["type"], mine["message"])
        answer = mine
        if not isinstance(mine, _Raised):
            if not (type(mine) is tuple and len(mine) == 2 and type(mine[1]) is dict):
                raise fail(name, input=shown, expected="a tuple (args, kwargs)", got=mine,
                           hint="return the (possibly cast) arguments as a tuple and the keyword arguments as a dict")
            if not _plain(mine):
                raise fail(name, input=shown, expected=_shown_args(ref) if not isinstance(ref, _Raised) else _shown(ref),
                           got=mine, hint="return plain tensors, lists, tuples and dicts (the arguments autocast passes)")
            answer = mine = (build(mine[0]), build(mine[1]))
            mine = _run(call, mine[0], mine[1])
        kind = kind_of(pol, op, args, kwargs)
        if isinstance(answer, _Raised) and isinstance(ref, _Raised) and answer.type == ref.type \
                and answer.message != ref.message:
            raise fail(name, input=shown, expected=_shown(ref), got=_shown(answer),
                       hint=f"raise RuntimeError with autocast's own message: {ref.message!r}")
        if not _same_outcome(mine, want):
            pair = not isinstance(ref, _Raised) and isinstance(answer, tuple)
            raise fail(name, input=shown, expected=_shown(want), got=_shown(mine),
                       hint=_layout_hint(kind, args, kwargs, ref, answer) if pair else _hint(kind, args, kwargs, answer))
        # the same op result is not enough: the arguments must be the ones autocast passes
        if not isinstance(ref, _Raised) and _layout(answer) != _layout(ref):
            raise fail(name, input=shown, expected=_shown_args(ref), got=_shown_args(answer),
                       hint=_layout_hint(kind, args, kwargs, ref, answer))
        after_args, after_kwargs = build(got.get("args")), build(got.get("kwargs"))
        kept = {k: v for k, v in after_kwargs.items() if k in kwargs} if type(after_kwargs) is dict else after_kwargs
        args, kwargs = build(args_spec), build(kwargs_spec)
        if not (_unchanged(args, after_args) and type(kept) is dict and kept.keys() == kwargs.keys()
                and _unchanged(kwargs, kept)):
            raise fail(name, input=shown, expected=f"the arguments unchanged: {_shown_args((args, kwargs))}",
                       got=_shown_args((after_args, kept)) if type(after_args) in (list, tuple) and type(kept) is dict
                       else (after_args, kept), hint=_UNCHANGED_HINT)
    return f"{len(cases)} calls of ops the lesson did not show"


check_autocast_args = Check("autocast_args", cases=_case_specs, plan=plan.autocast_args, judge=_judge_args)
"""Grade ``autocast_args(op, args, kwargs, *, policy, device_type, dtype) -> (args, kwargs)`` (or RuntimeError)."""
