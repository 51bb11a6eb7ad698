"""Grader for exercise 11: the cross-rank inf check and unscale of a sharded loss scaler.

:func:`check_unscale_and_sync` grades ``unscale_and_sync_(grads, scale, group) -> found_inf``:
``grads`` are *this rank's* gradient shards (a list, possibly empty), ``scale`` the float32 0-dim
loss scale, ``group`` the process group. The function multiplies every gradient in place by
``inv = 1/scale`` held as a float32 value (torch computes it in float64 and rounds it to float32,
which for a float32 scale gives the same bits as a float32 reciprocal: rounding to float64 then
to float32 equals rounding once, since float64 has more than 2*24+2 bits), each product computed
in float32 and rounded once to the gradient's dtype; it records whether any of this rank's
gradients held inf/NaN before that, and **all-reduces** the record over ``group``, so it returns
a float32 tensor of shape ``(1,)`` that is nonzero on every rank if any rank found one.

To grade in a second or two without starting processes, the grader *emulates* two ranks: two
threads, each with its own gloo process group over one in-memory store (the collectives are real
gloo all-reduces). Each case gives each rank its own gradients. A rank that skips the collective
leaves the other waiting: the groups time out after a few seconds and the grader says which
rank did not take part. Expected values come from :mod:`amp_edu.scaler` (bit-identical to
torch's kernels) and the rule "nonzero everywhere iff any rank found an inf/NaN". The named cases
are followed by cases drawn from the check's seed (shards, dtypes, scales, where an inf or NaN is).

The ranks run in the learner's kernel (:func:`amp_edu.plans.l11.unscale_and_sync_plan`, which
hands back per rank what happened, the ``found_inf`` returned and the gradients after the call);
the reference and the comparison run here, in :func:`_judge`.
"""

from __future__ import annotations

import math

import torch

from .. import scaler as _ref
from ..formats import dtype_name
from ..plans.l11 import WORLD, run_ranks, unscale_and_sync_plan
from .core import NOT_DONE_HINT, Check, bits, fail, returned, same_bits

__all__ = ["check_unscale_and_sync", "run_ranks"]

NAME = "unscale_and_sync_"
INF, NAN = math.inf, math.nan


def _reference(grads: list[torch.Tensor], scale: torch.Tensor) -> tuple[list[torch.Tensor], bool]:
    grads = [g.clone() for g in grads]
    return grads, bool(_ref.unscale_by_(grads, scale).item())


def _cases():
    gen = torch.Generator().manual_seed(11)
    r = lambda *shape: torch.randn(*shape, generator=gen) * 1000  # noqa: E731
    t = torch.tensor
    # label, [rank 0's grads, rank 1's grads], scale
    yield "clean gradients on both ranks", [[r(4, 3), r(3)], [r(4, 3), r(3)]], 65536.0
    yield "an inf in rank 1's shard only", [[r(4, 3), r(3)], [r(4, 3), t([1.0, INF, 2.0])]], 65536.0
    yield "a NaN in rank 0's shard only", [[t([1.0, NAN]), r(3)], [r(2), r(3)]], 1024.0
    yield "an inf on both ranks", [[t([INF, 1.0]), r(2)], [r(2), t([-INF, 3.0])]], 4096.0
    yield "ranks hold different numbers of tensors", [[r(3), r(3), r(2)], [t([1.0, INF])]], 8.0
    yield "rank 1 holds no gradients; rank 0 an inf", [[r(5), t([INF])], []], 65536.0
    yield "rank 1 holds no gradients; all clean", [[r(5), r(2, 2)], []], 256.0
    yield "a scale that is not a power of two (3.0)", [[r(7)], [t([1.0, 3.0, 10.0])]], 3.0
    yield "fp16 gradients (FSDP with fp16 parameters)", [[r(4).half(), r(3).half()], [t([2.0, 65504.0]).half()]], 1024.0
    # 1/3 rounded to fp16 (0.33325...) is not 1/3 rounded to float32: an inverse cast to the
    # gradients' dtype changes about a third of these products
    yield "fp16 gradients and a scale that is not a power of two (3.0)", [[r(16).half()], [r(16).half()]], 3.0
    # torch multiplies every dtype by the float32 inverse: a float64 gradient shows whether 1/S was
    # rounded to float32 (it is the one dtype where a float64 inverse would be used as it is)
    yield "float64 gradients and a scale that is not a power of two (3.0)", [[r(8).double()], [r(8).double()]], 3.0
    yield "large finite values (a sum overflows, they don't)", [[t([3.0e38, 3.0e38])], [r(2)]], 1.0
    yield "scale below 1: unscaling overflows a finite value", [[t([1.0e38, 2.0])], [r(2)]], 0.25


