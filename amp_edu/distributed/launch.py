"""Run one function in several processes, as torch.distributed ranks, from a script or a notebook.

Data-parallel training runs the *same* program in ``world_size`` processes (*ranks*) that talk
through collectives (all-reduce, all-gather, reduce-scatter). On GPUs each rank owns one GPU and
the collectives go through NCCL; on a CPU the ``gloo`` backend runs them between processes on one
machine, so everything in this lesson runs on a laptop.

:func:`launch` is the whole machinery, written to be safe to call from a Jupyter kernel::

    results = launch(fn, 20, world_size=2, backend="gloo", timeout_s=120)
    # fn(rank, world_size, 20) ran in 2 processes; results[r] is what rank r returned

What it does, in order:

1. **A fresh rendezvous.** The parent opens a ``TCPStore`` on ``127.0.0.1``, on a port the OS
   picks (port 0), and keeps it for the run; the ranks connect to it and
   ``init_process_group`` over it. No fixed ``MASTER_PORT`` that a previous crashed run may hold.
2. **Spawned ranks, the function sent by value where it must be.** ``multiprocessing``'s *spawn*
   start method starts fresh interpreters: a forked copy of a Jupyter kernel carries its threads'
   locks and OpenMP's thread pool in whatever state they were, which can hang the child. Spawn
   would send ``fn`` *by name*, which a fresh interpreter can only follow for a function of an
   importable module. A function written in a notebook cell (the kernel's ``__main__``), in a
   script's ``__main__``, a lambda or a nested function is sent **by value** instead
   (:mod:`.byvalue`: its code, the globals it reads, its closure), as cloudpickle does, so
   ``launch`` takes all of them (``accelerate.notebook_launcher`` gets there by forking instead).
   From a script, call ``launch`` under ``if __name__ == "__main__":`` (spawned children
   re-import the script, as with ``torch.multiprocessing.spawn``).
   Each rank makes itself a process-group leader, so it and anything it starts are killed together.
3. **Progress and results over a queue.** A rank calls :func:`progress` (``"step 3/20 ..."``); the
   parent prints it as ``[rank 1] step 3/20 ...`` while it waits. A rank's return value is pickled
   *in the rank* and sent back; an exception is sent with its traceback text.
4. **Bounded and clean.** A rank that raises makes the parent kill the others (they would wait
   forever in their next collective) and raise ``RuntimeError`` naming the rank and its error; a
   rank that dies silently (killed, segfault) the same; past ``timeout_s``, ``TimeoutError``. In
   every case -- success, error, timeout, Ctrl-C in the parent -- every rank's process group is
   killed, every process joined and checked dead, and the store's port closed.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import pickle
import queue as _queue
import signal
import time
import traceback
import types
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..validate import check_int, check_number
from . import byvalue

__all__ = ["launch", "progress", "current", "RankInfo", "pick_backend", "backend_sentence", "BACKENDS",
           "leftovers", "LAST_RUN"]

BACKENDS = ("gloo", "nccl")
MAX_WORLD_SIZE = 64
_HOST = "127.0.0.1"


@dataclass(frozen=True)
class RankInfo:
    """What a running rank knows about itself: see :func:`current`."""

    rank: int
    world_size: int
    backend: str
    device: torch.device


_CURRENT: RankInfo | None = None     # set in each rank by _worker
LAST_RUN: dict = {}                  # the parent's record of the latest launch: port, pids (for tests)
_QUEUE = None                        # the rank's end of the parent's queue


def current() -> RankInfo:
    """Inside a rank started by :func:`launch`: its rank, world size, backend and device
    (``cuda:<rank>`` on NCCL, the CPU on gloo). Outside one: a ``RuntimeError``."""
    if _CURRENT is None:
        raise RuntimeError("amp_edu.distributed.current() is only available inside a rank started by launch()")
    return _CURRENT


def progress(message: str) -> None:
    """Send one progress line to the parent, which prints it as ``[rank r] message``.

    Outside a rank (a plain call in the notebook) it prints the line itself, so the per-rank
    functions also run, unchanged, in one process.
    """
    if _QUEUE is None or _CURRENT is None:
        print(message, flush=True)
        return
    _QUEUE.put(("progress", _CURRENT.rank, str(message)))


def pick_backend(world_size: int = 2) -> str:
    """``"nccl"`` when there are at least ``world_size`` CUDA GPUs and NCCL is built in, else ``"gloo"``."""
    _check_world_size(world_size)
    if torch.cuda.is_available() and torch.cuda.device_count() >= world_size and torch.distributed.is_nccl_available():
        return "nccl"
    return "gloo"


def backend_sentence(backend: str, world_size: int = 2) -> str:
    """One sentence for a lesson: which backend ran and why."""
    _check_backend(backend)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "nccl":
        return f"{world_size} ranks on NCCL, one GPU each ({gpus} GPUs found)."
    why = "no GPU found" if gpus == 0 else f"{gpus} GPU(s) found, fewer than {world_size} ranks need for NCCL"
    return f"{world_size} ranks on gloo, CPU processes on this machine ({why})."


def _pid_alive(pid: int) -> bool:
    """Is process ``pid`` running (a zombie, dead but not yet reaped, counts as gone)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # exists, owned by someone else (a reused pid)
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[-1][:1] != "Z"
    except OSError:                  # no /proc (macOS): os.kill succeeded, so it exists
        return True


