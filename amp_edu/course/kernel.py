"""A Jupyter kernel on a short leash: every wait bounded, death noticed, the whole process tree killed.

Grading a class means running code nobody has reviewed. A learner's cell may never return
(``while True: time.sleep(1)``), may kill its own process (``os._exit(3)``, a segfault, the
out-of-memory killer), or may start children of its own. A grader that waits on the kernel the way
an editor does hangs with it. This module talks to ipykernel directly so that no wait is unbounded::

    with JupyterKernel(cwd=tmp, env={"AMP_EDU_SMOKE": "1"}) as k:
        out = k.run("print(1 + 1)", timeout=5)      # -> CellRun(status="ok", stdout="2\\n", ...)
        out = k.run("while True: pass", timeout=5)  # -> CellRun(status="timeout") after ~5 s
    # leaving the block kills the kernel's process group and checks that nothing of it is left

How it stays in control:

* **Its own process group.** The kernel is started with ``start_new_session=True``, so it and
  everything it spawns (a ``!sleep 1000``, a ``subprocess.Popen``) share one process group that a
  single ``killpg(SIGKILL)`` ends. Descendants that left the group are collected with ``psutil``
  before the kill and killed one by one; :meth:`JupyterKernel.kill` then *verifies* that none is left.
* **Polling, never blocking.** :meth:`JupyterKernel.run` waits on the kernel's sockets in slices of
  :data:`POLL_S` seconds, and between slices checks the deadline, whether the process is still
  alive (``Popen.poll()``), and an optional ``stop`` event (Ctrl-C / SIGTERM of the grader). A dead
  kernel is therefore reported within a fraction of a second, a hung one at its deadline.
* **Private sockets.** The kernel listens on ``ipc://`` sockets inside its own temporary folder, so
  kernels started in parallel can never race for a TCP port.
* **Orphan-proof.** ``JPY_PARENT_PID`` makes ipykernel exit by itself if the grader is killed
  outright (``kill -9``), the one case no ``finally`` can handle (in the sandbox, bubblewrap's
  ``--die-with-parent`` does it instead).
* **Sandboxed** when given an :class:`~amp_edu.course.sandbox.Isolation` of mode ``bwrap``: the
  kernel runs inside bubblewrap (:mod:`amp_edu.course.sandbox`) in its own pid namespace, so killing
  the sandbox kills every process in it — a double-forked ``setsid`` daemon too. Without a sandbox,
  every process a kernel starts inherits a random token in its environment, and :meth:`JupyterKernel.kill`
  also kills processes carrying it that escaped the tree. Either way :attr:`JupyterKernel.leftovers` names
  what the notebook left running, and the environment is :func:`~amp_edu.course.sandbox.kernel_env`,
  never the grader's.

Every live kernel is listed in :data:`LIVE`; :func:`kill_all` ends them all (signal handlers and
``atexit`` call it).
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import zmq
from jupyter_client.session import Session

from . import ROOT, sandbox

POLL_S = 0.1                 # how often a wait wakes up to check deadline, liveness and stop
MAX_OUTPUT = 1_000_000       # characters of stdout (and of stderr) kept per cell

LIVE: set["JupyterKernel"] = set()
_LIVE_LOCK = threading.Lock()


class KernelError(RuntimeError):
    """The kernel could not be started (or stopped answering while starting)."""


@dataclass
class CellRun:
    """What running one cell produced.

    ``status`` is ``"ok"``, ``"error"`` (the cell raised; ``ename``/``evalue``/``traceback`` set),
    ``"timeout"`` (still running at the deadline; the kernel has been killed), ``"died"`` (the
    kernel process ended while running it; ``exit_detail`` says how) or ``"stopped"`` (the ``stop``
    event was set; the kernel has been killed).
    """

    status: str
    stdout: str = ""
    stderr: str = ""
    ename: str = ""
    evalue: str = ""
    traceback: list[str] = field(default_factory=list)
    seconds: float = 0.0
    exit_detail: str = ""
    expressions: dict = field(default_factory=dict)     # the reply's ``user_expressions``


def describe_exit(returncode: int | None) -> str:
    """``'exit status 3'`` / ``'killed by SIGSEGV'`` — how a process ended, in words."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        extra = " (often the out-of-memory killer)" if -returncode == signal.SIGKILL else ""
        return f"killed by {name}{extra}"
    return f"exit status {returncode}"


