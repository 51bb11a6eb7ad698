"""The judge: where a check's cases are drawn and its verdict is reached, away from learner code.

The class grader splits every check (:class:`amp_edu.checks.core.Check`) in two. The *plan* runs in
the learner's kernel; the *cases*, the *reference* and the *comparison* run here, in a process of
its own that imports the course's checks from the grader's own package and never executes a line
of a submission. The two talk through files of plain values (:mod:`amp_edu.plans.byvalue`)::

    grader                      judge process                      learner's kernel
    seed = secrets.randbits  →  inputs(check, seed, in.bin)
                                  cases = check.cases(seed) → in.bin
                             ←  plan's location
    run plan in the kernel   ───────────────────────────────────→  runner.run(plan, in.bin, out.bin, fn)
    verdict(check, seed, out.bin) → cases again (same seed), byvalue.load(out.bin),
                                    check.verdict(cases, sent) → pass line | FAIL message

The seed never enters the kernel, so the learner's code sees a check's inputs only when it is
asked to answer them, and a fresh seed each grading run makes a table of remembered answers
useless. Nothing the kernel writes is trusted: :func:`amp_edu.plans.byvalue.load` rebuilds plain
values from bytes (no unpickling), so no object of the learner's reaches the comparison.

Run as ``python -m amp_edu.course.judge``, the judge answers one JSON request per line on stdin
with one JSON line on stdout (:func:`serve`). :class:`Judge` is the grader's handle on it: started
on first use, one request at a time, killed and restarted when a request runs past its limit.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from . import ROOT

__all__ = ["Judge", "JudgeError", "inputs", "verdict", "serve"]


class JudgeError(RuntimeError):
    """The judge process could not answer (it died, or ran past its time limit)."""


# -- inside the judge process -----------------------------------------------------------------
def _check(module: str, function: str):
    from ..checks import registry

    return registry.check(module, function)


@functools.lru_cache(maxsize=4)
def _cases_bytes(module: str, function: str, seed: int) -> bytes:
    from ..plans import byvalue

    return byvalue.dumps(_check(module, function).cases(seed))


def inputs(module: str, function: str, seed: int, path: str) -> dict:
    """Write the check's cases for ``seed`` to ``path``; say where its plan is."""
    check = _check(module, function)
    Path(path).write_bytes(_cases_bytes(module, function, seed))
    return {"plan": [check.plan.__module__, check.plan.__qualname__]}


def verdict(module: str, function: str, seed: int, path: str) -> dict:
    """``{"status": "pass" | "fail" | "error", "message": ...}`` for the answer the plan wrote to ``path``."""
    from ..checks.core import CheckFailed
    from ..plans import byvalue

    check = _check(module, function)
    cases = byvalue.loads(_cases_bytes(module, function, seed))        # a fresh copy: judges may mutate
    if not os.path.exists(path):
        return {"status": "error", "message": f"the check `{check.name}` wrote no answer (the kernel "
                                              "did not finish the check's plan)"}
    try:
        sent = byvalue.load(path)
    except byvalue.ByValueError as exc:
        return {"status": "fail", "message": f"FAIL {check.name}\n  the answer could not be read by value: {exc}\n"
                                             "  hint:     return plain values (float, str, list, torch.Tensor), "
                                             "not objects of your own classes"}
    try:
        return {"status": "pass", "message": check.verdict(cases, sent)}
    except CheckFailed as exc:
        return {"status": "fail", "message": str(exc)}


def serve(stdin=None, stdout=None) -> None:
    """Answer requests ``{"op": "inputs" | "verdict", "module", "function", "seed", "path"}``, one
    JSON line each, until stdin closes. A request that raises answers ``{"status": "error"}``."""
    stdin = stdin or sys.stdin
    out = stdout or sys.stdout
    sys.stdout = sys.stderr                  # anything a check prints must not corrupt the replies
    import torch

    torch.set_num_threads(1)                 # references are small; the kernels need the cores
    for line in stdin:
        try:
            req = json.loads(line)
            op = {"inputs": inputs, "verdict": verdict}[req["op"]]
            reply = op(req["module"], req["function"], int(req["seed"]), req["path"])
        except Exception as exc:  # noqa: BLE001 - a judge bug is an error row, not a dead grader
            reply = {"status": "error", "message": f"the judge failed: {type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


# -- the grader's handle ----------------------------------------------------------------------
class Judge:
    """A judge process, started on first use; :meth:`ask` is thread-safe (one request at a time).

    ``env``: variables the checks' cases depend on (``AMP_EDU_SMOKE``), set as in the kernels.
    """

    def __init__(self, env: dict | None = None):
        self.env = dict(env or {})
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._log = tempfile.TemporaryFile()

    def _start(self) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JPY_")}
        env.update(self.env, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
        return subprocess.Popen([sys.executable, "-m", "amp_edu.course.judge"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=self._log, cwd=tempfile.gettempdir(),
                                env=env, text=True, bufsize=1, start_new_session=True)

    def ask(self, request: dict, timeout: float) -> dict:
        """Send ``request``; its reply, or :class:`JudgeError` after ``timeout`` seconds (the judge is
        then killed, and the next request starts a new one)."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            proc = self._proc
            reply: list[str] = []
            reader = threading.Thread(target=lambda: reply.append(proc.stdout.readline()), daemon=True)
            try:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
            except OSError as exc:
                self._kill()
                raise JudgeError(f"the judge process is gone ({exc})") from None
            reader.start()
            reader.join(timeout)
            if reader.is_alive() or not reply or not reply[0]:
                why = "did not answer within {:g} s".format(timeout) if reader.is_alive() else "died"
                self._kill()
                raise JudgeError(f"the judge {why} ({request.get('op')} of {request.get('function')})")
            return json.loads(reply[0])

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.stdin.close()
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            self._kill()
        self._log.close()

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":
    serve()