def _drawn(seed: int):
    """Three cases drawn from ``seed``: float32 shards with an inf, -inf or NaN on a drawn rank and a
    power-of-two scale; fp16 shards and a scale that is not a power of two, clean or not; ranks with
    different numbers of tensors (float32, fp16 or float64), either rank holding more."""
    g = torch.Generator().manual_seed(seed)
    k = lambda lo, hi: int(torch.randint(lo, hi, (), generator=g))  # noqa: E731

    def shard(n: int, dtype: torch.dtype, magnitude: float) -> list[torch.Tensor]:
        return [(torch.randn(k(1, 9), generator=g) * magnitude).to(dtype) for _ in range(n)]

    def spoil(per_rank: list, r: int) -> str:                # an inf, -inf or NaN somewhere on rank r
        which = k(0, 3)
        t = per_rank[r][k(0, len(per_rank[r]))]
        t.view(-1)[k(0, t.numel())] = (INF, -INF, NAN)[which]
        return f"{('an inf', 'a -inf', 'a NaN')[which]} on rank {r}"

    def odd_scale() -> float:                                # m·2^e, not a power of two, exact in float32
        return 2.0 ** k(0, 17) * (1 + 2 * k(1, 128) / 256)

    per_rank = [shard(k(1, 4), torch.float32, 2.0 ** k(0, 12)) for _ in range(WORLD)]
    what = spoil(per_rank, k(0, WORLD))
    yield f"drawn: float32 gradients, {what} only", per_rank, 2.0 ** k(-2, 17)

    per_rank = [shard(k(1, 4), torch.float16, 2.0 ** k(0, 10)) for _ in range(WORLD)]
    what = spoil(per_rank, k(0, WORLD)) if k(0, 2) else None
    yield (f"drawn: fp16 gradients, a scale that is not a power of two{', ' + what if what else ', all clean'}",
           per_rank, odd_scale())

    dtype = (torch.float32, torch.float16, torch.float64)[k(0, 3)]
    more = k(2, 5)
    counts = [more, k(1, more)]
    if k(0, 2):
        counts.reverse()
    per_rank = [shard(n, dtype, 2.0 ** k(0, 10)) for n in counts]
    what = spoil(per_rank, k(0, WORLD)) if k(0, 2) else None
    yield (f"drawn: ranks hold {counts[0]} and {counts[1]} {dtype_name(dtype)} tensors"
           f"{', ' + what if what else ''}", per_rank, odd_scale() if k(0, 2) else 2.0 ** k(0, 17))


def _all_cases(seed: int) -> list[tuple]:
    """The named cases, then :func:`_drawn`: ``(label, [rank 0's grads, rank 1's grads], scale)``."""
    return list(_cases()) + list(_drawn(seed))


def _show(per_rank, scale) -> str:
    def one(gs):
        return "[" + ", ".join(f"{g.flatten()[:3].tolist()}{'...' if g.numel() > 3 else ''} ({dtype_name(g.dtype)})"
                               for g in gs) + "]"
    return f"rank 0 grads {one(per_rank[0])}, rank 1 grads {one(per_rank[1])}, scale {scale!r}"


def _error_hint(text: str) -> str:
    """The hint for an error ``text`` ("Type: message") a rank raised."""
    if "Default process group has not been initialized" in text:
        return "pass the group: dist.all_reduce(found_inf, group=group) -- there is no default group here"
    if "imed out" in text or "Timeout" in text or "timeout" in text:
        return ("this rank waited in a collective the other rank never joined: every rank must call "
                "all_reduce exactly once per call -- also a rank with no gradients, and not once per tensor "
                "(ranks hold different numbers of tensors)")
    return "your function raised on this input"


def _readable_rank(rank, n_grads: int) -> bool:
    """``rank`` is what the plan hands back for one rank holding ``n_grads`` gradients."""
    if type(rank) is not dict or rank.keys() != {"kind", "outcome", "grads"}:
        return False
    kind, outcome = rank["kind"], rank["outcome"]
    if type(rank["grads"]) is not list or len(rank["grads"]) != n_grads:
        return False
    if kind == "hung":
        return outcome is None
    if kind == "ok":
        return type(outcome) is dict and outcome.keys() == {"ok"}
    if kind == "error":
        err = outcome.get("raised") if type(outcome) is dict and outcome.keys() == {"raised"} else None
        return type(err) is dict and all(type(err.get(key)) is t for key, t in
                                         (("type", str), ("bases", list), ("message", str)))
    return False