class JupyterKernel:
    """An ipykernel running this interpreter (``sys.executable``) in ``cwd``.

    Its environment is :func:`~amp_edu.course.sandbox.kernel_env` plus ``env``: ``package_root``
    (the folder holding the ``amp_edu`` package the kernel imports, default :data:`ROOT`) is its
    ``PYTHONPATH``. ``isolation`` (default: no sandbox) says whether it runs inside bubblewrap.
    ``start_timeout`` is how long it may take to answer (``GradeLimits.start_s``).
    """

    def __init__(self, cwd, *, env: dict | None = None, start_timeout: float = 60.0,
                 stop: threading.Event | None = None, isolation: sandbox.Isolation | None = None,
                 package_root=None):
        self.cwd = str(cwd)
        self.stop = stop
        self.isolation = isolation or sandbox.Isolation("none", "no sandbox asked for")
        self.package_root = str(Path(package_root or ROOT).resolve())
        self.leftovers: list[str] = []         # what the notebook left running, found at kill()
        self._token = secrets.token_hex(8)
        self._dir = tempfile.mkdtemp(prefix="amp_edu_kernel_")
        self._log_path = os.path.join(self._dir, "kernel.log")
        self.proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._owner = threading.get_ident()
        self._procs_killed = self._closed = False
        self._ctx = zmq.Context()
        self._shell = self._iopub = None
        key = secrets.token_hex(16)
        self.session = Session(key=key.encode(), signature_scheme="hmac-sha256", username="amp_edu")
        conn = {"transport": "ipc", "ip": os.path.join(self._dir, "k"), "key": key,
                "signature_scheme": "hmac-sha256", "kernel_name": "python3",
                "shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5}
        self._conn = conn
        conn_file = os.path.join(self._dir, "connection.json")
        Path(conn_file).write_text(json.dumps(conn))

        home = os.path.join(self._dir, "home")          # IPython's and matplotlib's state: not in cwd
        os.mkdir(home)
        kenv = sandbox.kernel_env(env, home=home, pythonpath=self.package_root, token=self._token)
        cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", conn_file,
               "--HistoryManager.hist_file=:memory:", "--IPKernelApp.log_level=CRITICAL"]
        if self.isolation.sandboxed:
            cmd = sandbox.bwrap_command(cmd, env=kenv, cwd=self.cwd, writable=[self.cwd, self._dir],
                                        readable=[os.path.join(self.package_root, "amp_edu")])
        else:
            kenv["JPY_PARENT_PID"] = str(os.getpid())
        with _LIVE_LOCK:
            LIVE.add(self)
        try:
            with open(self._log_path, "wb") as log:
                self.proc = subprocess.Popen(cmd, cwd=self.cwd, env=kenv, stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self._connect()
            self._wait_ready(start_timeout)
        except BaseException:
            self.kill()
            raise

    # -- sockets -------------------------------------------------------------------------------
    def _url(self, channel: str) -> str:
        return f"ipc://{self._conn['ip']}-{self._conn[channel + '_port']}"

    def _connect(self) -> None:
        self._shell = self._ctx.socket(zmq.DEALER)
        self._shell.linger = 0
        self._shell.connect(self._url("shell"))
        self._iopub = self._ctx.socket(zmq.SUB)
        self._iopub.linger = 0
        self._iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self._iopub.connect(self._url("iopub"))

    def _recv(self, sock):
        _, msg = self.session.recv(sock, mode=zmq.NOBLOCK)
        return msg

    def log_tail(self, n: int = 20) -> str:
        """The last ``n`` lines the kernel process wrote to its stdout/stderr (crash messages)."""
        try:
            lines = Path(self._log_path).read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _wait_ready(self, timeout: float) -> None:
        """Send ``kernel_info_request`` until both the reply *and* its iopub status arrive.

        Waiting for the iopub message too matters: a SUB socket only receives what is published
        after it has connected, so this proves that no output of the first cell can be lost.
        """
        deadline = time.monotonic() + timeout
        poller = zmq.Poller()
        poller.register(self._shell, zmq.POLLIN)
        poller.register(self._iopub, zmq.POLLIN)
        replied, published = set(), set()
        resend = 0.0
        while not (replied & published):
            now = time.monotonic()
            if not self.alive():
                tail = self.log_tail()
                raise KernelError(f"the kernel did not start ({describe_exit(self.proc.returncode)})"
                                  + (f":\n{tail}" if tail else ""))
            if self.stop is not None and self.stop.is_set():
                raise KernelError("stopped while the kernel was starting")
            if now > deadline:
                raise KernelError(f"the kernel did not answer within {timeout:g} s of starting")
            if now > resend:     # ask again: the first requests may predate the iopub subscription
                self.session.send(self._shell, "kernel_info_request", {})
                resend = now + 1.0
            for sock, _ in poller.poll(POLL_S * 1000):
                msg = self._recv(sock)
                if msg is None:
                    continue
                parent = msg["parent_header"].get("msg_id")
                (replied if sock is self._shell else published).add(parent)

    # -- running code --------------------------------------------------------------------------
    def run(self, code: str, *, timeout: float, expressions: dict | None = None,
            store_history: bool = True) -> CellRun:
        """Run ``code`` and wait at most ``timeout`` seconds for it to finish.

        ``expressions`` are the protocol's ``user_expressions``: evaluated with plain ``eval`` in the
        kernel's namespace after ``code``, in order, without IPython's input or AST transformers;
        each result (``{"status": "ok", "data": ...}`` or ``{"status": "error", "ename": ...}``) is
        in ``CellRun.expressions``. On ``timeout``, death, or ``stop`` the kernel is killed before
        returning, so the caller can only go on to a new kernel.
        """
        t0 = time.monotonic()
        deadline = t0 + max(0.0, timeout)
        out, err = [], []
        size = {"stdout": 0, "stderr": 0}
        res = CellRun(status="ok")
        if not self.alive():
            return CellRun(status="died", exit_detail=describe_exit(self.proc.returncode if self.proc else None))
        msg_id = self.session.send(self._shell, "execute_request", {
            "code": code, "silent": False, "store_history": store_history, "user_expressions": expressions or {},
            "allow_stdin": False, "stop_on_error": False})["header"]["msg_id"]
        poller = zmq.Poller()
        poller.register(self._shell, zmq.POLLIN)
        poller.register(self._iopub, zmq.POLLIN)
        replied = idle = False
        while not (replied and idle):
            for sock, _ in poller.poll(POLL_S * 1000):
                msg = self._recv(sock)
                if msg is None or msg["parent_header"].get("msg_id") != msg_id:
                    continue
                kind, content = msg["msg_type"], msg["content"]
                if sock is self._shell and kind == "execute_reply":
                    replied = True
                    res.expressions = content.get("user_expressions") or {}
                    if content.get("status") == "error" and res.status == "ok":
                        res.status, res.ename, res.evalue = "error", content.get("ename", ""), content.get("evalue", "")
                        res.traceback = content.get("traceback", [])
                elif kind == "stream":
                    name = "stdout" if content.get("name") == "stdout" else "stderr"
                    text = content.get("text", "")
                    if size[name] < MAX_OUTPUT:              # a flood of prints must not fill memory
                        (out if name == "stdout" else err).append(text)
                    size[name] += len(text)
                elif kind == "error":
                    res.status, res.ename, res.evalue = "error", content.get("ename", ""), content.get("evalue", "")
                    res.traceback = content.get("traceback", [])
                elif kind == "status" and content.get("execution_state") == "idle":
                    idle = True
            if replied and idle:
                break
            if self.stop is not None and self.stop.is_set():     # first: kill_all may follow a stop
                res.status = "stopped"
                break
            if not self.alive():
                res.status, res.exit_detail = "died", describe_exit(self.proc.returncode)
                break
            if time.monotonic() >= deadline:
                res.status = "timeout"
                break
        res.stdout, res.stderr = ("".join(b)[:MAX_OUTPUT] + ("\n[output truncated]" if size[n] > MAX_OUTPUT else "")
                                  for b, n in ((out, "stdout"), (err, "stderr")))
        res.seconds = time.monotonic() - t0
        if res.status in ("timeout", "died", "stopped"):
            if res.status == "died":
                tail = self.log_tail()
                if tail:
                    res.stderr = (res.stderr + "\n" + tail).strip()
            self.kill()
        return res

    # -- cleanup -------------------------------------------------------------------------------
    def kill(self) -> None:
        """Kill the kernel, its process group and any descendant, and verify none is left.

        Safe to call more than once and from any thread (a signal handler's ``kill_all``): the
        processes are killed once, under a lock; the sockets are closed only by the thread that
        started the kernel (ZeroMQ sockets must not be touched by two threads), at its own
        ``kill()``. Raises ``RuntimeError`` naming the survivors if some process would not die.
        """
        try:
            with self._lock:
                if not self._procs_killed:
                    self._procs_killed = True
                    self._kill_tree()
        finally:
            with _LIVE_LOCK:
                LIVE.discard(self)
            if threading.get_ident() == self._owner and not self._closed:
                self._closed = True
                for sock in (self._shell, self._iopub):
                    if sock is not None:
                        sock.close(linger=0)
                self._shell = self._iopub = None
                self._ctx.term()
                shutil.rmtree(self._dir, ignore_errors=True)

    def _kill_tree(self) -> None:
        if self.proc is None:
            return
        try:
            family = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            family = []
        if not self.isolation.sandboxed:                # escaped the tree (double fork + setsid)?
            family += [p for p in _carrying(self._token) if p.pid != self.proc.pid and p not in family]
        self.leftovers = [_describe(p) for p in family if not self._machinery(p)]
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)    # the kernel's session id == its pid
        except (ProcessLookupError, PermissionError):
            pass
        for p in family:                               # descendants that left the group
            try:
                p.kill()
            except psutil.Error:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        psutil.wait_procs(family, timeout=5)
        left = [p.pid for p in _group_members(self.proc.pid)]
        left += [p.pid for p in family if _running(p)]
        if self.proc.poll() is None:
            left.append(self.proc.pid)
        if left:
            raise RuntimeError(f"could not kill kernel processes {sorted(set(left))}")

    def _machinery(self, p: psutil.Process) -> bool:
        """Is ``p`` the kernel itself or the sandbox around it (not something the notebook started)?"""
        try:
            cmd = p.cmdline()
        except psutil.Error:
            return True
        return bool(cmd) and (os.path.basename(cmd[0]) == "bwrap"
                              or ("ipykernel_launcher" in cmd and any(self._dir in a for a in cmd)))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()

    def __hash__(self):
        return id(self)


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _describe(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())[:120] or p.name()
    except psutil.Error:
        return f"pid {p.pid}"


def _carrying(token: str) -> list[psutil.Process]:
    """Live processes whose environment carries this kernel's token (started by it, wherever they went)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(sandbox.TOKEN_VAR) == token and _running(p):
                found.append(p)
        except (psutil.Error, OSError):
            pass
    return found


def _group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    found = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and _running(p):
                found.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    return found


def kill_all() -> None:
    """Kill every kernel this process started and has not yet killed."""
    with _LIVE_LOCK:
        live = list(LIVE)
    for k in live:
        try:
            k.kill()
        except Exception as exc:  # noqa: BLE001 - keep killing the others, then say what is left
            print(f"warning: {exc}", file=sys.stderr)


atexit.register(kill_all)
