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
torch's kernels) and the rule "nonzero everywhere iff any rank found an inf/NaN".
"""

from __future__ import annotations

import datetime
import itertools
import math
import threading

import torch
import torch.distributed as dist

from .. import scaler as _ref
from ..formats import dtype_name
from .core import NOT_DONE_HINT, bits, fail, passed, require_callable, same_bits

__all__ = ["check_unscale_and_sync", "run_ranks", "CASES"]

INF, NAN = math.inf, math.nan
WORLD = 2
_TIMEOUT_S = 3.0
_counter = itertools.count()


def run_ranks(fn, per_rank_args, timeout_s: float = _TIMEOUT_S) -> list:
    """Call ``fn(*per_rank_args[r], group)`` for each emulated rank ``r`` at the same time, in
    threads, each with its own gloo group of ``len(per_rank_args)`` ranks; returns, per rank,
    ``("ok", result)``, ``("error", exception)`` or ``("hung", None)``."""
    world = len(per_rank_args)
    store = dist.PrefixStore(f"l11-{next(_counter)}", dist.HashStore())
    out: list = [("hung", None)] * world

    def body(r):
        try:
            group = dist.ProcessGroupGloo(store, r, world, datetime.timedelta(seconds=timeout_s))
            out[r] = ("ok", fn(*per_rank_args[r], group))
        except BaseException as exc:  # noqa: BLE001 - reported to the learner
            out[r] = ("error", exc)

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 5.0)
    return out


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


CASES = [label for label, _, _ in _cases()]


def _show(per_rank, scale) -> str:
    def one(gs):
        return "[" + ", ".join(f"{g.flatten()[:3].tolist()}{'...' if g.numel() > 3 else ''} ({dtype_name(g.dtype)})"
                               for g in gs) + "]"
    return f"rank 0 grads {one(per_rank[0])}, rank 1 grads {one(per_rank[1])}, scale {scale!r}"


def _error_hint(exc: BaseException, label: str) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if "Default process group has not been initialized" in text:
        return "pass the group: dist.all_reduce(found_inf, group=group) -- there is no default group here"
    if "imed out" in text or "Timeout" in text or "timeout" in text:
        return ("this rank waited in a collective the other rank never joined: every rank must call "
                "all_reduce exactly once per call -- also a rank with no gradients, and not once per tensor "
                "(ranks hold different numbers of tensors)")
    return "your function raised on this input"


def check_unscale_and_sync(unscale_and_sync_) -> None:
    """Grade ``unscale_and_sync_(grads, scale, group) -> found_inf`` (see the module docstring)."""
    name = "unscale_and_sync_"
    require_callable(name, unscale_and_sync_)
    n = 0
    for label, per_rank, scale_value in _cases():
        scale = torch.tensor(scale_value, dtype=torch.float32)
        expected = [_reference(gs, scale) for gs in per_rank]
        any_found = any(f for _, f in expected)
        theirs = [[g.clone() for g in gs] for gs in per_rank]
        shown = f"{label}: {_show(per_rank, scale_value)}"
        want = f"float32 tensor of shape (1,), {'nonzero' if any_found else '0'} on both ranks"
        outcome = run_ranks(unscale_and_sync_, [(theirs[r], scale.clone()) for r in range(WORLD)])
        for r, (kind, value) in enumerate(outcome):
            if kind == "error" and isinstance(value, NotImplementedError):
                raise fail(name, input=shown, expected=want, got="NotImplementedError", hint=NOT_DONE_HINT)
        for r, (kind, value) in enumerate(outcome):
            if kind == "ok":
                continue
            other = 1 - r
            if outcome[other][0] == "ok" and not per_rank[other]:
                hint = (f"rank {other} holds no gradients and made no all-reduce (it returned early, or it "
                        f"all-reduces inside the loop over its gradients, which then runs zero times), so "
                        f"rank {r} waited for it until the timeout: every rank must call all_reduce once, "
                        "even with nothing to check (torch's ShardedGradScaler makes a found_inf for that case)")
            elif outcome[other][0] == "ok" and 0 < len(per_rank[other]) < len(per_rank[r]):
                hint = (f"rank {r} holds {len(per_rank[r])} gradient tensors and rank {other} "
                        f"{len(per_rank[other])}: an all-reduce per tensor makes rank {r} wait for "
                        f"all-reduces that rank {other} never makes. Check every tensor first, then "
                        "all-reduce found_inf once, after the loop")
            elif kind == "hung":
                hint = "rank did not return within the time limit (an endless loop, or a collective no one else joined)"
            else:
                hint = _error_hint(value, label)
            got = "no answer (hung)" if kind == "hung" else f"{type(value).__name__}: {str(value)[:200]}"
            raise fail(name, input=f"{shown} [rank {r}]", expected=want, got=got, hint=hint)
        results = [value for _, value in outcome]
        for r, got in enumerate(results):
            if not (isinstance(got, torch.Tensor) and got.dtype == torch.float32 and tuple(got.shape) == (1,)):
                raise fail(name, input=f"{shown} [rank {r}]", expected=want, got=got,
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
            raise fail(name, input=shown, expected=want, got=[g.tolist() for g in results], hint=hint)
        if len({g.item() for g in results}) != 1:
            raise fail(name, input=shown, expected="the same found_inf on both ranks", got=[g.tolist() for g in results],
                       hint="return the all-reduced tensor itself, on every rank")
        for r in range(WORLD):
            for k, (a, b) in enumerate(zip(theirs[r], expected[r][0])):
                if same_bits(a, b):
                    continue
                g0 = per_rank[r][k]
                if torch.equal(bits(a), bits(g0)):
                    hint = ("the gradients were not unscaled: multiply each one in place by the inverse "
                            "scale (g.mul_(inv)) -- also when an inf was found (the step is skipped anyway)")
                elif g0.dtype != torch.float32 and torch.equal(
                        bits(a), bits(g0.clone().mul_(_ref.inverse_scale(scale).to(g0.dtype)))):
                    hint = (f"the inverse scale was rounded to the gradients' dtype ({dtype_name(g0.dtype)}) before "
                            "multiplying: keep inv a float32 tensor and call g.mul_(inv) -- each product is then "
                            f"computed in float32 and rounded once to {dtype_name(g0.dtype)}, as torch's kernel "
                            f"does; 1/{scale_value:g} in {dtype_name(g0.dtype)} is a different number")
                elif torch.equal(bits(a), bits(g0 * scale_value)):
                    hint = "you multiplied by the scale S: unscaling multiplies by 1/S"
                elif g0.dtype == torch.float64 and torch.equal(bits(a), bits(g0.clone().mul_(1.0 / scale_value))):
                    hint = ("the inverse stayed float64: round it to float32 (inv = scale.double().reciprocal()"
                            ".float()), as torch's inv_scale is a float32 tensor -- a float64 gradient is multiplied "
                            f"by the float32 1/{scale_value:g}, which is not the float64 one")
                elif scale_value != 1.0 and (torch.equal(bits(a), bits(g0 / scale_value)) or torch.equal(
                        bits(a), bits((g0.double() * (1.0 / scale_value)).to(g0.dtype)))):
                    hint = ("multiply by the float32-rounded inverse: inv = scale.double().reciprocal().float() "
                            "(or scale.reciprocal(): the same bits for a float32 scale), then g.mul_(inv). "
                            "Dividing by S, or multiplying in float64 by the unrounded 1/S, rounds differently "
                            "in the last bit for a scale like 3 -- and then your ranks would not match torch's scaler")
                else:
                    hint = "each gradient becomes g.mul_(inv), in place, with inv = 1/scale as a float32 0-dim tensor"
                raise fail(name, input=f"{shown} [rank {r}, gradient #{k}]", expected=b, got=a, hint=hint)
        n += 1
    passed(name, f"{n} cases, 2 emulated ranks (threads with real gloo all-reduces)")
