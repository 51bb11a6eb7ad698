"""Graders for exercise 05 (autocast from scratch): eligibility, the cast decision, the weight cache.

The reference is :mod:`amp_edu.autocast` (proven equal to torch's autocast on torch's own test
lists). The cases are ops the lesson did not show — ``addbmm``, ``cosh``, ``cumprod``,
``scatter_add``, ``index_copy``, ``huber_loss``, ... — with the arguments a nearly-right answer
gets wrong: float64 and integer tensors, tensors inside a list, a tensor on another device, an
explicit ``dtype=`` (keyword and positional) and ``dtype=None``, promotion with and without an
fp32 input, in-place ops and ``out=``, the banned op, and for the cache non-leaf, view, no-grad and fp16 tensors,
a ``no_grad`` first call, two target dtypes, two weights in one region and ``inference_mode``.

An answer to part B must return the arguments autocast passes — each tensor's dtype, the
containers, the keywords — not merely arguments with which the op gives the same result (``add``
of bf16 and fp32 is float32 whether or not the bf16 input was cast first; a dropped ``dim=`` can
be the op's default), and raise with autocast's own messages. ``tools/mutate.py`` found those
gaps: it runs systematic mutants of the solution through this grader.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..autocast.policy import decide, is_eligible, kind_of
from .core import call_learner, fail, passed, require_callable, same

__all__ = ["check_is_eligible", "check_autocast_args", "check_cached_cast"]

BF16, FP16, FP32, FP64 = torch.bfloat16, torch.float16, torch.float32, torch.float64


def _describe(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"tensor(shape={tuple(t.shape)}, dtype={t.dtype}, device={t.device.type})"
    return repr(t)


# --- part A ---------------------------------------------------------------------------------
def _eligibility_cases():
    meta = torch.empty(2, device="meta")
    return [
        (torch.randn(2), "cpu"), (torch.randn(2).bfloat16(), "cpu"), (torch.randn(2).half(), "cpu"),
        (torch.randn(2).double(), "cpu"), (torch.arange(3), "cpu"), (torch.tensor([True]), "cpu"),
        (torch.randn(2, dtype=torch.complex64), "cpu"), (torch.randn(2), "cuda"), (meta, "cpu"),
        (torch.randn(2).to(torch.float8_e4m3fn), "cpu"), (1.5, "cpu"), (None, "cpu"),
        (torch.nn.Parameter(torch.randn(2)), "cpu"),
    ]


def check_is_eligible(fn) -> None:
    """``fn(t, device_type) -> bool``: would autocast cast ``t``?"""
    name = "is_eligible"
    require_callable(name, fn)
    for t, dev in _eligibility_cases():
        shown = f"is_eligible({_describe(t)}, {dev!r})"
        want = is_eligible(t, dev)
        got = call_learner(name, fn, (t, dev), input=shown, expected=want)
        if got is not want and got != want:
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
            elif t.dtype == torch.float8_e4m3fn:
                hint = "the rule is 'floating point and not float64', not a list of three dtypes"
            raise fail(name, input=shown, expected=want, got=got, hint=hint)
    passed(name, f"{len(_eligibility_cases())} cases")


# --- part B ---------------------------------------------------------------------------------
def _r(*shape, dtype=FP32, seed=[0]):
    seed[0] += 1
    g = torch.Generator().manual_seed(seed[0])
    return torch.randn(*shape, generator=g).to(dtype)


def _cases():
    """(label, policy, low dtype, op name, callable, args, kwargs)."""
    nn = torch._C._nn
    idx = torch.tensor([[0, 1], [1, 0]])
    meta = torch.empty(3, 3, device="meta")
    h, b = _r(6, dtype=FP16), _r(6, dtype=BF16)
    return [
        ("addbmm, fp32 inputs", "cuda", FP16, "addbmm", torch.addbmm, (_r(3, 3), _r(2, 3, 4), _r(2, 4, 3)), {}),
        ("addbmm, CPU policy", "cpu", BF16, "addbmm", torch.addbmm, (_r(3, 3), _r(2, 3, 4), _r(2, 4, 3)), {}),
        ("conv1d with a float64 input", "cpu", BF16, "conv1d", torch.conv1d,
         (_r(1, 2, 5, dtype=FP64), _r(3, 2, 2, dtype=FP64)), {}),
        ("addr with a float64 bias", "cuda", FP16, "addr", torch.addr, (_r(3, 4, dtype=FP64), _r(3), _r(4)), {}),
        ("prelu", "cuda", BF16, "prelu", torch.prelu, (_r(2, 3), _r(1)), {}),
        ("cosh of fp16", "cuda", FP16, "cosh", torch.cosh, (h,), {}),
        ("cosh of fp16, CPU policy", "cpu", FP16, "cosh", torch.cosh, (h,), {}),
        ("rsqrt of bf16 in a bf16 region", "cuda", BF16, "rsqrt", torch.rsqrt, (b.abs(),), {}),
        ("pow(2.0, fp16 tensor)", "cuda", FP16, "pow", torch.pow, (2.0, h), {}),
        ("cumprod of fp16", "cuda", FP16, "cumprod", torch.cumprod, (h, 0), {}),
        ("cumprod with dtype= keyword", "cuda", FP16, "cumprod", torch.cumprod, (h, 0), {"dtype": FP16}),
        ("softmax with a positional dtype", "cuda", FP16, "softmax", torch.softmax, (h.view(2, 3), 1, FP16), {}),
        ("softmax with dim= keyword", "cuda", FP16, "softmax", torch.softmax, (h.view(2, 3),), {"dim": 1}),
        ("cumprod with dtype=None (no dtype chosen)", "cuda", FP16, "cumprod", torch.cumprod, (h, 0), {"dtype": None}),
        ("logsumexp of fp16", "cuda", FP16, "logsumexp", torch.logsumexp, (h.view(2, 3), 1), {}),
        ("prod of a float64 tensor", "cuda", FP16, "prod", torch.prod, (_r(4, dtype=FP64),), {}),
        ("prod of bf16, CPU policy (fp32, not fp32_dtype)", "cpu", BF16, "prod", torch.prod, (b,), {"dtype": BF16}),
        ("linalg_vector_norm of a tensor on another device", "cuda", FP16, "linalg_vector_norm",
         torch.linalg.vector_norm, (meta,), {}),
        ("mm of tensors on another device", "cpu", BF16, "mm", torch.mm, (meta, meta), {}),
        ("huber_loss of bf16", "cpu", BF16, "huber_loss", nn.huber_loss, (b, b.flip(0)), {}),
        ("renorm of fp16", "cuda", FP16, "renorm", torch.renorm, (h.view(2, 3), 2, 0, 1.0), {}),
        ("linalg_multi_dot of a list of fp32 matrices", "cuda", FP16, "linalg_multi_dot", torch.linalg.multi_dot,
         ([_r(3, 4), _r(4, 5), _r(5, 2)],), {}),
        ("scatter_add: fp32 self, integer index, fp16 src", "cuda", FP16, "scatter_add", torch.scatter_add,
         (_r(2, 2), 0, idx, _r(2, 2, dtype=FP16)), {}),
        ("scatter_add: all fp16", "cuda", FP16, "scatter_add", torch.scatter_add,
         (_r(2, 2, dtype=FP16), 0, idx, _r(2, 2, dtype=FP16)), {}),
        ("vdot of fp16 and fp32", "cuda", FP16, "vdot", torch.vdot, (h, _r(6)), {}),
        ("atan2 of fp16 and float64", "cuda", FP16, "atan2", torch.atan2, (h, _r(6, dtype=FP64)), {}),
        ("addcdiv of bf16 and fp16 in an fp16 region", "cuda", FP16, "addcdiv", torch.addcdiv,
         (h, b, h.abs() + 1), {}),
        ("index_copy: bf16 self, fp32 source", "cpu", BF16, "index_copy", torch.index_copy,
         (_r(3, 2, dtype=BF16), 0, torch.tensor([0, 2]), _r(2, 2)), {}),
        ("stack of a tuple: bf16, fp32", "cpu", BF16, "stack", torch.stack, ((b, _r(6)),), {}),
        ("stack of a list: bf16, bf16", "cpu", BF16, "stack", torch.stack, ([b, b.flip(0)],), {}),
        ("cat of a list: bf16, fp32", "cpu", BF16, "cat", torch.cat, ([b, _r(6)],), {}),
        ("atan2 of fp16 with an fp32 other= keyword", "cuda", FP16, "atan2", torch.atan2, (h,), {"other": _r(6)}),
        ("cat of a list: int64, int64", "cpu", BF16, "cat", torch.cat, ([idx, idx],), {}),
        ("exp_ (in place) of fp32", "cuda", FP16, "exp_", torch.Tensor.exp_, (_r(4),), {}),
        ("addmm_ (in place)", "cpu", BF16, "addmm_", torch.Tensor.addmm_, (_r(3, 3), _r(3, 3), _r(3, 3)), {}),
        ("bmm with out=", "cpu", BF16, "bmm", torch.bmm, (_r(2, 3, 3), _r(2, 3, 3)), {"out": torch.empty(2, 3, 3)}),
        ("add (not in the tables) of bf16 and fp32", "cpu", BF16, "add", torch.add, (b, _r(6)), {}),
        # a lower op casts EVERY eligible floating input to the region's dtype, not only the fp32 ones
        ("mm of a bf16 and an fp32 matrix in an fp16 region", "cuda", FP16, "mm", torch.mm,
         (_r(3, 3, dtype=BF16), _r(3, 3)), {}),
        ("linear: fp16 input, fp32 weight, in a bf16 region (CPU policy)", "cpu", BF16, "linear", F.linear,
         (_r(2, 4, dtype=FP16), _r(3, 4)), {}),
        ("binary_cross_entropy, CUDA policy", "cuda", FP16, "binary_cross_entropy", nn.binary_cross_entropy,
         (h.sigmoid(), h.sigmoid().flip(0)), {}),
        ("binary_cross_entropy, CPU policy", "cpu", BF16, "binary_cross_entropy", nn.binary_cross_entropy,
         (b.sigmoid(), b.sigmoid().flip(0)), {}),
    ]


def _reference(op, args, kwargs, policy, dtype):
    kind = kind_of(policy, op, args, kwargs)
    if kind is None or kwargs.get("out") is not None:
        return args, kwargs
    return decide(kind, args, kwargs, device_type="cpu", dtype=dtype)


def _run(fn, args, kwargs):
    try:
        return fn(*[a.clone() if isinstance(a, torch.Tensor) and not a.is_meta else a for a in args], **kwargs)
    except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare
        return exc


def _same_outcome(got, want) -> bool:
    if isinstance(want, Exception) or isinstance(got, Exception):
        return type(got) is type(want) and str(got) == str(want)
    if isinstance(want, torch.Tensor) and want.is_meta:
        return isinstance(got, torch.Tensor) and got.dtype == want.dtype
    return same(got, want)


def _shown(out):
    if isinstance(out, Exception):
        return f"{type(out).__name__}: {(str(out).splitlines() or [''])[0]}"
    return _describe(out) if isinstance(out, torch.Tensor) else out


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


def check_autocast_args(fn) -> None:
    """``fn(op, args, kwargs, *, policy, device_type, dtype) -> (args, kwargs)`` (or RuntimeError)."""
    name = "autocast_args"
    require_callable(name, fn)
    cases = _cases()
    for label, pol, low, op, call, args, kwargs in cases:
        shown = f"{op} [{label}] under policy={pol!r}, dtype={low}: args=({', '.join(map(_describe, args))})"
        try:
            ref = _reference(op, args, dict(kwargs), pol, low)
            want = _run(call, *ref)
        except RuntimeError as exc:
            ref = want = exc
        # the banned op's right answer is a RuntimeError: returned, then compared with torch's
        mine = call_learner(name, fn, (op, args, dict(kwargs)),
                            dict(policy=pol, device_type="cpu", dtype=low),
                            input=shown, expected=_shown(want), returns=(RuntimeError,))
        answer = mine
        if not isinstance(mine, Exception):
            if not (isinstance(mine, tuple) and len(mine) == 2 and isinstance(mine[1], dict)):
                raise fail(name, input=shown, expected="a tuple (args, kwargs)", got=mine,
                           hint="return the (possibly cast) arguments as a tuple and the keyword arguments as a dict")
            mine = _run(call, mine[0], mine[1])
        kind = kind_of(pol, op, args, kwargs)
        if isinstance(answer, Exception) and isinstance(ref, Exception) and type(answer) is type(ref) \
                and str(answer) != str(ref):
            raise fail(name, input=shown, expected=_shown(ref), got=_shown(answer),
                       hint=f"raise RuntimeError with autocast's own message: {str(ref)!r}")
        if not _same_outcome(mine, want):
            pair = not isinstance(ref, Exception) and isinstance(answer, tuple)
            raise fail(name, input=shown, expected=_shown(want), got=_shown(mine),
                       hint=_layout_hint(kind, args, kwargs, ref, answer) if pair else _hint(kind, args, kwargs, answer))
        # the same op result is not enough: the arguments must be the ones autocast passes
        if not isinstance(ref, Exception) and _layout(answer) != _layout(ref):
            raise fail(name, input=shown, expected=_shown_args(ref), got=_shown_args(answer),
                       hint=_layout_hint(kind, args, kwargs, ref, answer))
    passed(name, f"{len(cases)} calls of ops the lesson did not show")




# --- part C ---------------------------------------------------------------------------------
def _cache_fail(shown, expected, got, hint):
    return fail("cached_cast", input=shown, expected=expected, got=got, hint=hint)


def check_cached_cast(fn) -> None:
    """``fn(cache: dict, t, to, lower) -> tensor``: the weight-cast cache."""
    name = "cached_cast"
    require_callable(name, fn)

    def call(cache, t, to, lower, shown):
        out = call_learner(name, fn, (cache, t, to, lower), input=shown, expected=f"t.to({to})")
        if not isinstance(out, torch.Tensor) or out.dtype != to or not torch.equal(out, t.to(to)):
            raise _cache_fail(shown, f"t.to({to})", _describe(out), "always return the cast tensor (cached or new)")
        return out

    p = torch.nn.Parameter(torch.randn(4, 4))
    shown = "cached_cast(cache, p, torch.bfloat16, lower=torch.bfloat16) twice, p = nn.Parameter (fp32 leaf)"
    cache: dict = {}
    if call(cache, p, BF16, BF16, shown) is not call(cache, p, BF16, BF16, shown):
        raise _cache_fail(shown, "the same tensor object both times", "two different tensors",
                          "a weight's cast should be made once and reused within the region")

    cache = {}
    shown = "first call inside torch.no_grad(), second call with grad enabled (same parameter)"
    with torch.no_grad():
        call(cache, p, BF16, BF16, shown)
    out = call(cache, p, BF16, BF16, shown)
    if out.grad_fn is None:
        raise _cache_fail(shown, "a cast with autograd history (grad_fn ToCopyBackward0)", "grad_fn=None",
                          "the no_grad trap: make the cached copy under torch.enable_grad(), so it stays "
                          "connected to the weight whichever forward made it")

    base = torch.randn(8)
    leaf_view = base[:4].requires_grad_()
    not_cached = [
        (torch.randn(4, 4), BF16, BF16, "a tensor that does not require grad (an activation, a batch)"),
        (p * 2, BF16, BF16, "a non-leaf tensor (p * 2)"),
        (leaf_view, BF16, BF16, "a view (base[:4].requires_grad_()) — a leaf, but a view"),
        (torch.nn.Parameter(torch.randn(4, 4).half()), BF16, BF16, "an fp16 parameter (only fp32 sources are cached)"),
        (p, FP16, BF16, "a cast to fp16 in a bf16 region (not the region's low-precision dtype)"),
    ]
    for t, to, lower, what in not_cached:
        cache = {}
        shown = f"cached_cast(cache, t, {to}, lower={lower}) twice, t = {what}"
        a, b = call(cache, t, to, lower, shown), call(cache, t, to, lower, shown)
        if a is b:
            raise _cache_fail(shown, "two fresh casts (not cached)", "the same cached tensor twice",
                              "cache only casts to the region's dtype of fp32 tensors that require grad, "
                              "are leaves and are not views (t._is_view()) — i.e. parameters")

    cache = {}
    shown = ("cached_cast(cache, p, fp16, lower=fp16), then cached_cast(cache, p, bf16, lower=bf16): "
             "nested regions with different dtypes share one cache")
    call(cache, p, FP16, FP16, shown)
    second = call_learner(name, fn, (cache, p, BF16, BF16), input=shown, expected="t.to(torch.bfloat16)")
    if not isinstance(second, torch.Tensor) or second.dtype != BF16:
        raise _cache_fail(shown, "a bfloat16 cast of p", _describe(second),
                          "key the cache by the tensor AND the target dtype, e.g. (id(t), to): keyed by the "
                          "tensor alone, the bf16 region is handed the fp16 copy the outer region made"
                          if isinstance(second, torch.Tensor) and second.dtype == FP16 else
                          "always return the cast tensor (cached or new)")

    cache = {}
    q = torch.nn.Parameter(torch.randn(3, 2))
    shown = "cached_cast(cache, p, bf16, bf16), then cached_cast(cache, q, bf16, bf16): two weights, one region"
    call(cache, p, BF16, BF16, shown)
    got = call_learner(name, fn, (cache, q, BF16, BF16), input=shown, expected="q.to(torch.bfloat16)")
    if not (isinstance(got, torch.Tensor) and got.dtype == BF16 and got.shape == q.shape
            and torch.equal(got, q.to(BF16))):
        raise _cache_fail(shown, "q.to(torch.bfloat16), q's own copy (shape (3, 2))", _describe(got),
                          "key the cache by the tensor (id(t)) and the dtype, (id(t), to): keyed by the dtype "
                          "alone, every weight of the region is handed the first weight's copy"
                          if isinstance(got, torch.Tensor) and got.shape == p.shape else
                          "always return the cast tensor (cached or new)")

    cache = {}
    shown = "first call, cache.clear(), second call"
    a = call(cache, p, BF16, BF16, shown)
    with torch.no_grad():
        p.mul_(2)
    cache.clear()
    b = call(cache, p, BF16, BF16, shown)
    if a is b:
        raise _cache_fail(shown, "a fresh cast after clear()", "the old cached tensor",
                          "keep the cached copies in the dict you are given, so clear() forgets them")

    cache = {}
    shown = "two calls inside torch.inference_mode()"
    with torch.inference_mode():
        a, b = call(cache, p, BF16, BF16, shown), call(cache, p, BF16, BF16, shown)
    if a is b or cache:
        raise _cache_fail(shown, "no caching in inference mode", "a cached tensor",
                          "torch does not cache in inference_mode (torch.is_inference_mode_enabled()): "
                          "such tensors could not be used by a later grad forward")
    passed(name, "reuse, the no_grad trap, what is not cached, dtypes, two weights, clear, inference mode")
