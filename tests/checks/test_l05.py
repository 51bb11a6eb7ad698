"""Exercise 05's graders, both ways: the reference passes, plausible wrong answers fail usefully."""

import pytest
import torch

from amp_edu.autocast.policy import BCE_BANNED_MESSAGE, POLICIES, decide, kind_of
from amp_edu.checks import l05
from amp_edu.checks.core import CheckFailed
from amp_edu.checks.l05.args import check_autocast_args
from amp_edu.checks.l05.cache import check_cached_cast
from amp_edu.checks.l05.eligible import check_is_eligible
from checkhelp import verdict  # noqa: E402  (tests/ is on sys.path)

BF16, FP32, FP64 = torch.bfloat16, torch.float32, torch.float64


def test_the_package_hands_the_lesson_and_the_grader_its_three_parts():
    """The lesson's check cells and the course checklist name ``amp_edu.checks.l05`` itself."""
    assert l05.__all__ == ["check_is_eligible", "check_autocast_args", "check_cached_cast"]
    assert (l05.check_is_eligible, l05.check_autocast_args, l05.check_cached_cast) == \
        (check_is_eligible, check_autocast_args, check_cached_cast)


# --- part A: is_eligible --------------------------------------------------------------------
def eligible_ok(t, device_type):
    return (isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != FP64
            and t.device.type == device_type)


def test_reference_eligible_passes(capsys):
    check_is_eligible(eligible_ok)
    assert capsys.readouterr().out.startswith("PASS is_eligible")


@pytest.mark.parametrize("wrong, hint", [
    (lambda t, d: isinstance(t, torch.Tensor) and t.is_floating_point() and t.device.type == d, "float64"),
    (lambda t, d: isinstance(t, torch.Tensor) and t.dtype != FP64 and t.device.type == d, "integer"),
    (lambda t, d: isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != FP64, "device"),
    (lambda t, d: t.is_floating_point() and t.dtype != FP64 and t.device.type == d, "raised"),
    (lambda t, d: isinstance(t, torch.Tensor) and t.dtype in (FP32, BF16, torch.float16) and t.device.type == d,
     "not a list of three dtypes"),
])
def test_wrong_eligibility_fails(wrong, hint):
    with pytest.raises(CheckFailed, match=hint) as err:
        check_is_eligible(wrong)
    assert "input:" in str(err.value) and "expected:" in str(err.value)


# --- part B: autocast_args ------------------------------------------------------------------
def args_ok(op, args, kwargs, *, policy, device_type, dtype):
    kind = kind_of(policy, op, args, kwargs)
    if kind is None or kwargs.get("out") is not None:
        return args, kwargs
    return decide(kind, args, kwargs, device_type=device_type, dtype=dtype)


def make_args(*, eligible=eligible_ok, inplace=False, promote="widest", explicit=True, out=True,
              lists=True, ban="cuda", foreign=True, none_chooses=False, lower_only_fp32=False,
              keyword_tensors=True, keep_kwargs=True, promote_lists=True, message="Unexpected floating ScalarType in at::autocast::prioritize"):
    """A hand-written autocast_args with one mistake switched in."""
    def cast_to(obj, to, device_type, only=None):
        if isinstance(obj, torch.Tensor):
            return obj.to(to) if eligible(obj, device_type) and (only is None or obj.dtype == only) else obj
        if lists and isinstance(obj, (list, tuple)):
            return type(obj)(cast_to(o, to, device_type) for o in obj)
        return obj

    def fn(op, args, kwargs, *, policy, device_type, dtype):
        name = op.rstrip("_") if inplace else op
        if ban == "both" and name == "binary_cross_entropy":
            raise RuntimeError(BCE_BANNED_MESSAGE)
        kind = POLICIES[policy].get(name)
        if kind is None or (out and kwargs.get("out") is not None):
            return args, kwargs
        if kind == "banned":
            if policy == ban:
                raise RuntimeError(BCE_BANNED_MESSAGE)
            return args, kwargs
        if kind == "lower":
            to = dtype
        elif kind == "fp32":
            to = FP32
        elif kind == "fp32_dtype":
            chose = (("dtype" in kwargs) if none_chooses else kwargs.get("dtype") is not None) \
                or any(isinstance(a, torch.dtype) for a in args)
            if (explicit and chose) or not eligible(args[0], device_type):
                return args, kwargs
            return args, ({**kwargs, "dtype": FP32} if keep_kwargs else {"dtype": FP32})
        else:   # promote
            read = (*args, *kwargs.values()) if keyword_tensors else args
            nested = (list, tuple) if promote_lists else tuple
            flat = [t for a in read for t in (a if isinstance(a, nested) else [a])]
            ok = [t for t in flat if isinstance(t, torch.Tensor) and eligible(t, device_type)]
            if foreign and any(t.dtype not in (FP32, dtype) for t in ok):
                raise RuntimeError(message)
            has32 = any(t.dtype == FP32 for t in ok)
            to = FP32 if (promote == "widest" and has32) else dtype
        only = FP32 if (lower_only_fp32 and kind == "lower") else None   # "cast the fp32 ones down"
        return tuple(cast_to(a, to, device_type, only) for a in args), {k: cast_to(v, to, device_type, only)
                                                                        for k, v in kwargs.items()}
    return fn


