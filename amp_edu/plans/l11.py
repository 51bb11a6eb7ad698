"""Kernel side of exercise 11: emulated ranks, and the plan that runs ``unscale_and_sync_`` on them.

:func:`run_ranks` (which the exercise notebook uses too) runs a function on two or more *emulated*
ranks: threads, each with its own gloo process group over one in-memory store, so the collectives
are real gloo all-reduces and take a second or two, not process launches. A rank that skips a
collective leaves the others waiting until the group's timeout, and its outcome says which rank
returned, which raised and which hung.

:func:`unscale_and_sync_plan` calls the learner's ``unscale_and_sync_(grads, scale, group)`` on
every rank of each case and hands back, per rank, what happened (``ok``, ``error`` or ``hung``),
the ``found_inf`` returned and the rank's gradients after the call (they are unscaled in place).
It decides nothing (it only stops after a case where a rank hung): the reference and the hints
are the judge's (``amp_edu.checks.l11``).
"""

from __future__ import annotations

import builtins
import datetime
import itertools
import threading
import time
from typing import Callable

import torch
import torch.distributed as dist

from .runner import call

__all__ = ["run_ranks", "unscale_and_sync_plan", "WORLD"]

WORLD = 2
_TIMEOUT_S = 3.0
_counter = itertools.count()
_device: list = []                   # the loopback gloo device every emulated rank shares (made once)


def _group_options(timeout_s: float):
    """Options for an emulated rank's group: one loopback device for all of them (making a device
    per group, as the plain constructor does, costs more than the collectives), or, where this torch
    has no such options, just the timeout."""
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        if not _device:
            _device.append(dist.ProcessGroupGloo.create_device(hostname="127.0.0.1"))
        options = dist.ProcessGroupGloo._Options()
        options._devices = [_device[0]]
        options._timeout = timeout
        return options
    except (AttributeError, RuntimeError, TypeError):
        return timeout


def run_ranks(fn, per_rank_args, timeout_s: float = _TIMEOUT_S) -> list:
    """Call ``fn(*per_rank_args[r], group)`` for each emulated rank ``r`` at the same time, in
    threads, each with its own gloo group of ``len(per_rank_args)`` ranks; returns, per rank,
    ``("ok", result)``, ``("error", exception)`` or ``("hung", None)`` (not returned within
    ``2 * timeout_s + 2`` seconds: the group's own timeout ends a collective no one joined sooner)."""
    world = len(per_rank_args)
    store = dist.PrefixStore(f"l11-{next(_counter)}", dist.HashStore())
    out: list = [("hung", None)] * world
    options = _group_options(timeout_s)
    connected = threading.Barrier(world)     # no rank starts (and ends, closing its group) before all are connected

    def body(r):
        try:
            group = dist.ProcessGroupGloo(store, r, world, options)
        except BaseException as exc:  # noqa: BLE001 - reported to the learner
            connected.abort()
            out[r] = ("error", exc)
            return
        try:
            connected.wait(timeout_s)
        except threading.BrokenBarrierError:
            pass
        try:
            out[r] = ("ok", fn(*per_rank_args[r], group))
        except BaseException as exc:  # noqa: BLE001 - reported to the learner
            out[r] = ("error", exc)

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 2 * timeout_s + 2.0       # a collective's own timeout fires first
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return out


def _raised(exc: BaseException) -> dict:
    """An exception by value, as :func:`amp_edu.plans.runner.call` records one."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        message = "(its message could not be read)"
    bases = [c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c]
    return {"type": type(exc).__name__, "bases": bases, "message": message[:2000]}


def unscale_and_sync_plan(cases, unscale_and_sync_: Callable) -> list[list[dict]]:
    """For each case ``(label, [rank 0's grads, rank 1's grads, ...], scale)``: the learner's
    function on every rank at once (:func:`run_ranks`), each rank with copies of its gradients
    and a float32 0-dim ``scale``. Per case, per rank: ``{"kind": "ok" | "error" | "hung",
    "outcome": {"ok": found_inf} | {"raised": error} | None, "grads": [its gradients after the
    call]}``.

    A rank that hung is still running, in a thread of this kernel: the plan stops after that case
    (the judge reads the cases up to it), as the next cases would only queue behind it."""
    out = []
    for _label, per_rank, scale_value in cases:
        scale = torch.tensor(scale_value, dtype=torch.float32)
        theirs = [[g.clone() for g in gs] for gs in per_rank]
        # each rank gets a list of its own: the tensors are the ones handed back, whatever the
        # function does to the list
        ranks = run_ranks(lambda grads, s, group: call(unscale_and_sync_, grads, s, group),
                          [(list(theirs[r]), scale.clone()) for r in range(len(per_rank))])
        case = []
        for r, (kind, value) in enumerate(ranks):
            if kind == "ok":                                 # value: call()'s outcome
                kind, outcome = ("error" if "raised" in value else "ok"), value
            elif kind == "error":                            # raised outside call(): a BaseException
                outcome = {"raised": _raised(value)}
            else:
                outcome = None
            case.append({"kind": kind, "outcome": outcome, "grads": theirs[r]})
        out.append(case)
        if any(rank["kind"] == "hung" for rank in case):
            break
    return out
