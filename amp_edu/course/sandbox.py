"""Where a learner's kernel runs: inside bubblewrap when it can, else as a plain process (warned).

A graded notebook is code nobody has reviewed, run with the instructor's permissions. On Linux the
grader starts each kernel inside `bubblewrap <https://github.com/containers/bubblewrap>`_
(``bwrap``, Debian package ``bubblewrap``; ``make sandbox`` installs it), the sandbox Flatpak uses.
What the kernel then sees:

* **read-only**: the system (``/usr``, ``/etc``, ``/sys``), Python and the course's environment
  (``sys.base_prefix``, ``sys.prefix``) and the ``amp_edu`` package folder — not the rest of the
  checkout (no ``solutions/``), not the instructor's home, not the submissions;
* **writable**: its own work folder (a copy of the one submission) and a private ``/tmp``;
* **no network** (``--unshare-net``: only a loopback, which lesson 11's ranks use);
* **its own process tree** (``--unshare-pid``): when the grader kills the sandbox, every process
  in it dies, a daemon that double-forked and called ``setsid`` included; ``--die-with-parent``
  does the same if the grader itself is killed;
* **a minimal environment** (:func:`kernel_env`): not the grader's (no tokens, no grader pid).

Without bubblewrap (macOS, Windows, a container without user namespaces) the kernel is a plain
process with the same minimal environment, in its own session; the grader prints a warning once,
and still detects afterwards what the kernel changed in the package or the submissions folder
(:mod:`amp_edu.course.integrity`) and kills processes it left behind that carry its token. What it
cannot stop there: the kernel reading files the instructor can read, and writing them during the
run. otter-grader runs each submission in a container for the same reason.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

MODES = ("auto", "bwrap", "none")
# Variables a kernel may inherit from the grader (threads, devices, CPU class); nothing else is passed.
PASS_THROUGH = ("LANG", "LC_ALL", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
                "ONEDNN_MAX_CPU_ISA", "NVIDIA_VISIBLE_DEVICES")
SYSTEM_RO = ("/usr", "/etc", "/sys", "/opt")
TOKEN_VAR = "AMP_EDU_KERNEL_TOKEN"      # marks every process a kernel starts (fallback clean-up)


class SandboxUnavailable(RuntimeError):
    """``sandbox="bwrap"`` was asked for, but bubblewrap cannot run here (the message says why)."""


@dataclass(frozen=True)
class Isolation:
    """How kernels run: ``mode`` is ``"bwrap"`` or ``"none"``; ``why`` says why when ``none``."""

    mode: str
    why: str = ""

    @property
    def sandboxed(self) -> bool:
        return self.mode == "bwrap"


@functools.lru_cache(maxsize=1)
def bwrap_problem() -> str:
    """``""`` if ``bwrap`` runs here, else why not (missing, or user namespaces refused)."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap is Linux only (this is {sys.platform})"
    exe = shutil.which("bwrap")
    if exe is None:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap, or `make sandbox`)"
    try:
        proc = subprocess.run([exe, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net",
                               "--die-with-parent", "true"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be run: {exc}"
    if proc.returncode != 0:
        return f"bwrap cannot create a sandbox here: {proc.stderr.strip() or proc.returncode}"
    return ""


def choose(mode: str = "auto") -> Isolation:
    """``"auto"``: bubblewrap when it works, else none; ``"bwrap"``: bubblewrap or
    :class:`SandboxUnavailable`; ``"none"``: a plain process (say so in the report)."""
    if not isinstance(mode, str):
        raise TypeError(f"sandbox must be one of {MODES}, got {mode!r} ({type(mode).__name__})")
    if mode not in MODES:
        raise ValueError(f"sandbox must be one of {MODES}, got {mode!r}")
    if mode == "none":
        return Isolation("none", "asked for no sandbox (--sandbox none)")
    problem = bwrap_problem()
    if not problem:
        return Isolation("bwrap")
    if mode == "bwrap":
        raise SandboxUnavailable(problem)
    return Isolation("none", problem)


def warning(iso: Isolation) -> str:
    """The line the grader prints once when kernels are not sandboxed ("" when they are)."""
    if iso.sandboxed:
        return ""
    return (f"warning: learner kernels run WITHOUT a sandbox ({iso.why}): they can read what you can "
            "read and write while they run; the grader still reports changes to the course package "
            "and the submissions, and kills what they leave running")


def kernel_env(extra: dict | None = None, *, home: str, pythonpath: str, token: str) -> dict:
    """The whole environment of a kernel: a few pass-through variables, then the course's own."""
    env = {k: os.environ[k] for k in PASS_THROUGH if k in os.environ}
    env.update(PATH=os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
               HOME=home, PYTHONPATH=pythonpath, MPLBACKEND="Agg", MPLCONFIGDIR=os.path.join(home, ".mpl"),
               PYTHONDONTWRITEBYTECODE="1", PYDEVD_DISABLE_FILE_VALIDATION="1")
    env[TOKEN_VAR] = token
    env.update(extra or {})
    return env


def _real(path: str) -> str:
    return os.path.realpath(path)


def bwrap_command(cmd: list[str], *, env: dict, cwd: str, writable: list[str], readable: list[str]) -> list[str]:
    """``cmd`` wrapped in bubblewrap: ``writable`` and ``readable`` folders bound at their own
    paths (besides the system and this Python), ``cwd`` the working folder, ``env`` the whole
    environment."""
    args = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
    for link in ("bin", "lib", "lib64", "sbin"):
        target = f"/{link}"
        if os.path.islink(target):
            args += ["--symlink", os.readlink(target), target]
        elif os.path.isdir(target):
            args += ["--ro-bind", target, target]
    ro = [p for p in SYSTEM_RO if os.path.isdir(p)]
    ro += [_real(sys.base_prefix), sys.prefix, _real(sys.prefix), os.path.dirname(_real(sys.executable))]
    ro += list(readable)
    seen = set()
    for p in ro:
        if p and p not in seen and os.path.exists(p):
            seen.add(p)
            args += ["--ro-bind", p, p]
    for dev in sorted(glob.glob("/dev/nvidia*")) + (["/dev/dri"] if os.path.exists("/dev/dri") else []):
        args += ["--dev-bind", dev, dev]              # GPU graders need the device files
    for p in writable:
        args += ["--bind", p, p]
    args += ["--chdir", cwd, "--clearenv"]
    for k, v in env.items():
        args += ["--setenv", k, v]
    return args + ["--"] + list(cmd)