def test_reference_args_passes(capsys):
    check_autocast_args(args_ok)
    check_autocast_args(make_args())          # the hand-written version is right too
    assert capsys.readouterr().out.count("PASS autocast_args") == 2


@pytest.mark.parametrize("wrong, where, hint", [
    (make_args(eligible=lambda t, d: isinstance(t, torch.Tensor) and t.is_floating_point()), "float64",
     "float64 tensors are never cast"),
    (make_args(eligible=lambda t, d: isinstance(t, torch.Tensor) and t.dtype != FP64 and t.device.type == d),
     "scatter_add", "every eligible input"),
    (make_args(eligible=lambda t, d: isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != FP64),
     "another device", "not on the autocast device"),
    (make_args(inplace=True), "in place", "in-place ops"),
    (make_args(promote="low"), "fp32", "widest"),
    (make_args(explicit=False), "dtype= keyword", "caller chose a dtype"),
    (make_args(none_chooses=True), "dtype=None", "dtype=None is no choice"),
    (make_args(out=False), "out=", "out= calls"),
    (make_args(lists=False), "linalg_multi_dot", "inside lists"),
    (make_args(ban="none"), "binary_cross_entropy", "banned"),
    (make_args(foreign=False), "addcdiv of bf16 and fp16", "RuntimeError"),
    (make_args(ban="both"), "binary_cross_entropy, CPU policy", "fp32 ops cast"),
    (make_args(lower_only_fp32=True), "mm of a bf16 and an fp32 matrix in an fp16 region", "EVERY eligible"),
])
def test_wrong_args_fail(wrong, where, hint):
    with pytest.raises(CheckFailed, match=hint) as err:
        check_autocast_args(wrong)
    msg = str(err.value)
    assert where in msg and "expected:" in msg and "got:" in msg


def promote_unknown_ops(op, args, kwargs, *, policy, device_type, dtype):
    """Forgets that an op missing from the table runs untouched: treats it like a promote op."""
    kind = kind_of(policy, op, args, kwargs)
    if kwargs.get("out") is not None:
        return args, kwargs
    return decide(kind or "promote", args, kwargs, device_type=device_type, dtype=dtype)


@pytest.mark.parametrize("wrong, where, hint", [
    # the op's result would be the same (add promotes bf16 + fp32 to fp32 by itself): the arguments differ
    (promote_unknown_ops, "add (not in the tables)", "not in the policy's table"),
    (make_args(keyword_tensors=False), "other= keyword", "keyword tensors too"),
    (make_args(keep_kwargs=False), "softmax with dim= keyword", "keep the caller's keyword arguments"),
    (make_args(message="Unexpected floating ScalarType"), "addcdiv of bf16 and fp16", "autocast's own message"),
    (make_args(promote_lists=False), "cat of a list: bf16, fp32", "inside lists too"),
])
def test_wrong_arguments_with_the_same_op_result_fail(wrong, where, hint):
    with pytest.raises(CheckFailed, match=hint) as err:
        check_autocast_args(wrong)
    msg = str(err.value)
    assert where in msg and "expected:" in msg and "got:" in msg


def test_args_must_return_a_pair():
    with pytest.raises(CheckFailed, match="tuple"):
        check_autocast_args(lambda op, args, kwargs, **kw: args)


# --- part C: cached_cast --------------------------------------------------------------------
def cacheable(t, to, lower):
    return to == lower and t.dtype == FP32 and t.requires_grad and t.is_leaf and not t._is_view()


def make_cache(*, check=cacheable, grad=True, key_dtype=True, inference=True, store="given", key_tensor=True):
    shared = {}

    def cached_cast(cache, t, to, lower):
        if not check(t, to, lower) or (inference and torch.is_inference_mode_enabled()):
            return t.to(to)
        c = cache if store == "given" else shared
        key = ((id(t), to) if key_dtype else id(t)) if key_tensor else to
        if key not in c:
            if grad:
                with torch.enable_grad():
                    c[key] = t.to(to)
            else:
                c[key] = t.to(to)
        return c[key]
    return cached_cast