def _judge(cases, result) -> str:
    """Judge what :func:`amp_edu.plans.l11.unscale_and_sync_plan` sent back: per case, per rank,
    in three steps -- every rank answered, the ranks agree on ``found_inf``, every gradient was
    unscaled as torch's kernel unscales it."""
    if type(result) is not list or not 0 < len(result) <= len(cases) or not all(
            type(ranks) is list and len(ranks) == len(per_rank)
            and all(_readable_rank(rk, len(gs)) for rk, gs in zip(ranks, per_rank))
            for (_, per_rank, _), ranks in zip(cases, result)):
        raise _unreadable(cases, result)
    for (label, per_rank, scale_value), ranks in zip(cases, result):         # the plan stops after a hang
        scale = torch.tensor(scale_value, dtype=torch.float32)
        expected = [_reference(gs, scale) for gs in per_rank]
        any_found = any(f for _, f in expected)
        shown = f"{label}: {_show(per_rank, scale_value)}"
        want = f"float32 tensor of shape (1,), {'nonzero' if any_found else '0'} on both ranks"
        _judge_every_rank_answered(ranks, per_rank, shown, want)
        _judge_found_inf(ranks, expected, shown, want)
        _judge_unscaled_gradients(ranks, per_rank, expected, scale_value, shown)
    if len(result) != len(cases):                # cases left out, though none failed
        raise _unreadable(cases, result)
    return f"{len(cases)} cases, 2 emulated ranks (threads with real gloo all-reduces)"


def _unreadable(cases, result):
    return fail(NAME, expected=f"{len(cases)} answers", got=result,
                hint="the grader could not read your function's answers")


def _judge_every_rank_answered(ranks, per_rank, shown, want) -> None:
    """No rank raised or hung; where one did, say which rank left the other waiting, and why."""
    for rk in ranks:
        err = rk["outcome"]["raised"] if rk["kind"] == "error" else None
        if err is not None and "NotImplementedError" in (err["type"], *err["bases"]):
            raise fail(NAME, input=shown, expected=want, got="NotImplementedError", hint=NOT_DONE_HINT)
    for r, rk in enumerate(ranks):
        kind = rk["kind"]
        if kind == "ok":
            continue
        other = 1 - r
        if ranks[other]["kind"] == "ok" and not per_rank[other]:
            hint = (f"rank {other} holds no gradients and made no all-reduce (it returned early, or it "
                    f"all-reduces inside the loop over its gradients, which then runs zero times), so "
                    f"rank {r} waited for it until the timeout: every rank must call all_reduce once, "
                    "even with nothing to check (torch's ShardedGradScaler makes a found_inf for that case)")
        elif ranks[other]["kind"] == "ok" and 0 < len(per_rank[other]) < len(per_rank[r]):
            hint = (f"rank {r} holds {len(per_rank[r])} gradient tensors and rank {other} "
                    f"{len(per_rank[other])}: an all-reduce per tensor makes rank {r} wait for "
                    f"all-reduces that rank {other} never makes. Check every tensor first, then "
                    "all-reduce found_inf once, after the loop")
        elif kind == "hung":
            hint = "rank did not return within the time limit (an endless loop, or a collective no one else joined)"
        else:
            err = rk["outcome"]["raised"]
            hint = _error_hint(f"{err['type']}: {err['message']}")
        if kind == "hung":
            got = "no answer (hung)"
        else:
            err = rk["outcome"]["raised"]
            got = f"{err['type']}: {err['message'][:200]}"
        raise fail(NAME, input=f"{shown} [rank {r}]", expected=want, got=got, hint=hint)