def leftovers(run: dict | None = None) -> dict:
    """What the latest :func:`launch` (or ``run``, a copy of :data:`LAST_RUN`) left behind:
    ``{"alive": [pids still running], "port": p, "port_free": bool}``. Both empty/True after
    every launch, whatever happened in it."""
    import socket
    run = LAST_RUN if run is None else run
    if not run:
        raise RuntimeError("no launch has run yet in this process")
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((_HOST, run["port"]))
        free = True
    except OSError:
        free = False
    finally:
        s.close()
    return {"alive": [p for p in run["pids"] if _pid_alive(p)], "port": run["port"], "port_free": free}


# --------------------------------------------------------------------------------------------
# argument checks
# --------------------------------------------------------------------------------------------

def _check_world_size(world_size) -> None:
    check_int(world_size, "world_size", min=1, max=MAX_WORLD_SIZE)


def _check_backend(backend) -> None:
    if not isinstance(backend, str):
        raise TypeError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {type(backend).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")


def _check_fn(fn) -> None:
    if not isinstance(fn, types.FunctionType):
        raise TypeError("fn must be a Python function fn(rank, world_size, *args) (from a module, a script or a "
                        f"notebook cell); got {type(fn).__name__}")


def _check_timeout(timeout_s) -> float:
    return check_number(timeout_s, "timeout_s (seconds)", positive=True)


# --------------------------------------------------------------------------------------------
# inside a rank
# --------------------------------------------------------------------------------------------

def _threads_per_rank(world_size: int) -> int:
    """Ranks share the machine's cores: give each its share, at least one thread."""
    return max(1, (os.cpu_count() or 1) // world_size)


def _send_error(q, rank: int, exc: BaseException) -> None:
    q.put(("error", rank, f"{type(exc).__name__}: {exc}", traceback.format_exc(), time.time()))


def _worker(payload, rank, world_size, backend, port, timeout_s, q) -> None:
    """The body of one rank: join the group, run ``fn``, send back its result or error.
    ``payload`` is ``(fn, args)`` pickled by :func:`.byvalue.dumps`."""
    global _CURRENT, _QUEUE
    try:
        os.setpgid(0, 0)             # our own process group: the parent kills it as a whole
    except OSError:
        pass
    _QUEUE = q
    import torch.distributed as dist
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            torch.set_num_threads(_threads_per_rank(world_size))
            device = torch.device("cpu")
        _CURRENT = RankInfo(rank, world_size, backend, device)
        timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore(_HOST, port, world_size=None, is_master=False, timeout=timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
        try:
            fn, args = byvalue.loads(payload)
            result = fn(rank, world_size, *args)
            payload = pickle.dumps(result)       # here, so an unpicklable result is this rank's error
        except BaseException as exc:  # noqa: BLE001
            # report *before* leaving the group: leaving makes the other ranks fail too, and the
            # parent should hear the cause first (it also compares the times of the reports)
            _send_error(q, rank, exc)
            return
        finally:
            dist.destroy_process_group()
        q.put(("result", rank, payload))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        _send_error(q, rank, exc)
    finally:
        q.close()
        q.join_thread()           # flush the queue before the process ends


# --------------------------------------------------------------------------------------------
# the parent
# --------------------------------------------------------------------------------------------

def _kill(procs) -> None:
    """SIGKILL each living rank's process group (the rank and anything it started), then join."""
    for p in procs:
        if p.pid is None:
            continue
        for target in (-p.pid, p.pid):          # the group, or the process if setpgid did not run yet
            try:
                os.kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    for p in procs:
        if p.pid is not None:
            p.join(timeout=10)


def _first_failure(msg, q, procs, results, wait_s: float = 1.0) -> RuntimeError:
    """The error to raise once some rank has failed. When one rank fails, the others usually fail
    too a moment later ("connection closed by peer"): listen a little longer and blame the rank
    whose error came *first* (by its own clock), naming the others."""
    errors = {msg[1]: msg}
    end = time.monotonic() + wait_s
    while time.monotonic() < end and len(errors) + len(results) < len(procs):
        try:
            m = q.get(timeout=0.05)
        except _queue.Empty:
            continue
        if m[0] == "error":
            errors[m[1]] = m
    first = min(errors.values(), key=lambda m: m[4])
    rank, text, tb = first[1], first[2], first[3]
    others = "".join(f"\n(then rank {r}: {m[2][:200]})" for r, m in sorted(errors.items()) if r != rank)
    return RuntimeError(f"rank {rank} failed: {text}{others}\n\n--- traceback of rank {rank} ---\n{tb}")


def _print_progress(rank: int, message: str) -> None:
    print(f"[rank {rank}] {message}", flush=True)


def launch(fn: Callable, *args: Any, world_size: int = 2, backend: str = "gloo", timeout_s: float = 300.0,
           progress: bool | Callable[[int, str], None] = True) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` processes; return their results in rank order.

    Args:
        fn: a function ``fn(rank, world_size, *args)``: from an importable module (sent by name),
            or from a notebook cell, a script's ``__main__``, a lambda or a closure (sent by value,
            see :mod:`.byvalue`).
        args: passed to every rank (pickled the same way).
        world_size: number of ranks, 1 to 64.
        backend: ``"gloo"`` (CPU processes, any machine) or ``"nccl"`` (one GPU per rank; needs
            ``world_size`` GPUs). :func:`pick_backend` chooses.
        timeout_s: the whole run, start-up included; also each collective's timeout in the ranks.
        progress: ``True`` prints each rank's :func:`progress` lines as ``[rank r] ...``; ``False``
            drops them; a callable ``progress(rank, message)`` receives them.

    Raises ``RuntimeError`` naming the first rank that failed and its error (with that rank's
    traceback), ``TimeoutError`` past ``timeout_s``. No rank survives the call.
    """
    timeout_s = _check_launch(fn, world_size, backend, timeout_s, progress)
    show = _print_progress if progress is True else (progress or None)
    payload = byvalue.dumps((fn, args))          # here: what cannot be sent is a TypeError before any rank starts

    import torch.distributed as dist
    deadline = time.monotonic() + timeout_s
    ctx = mp.get_context("spawn")
    store = dist.TCPStore(_HOST, 0, world_size=None, is_master=True,         # step 1: a fresh rendezvous
                          timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
    LAST_RUN.clear()
    LAST_RUN.update(port=store.port, pids=[])
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(payload, r, world_size, backend, store.port, timeout_s, q),
                         name=f"amp_edu-rank{r}", daemon=True) for r in range(world_size)]
    try:
        for p in procs:                                                      # step 2: spawned ranks
            p.start()
            LAST_RUN["pids"].append(p.pid)
        results = _wait_for_results(q, procs, deadline, timeout_s, show)    # step 3
        # every result is in: nothing more can come from the ranks, and a process that has
        # imported torch takes seconds to shut down -- stop them now rather than wait
        _kill(procs)
        return [results[r] for r in range(world_size)]
    finally:                                                                 # step 4: bounded and clean
        _kill(procs)                         # on any exit path: error, timeout, KeyboardInterrupt
        alive = [r for r, p in enumerate(procs) if p.pid is not None and p.is_alive()]
        q.close()
        q.cancel_join_thread()
        del store                            # closes the rendezvous port
        if alive:
            raise RuntimeError(f"ranks {alive} are still alive after SIGKILL")


def _check_launch(fn, world_size, backend, timeout_s, progress) -> float:
    """Refuse bad arguments before anything starts; the timeout as a float."""
    _check_fn(fn)
    _check_world_size(world_size)
    _check_backend(backend)
    timeout_s = _check_timeout(timeout_s)
    if not (isinstance(progress, bool) or callable(progress)):
        raise TypeError(f"progress must be True, False or a callable(rank, message), got {type(progress).__name__}")
    if backend == "nccl":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n < world_size:
            raise ValueError(f"backend 'nccl' needs one GPU per rank: world_size={world_size} but {n} GPU(s) "
                             "found; use backend='gloo' (or pick_backend())")
    return timeout_s


def _wait_for_results(q, procs, deadline: float, timeout_s: float, show) -> dict[int, Any]:
    """Read the ranks' messages until every rank has sent its result: progress lines are shown, the
    first error is raised (:func:`_first_failure`), so are a rank that died without a word and the
    deadline."""
    world_size = len(procs)
    results: dict[int, Any] = {}
    last: dict[int, str] = {}
    while len(results) < world_size:
        left = deadline - time.monotonic()
        if left <= 0:
            waiting = [r for r in range(world_size) if r not in results]
            where = "; ".join(f"rank {r} last said {last[r]!r}" if r in last else f"rank {r} said nothing"
                              for r in waiting)
            raise TimeoutError(f"ranks {waiting} did not finish within timeout_s={timeout_s:g} s ({where})")
        try:
            msg = q.get(timeout=min(0.2, left))
        except _queue.Empty:
            dead = [r for r, p in enumerate(procs) if r not in results and p.exitcode is not None]
            if dead:
                time.sleep(0.2)                       # a last message may still be in the pipe
                if q.empty():
                    r = dead[0]
                    raise RuntimeError(f"rank {r} exited with code {procs[r].exitcode} without a result "
                                       "(killed, out of memory, or crashed in native code; from a script, "
                                       "call launch() under `if __name__ == '__main__':`, since spawned "
                                       "ranks import the script)")
            continue
        kind, rank = msg[0], msg[1]
        if kind == "progress":
            last[rank] = msg[2]
            if show:
                show(rank, msg[2])
        elif kind == "result":
            results[rank] = pickle.loads(msg[2])
        else:
            raise _first_failure(msg, q, procs, results)
    return results