def test_reference_cache_passes(capsys):
    check_cached_cast(make_cache())
    assert capsys.readouterr().out.startswith("PASS cached_cast")


@pytest.mark.parametrize("wrong, where, hint", [
    (make_cache(check=lambda t, to, lower: True), "does not require grad", "parameters"),
    (make_cache(check=lambda t, to, lower: t.requires_grad), "non-leaf", "are leaves"),
    (make_cache(check=lambda t, to, lower: t.requires_grad and t.is_leaf), "a view", "views"),
    (make_cache(check=lambda t, to, lower: t.requires_grad and t.is_leaf and not t._is_view()), "fp16 parameter",
     "fp32 tensors"),
    (make_cache(grad=False), "torch.no_grad()", "enable_grad"),
    (make_cache(key_dtype=False), "then cached_cast(cache, p, bf16", "AND the target dtype"),
    (make_cache(inference=False), "inference_mode", "inference_mode"),
    (make_cache(store="global"), "clear", "clear()"),
    (make_cache(check=lambda t, to, lower: False), "twice, p = nn.Parameter", "reused"),
    (make_cache(key_tensor=False), "two weights, one region", "first weight's copy"),
])
def test_wrong_cache_fails(wrong, where, hint):
    with pytest.raises(CheckFailed, match=hint) as err:
        check_cached_cast(wrong)
    assert where in str(err.value)


# --- the by-value design: drawn cases, answers that lie -------------------------------------


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        return [obj.tolist()]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


@pytest.mark.parametrize("check, answer", [
    (check_is_eligible, eligible_ok), (check_autocast_args, args_ok), (check_cached_cast, make_cache()),
], ids=["is_eligible", "autocast_args", "cached_cast"])
def test_drawn_cases_differ_by_seed_and_the_reference_passes_for_several(check, answer):
    assert _tensors(check.cases(1)) != _tensors(check.cases(2))
    for seed in (0, 1, 2):
        assert verdict(check, seed, answer).startswith(f"PASS {check.name}")


def test_drawn_eligibility_cases_cover_every_kind():
    specs = [spec for seed in range(4) for spec, _ in check_is_eligible.cases(seed)[13:]]
    assert any(isinstance(s, dict) and "$meta" in s for s in specs)
    assert any(isinstance(s, dict) and "$parameter" in s for s in specs)
    assert len({s.dtype for s in specs if isinstance(s, torch.Tensor)}) >= 5


class LiarInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class LiarTensor(torch.Tensor):
    def __eq__(self, other):
        return True

    __hash__ = torch.Tensor.__hash__


def test_lying_eligibility_answers_fail():
    with pytest.raises(CheckFailed, match="int subclass"):
        check_is_eligible(lambda t, d: LiarInt(eligible_ok(t, d)))
    with pytest.raises(CheckFailed, match="Python bool"):
        check_is_eligible(lambda t, d: torch.tensor(eligible_ok(t, d)))


def test_lying_args_answers_fail():
    def subclassed(op, args, kwargs, **kw):
        a, k = args_ok(op, args, kwargs, **kw)
        return tuple(x.as_subclass(LiarTensor) if isinstance(x, torch.Tensor) else x for x in a), k
    with pytest.raises(CheckFailed, match="plain tensors"):
        check_autocast_args(subclassed)

    def other_values(op, args, kwargs, **kw):
        a, k = args_ok(op, args, kwargs, **kw)
        return tuple(torch.randn_like(x) if isinstance(x, torch.Tensor) and x.is_floating_point() and not x.is_meta
                     else x for x in a), k
    with pytest.raises(CheckFailed, match="expected:"):
        check_autocast_args(other_values)

    def casts_in_place(op, args, kwargs, **kw):
        for x in args:
            if isinstance(x, torch.Tensor) and x.dtype == FP32 and not x.is_meta:
                x.data = x.data.to(kw["dtype"]).to(FP32)        # "rounds" the caller's tensor
        return args_ok(op, args, kwargs, **kw)
    with pytest.raises(CheckFailed, match="leave the caller's tensors"):
        check_autocast_args(casts_in_place)


def test_lying_cache_answers_fail():
    ok = make_cache()
    with pytest.raises(CheckFailed, match="cast tensor"):
        check_cached_cast(lambda cache, t, to, lower: ok(cache, t, to, lower).as_subclass(LiarTensor))
    with pytest.raises(CheckFailed, match="cast tensor"):
        check_cached_cast(lambda cache, t, to, lower: torch.zeros_like(t, dtype=to))