def _judge_found_inf(ranks, expected, shown, want) -> None:
    """Every rank returned the same float32 ``(1,)`` tensor, nonzero iff some rank found an inf/NaN."""
    any_found = any(f for _, f in expected)
    results = [returned(NAME, rk["outcome"], input=f"{shown} [rank {r}]", expected=want)
               for r, rk in enumerate(ranks)]
    for r, got in enumerate(results):
        if not (type(got) is torch.Tensor and got.dtype == torch.float32 and tuple(got.shape) == (1,)):
            raise fail(NAME, input=f"{shown} [rank {r}]", expected=want, got=got,
                       hint="keep found_inf a float32 tensor of shape (1,) -- torch.zeros(1) then fill_(1.0): "
                            "the scaler's update() adds these tensors and compares with 1.0; a bool or int "
                            "tensor (or a Python bool) is not what it expects")
    nonzero = [bool(g.item() != 0) for g in results]
    local = [f for _, f in expected]
    if nonzero != [any_found] * WORLD:
        if nonzero == local:
            hint = ("each rank reported only its own shard: all-reduce found_inf over the group "
                    "(dist.all_reduce(found_inf, group=group)) before returning, or the ranks take "
                    "different skip decisions: each updates its shard on its own schedule, and the model "
                    "drifts away from the correctly trained one")
        elif all(local) and not any(nonzero):
            hint = ("both ranks found an inf: the SUM all-reduce gives 2.0, not 1.0 -- any nonzero "
                    "found_inf means skip; do not compare it with 1 (or use ReduceOp.MAX)")
        elif any_found and not any(local[r] == nonzero[r] for r in range(WORLD)):
            hint = "found_inf is nonzero when a gradient is NOT finite (torch.isfinite(g).all() is False)"
        else:
            hint = ("found_inf must be nonzero on every rank exactly when some rank's gradients held inf, "
                    "-inf or NaN before unscaling (check with torch.isfinite, before multiplying)")
        raise fail(NAME, input=shown, expected=want, got=[g.tolist() for g in results], hint=hint)
    if len({g.item() for g in results}) != 1:
        raise fail(NAME, input=shown, expected="the same found_inf on both ranks", got=[g.tolist() for g in results],
                   hint="return the all-reduced tensor itself, on every rank")


def _judge_unscaled_gradients(ranks, per_rank, expected, scale_value, shown) -> None:
    """Every gradient, bit for bit, is torch's ``g.mul_(inv)`` with ``inv`` the float32 1/scale."""
    for r in range(WORLD):
        for k, (a, b) in enumerate(zip(ranks[r]["grads"], expected[r][0])):
            if type(a) is torch.Tensor and same_bits(a, b):
                continue
            raise fail(NAME, input=f"{shown} [rank {r}, gradient #{k}]", expected=b, got=a,
                       hint=_unscale_hint(a, per_rank[r][k], scale_value))


def _unscale_hint(a, g0, scale_value: float) -> str:
    """What the learner's gradient ``a`` (from ``g0``) says about how it was unscaled."""
    scale = torch.tensor(scale_value, dtype=torch.float32)
    if type(a) is not torch.Tensor or a.dtype != g0.dtype or a.shape != g0.shape:
        return "each gradient becomes g.mul_(inv), in place, with inv = 1/scale as a float32 0-dim tensor"
    if torch.equal(bits(a), bits(g0)):
        return ("the gradients were not unscaled: multiply each one in place by the inverse "
                "scale (g.mul_(inv)) -- also when an inf was found (the step is skipped anyway)")
    if g0.dtype != torch.float32 and torch.equal(
            bits(a), bits(g0.clone().mul_(_ref.inverse_scale(scale).to(g0.dtype)))):
        return (f"the inverse scale was rounded to the gradients' dtype ({dtype_name(g0.dtype)}) before "
                "multiplying: keep inv a float32 tensor and call g.mul_(inv) -- each product is then "
                f"computed in float32 and rounded once to {dtype_name(g0.dtype)}, as torch's kernel "
                f"does; 1/{scale_value:g} in {dtype_name(g0.dtype)} is a different number")
    if torch.equal(bits(a), bits(g0 * scale_value)):
        return "you multiplied by the scale S: unscaling multiplies by 1/S"
    if g0.dtype == torch.float64 and torch.equal(bits(a), bits(g0.clone().mul_(1.0 / scale_value))):
        return ("the inverse stayed float64: round it to float32 (inv = scale.double().reciprocal()"
                ".float()), as torch's inv_scale is a float32 tensor -- a float64 gradient is multiplied "
                f"by the float32 1/{scale_value:g}, which is not the float64 one")
    if scale_value != 1.0 and (torch.equal(bits(a), bits(g0 / scale_value)) or torch.equal(
            bits(a), bits((g0.double() * (1.0 / scale_value)).to(g0.dtype)))):
        return ("multiply by the float32-rounded inverse: inv = scale.double().reciprocal().float() "
                "(or scale.reciprocal(): the same bits for a float32 scale), then g.mul_(inv). "
                "Dividing by S, or multiplying in float64 by the unrounded 1/S, rounds differently "
                "in the last bit for a scale like 3 -- and then your ranks would not match torch's scaler")
    return "each gradient becomes g.mul_(inv), in place, with inv = 1/scale as a float32 0-dim tensor"


check_unscale_and_sync = Check("unscale_and_sync_", cases=_all_cases, plan=unscale_and_sync_plan, judge=_judge)
"""Grade ``unscale_and_sync_(grads, scale, group) -> found_inf`` (see the module docstring)."""
