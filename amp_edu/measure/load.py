"""How busy is this machine? Two readings that a timing can be recorded with.

A timing taken while other processes compete for the cores is slowed, and slowed unevenly. Two
readings say how much competition there was:

* :func:`machine_load`: the 1-minute **load average** (runnable threads, averaged over a minute,
  *this* process's own threads included) against the cores this process may use, and the threads
  torch uses (more threads than cores and torch's own threads take turns);
* :func:`others_busy`: the share of all cores that **other** processes kept busy while this one
  slept for a moment (Linux ``/proc/stat``): near 0 on a quiet machine.

Both are context, recorded beside a result (``amp_edu.bench`` stores them in its JSON). Whether a
comparison of two timings may conclude anything is decided from the timings' *own* repeats, which
saw the load as it was while they ran: :mod:`amp_edu.measure.verdict`.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import torch

from ..validate import check_int, check_number

__all__ = ["Load", "machine_load", "others_busy"]


@dataclass(frozen=True)
class Load:
    """How busy the machine is: 1-minute load average (``None`` where the OS has none), usable
    cores, torch's threads."""

    load_1min: float | None
    cores: int
    threads: int

    @property
    def busy(self) -> bool:
        """More runnable threads than cores, on average over the last minute."""
        return self.load_1min is not None and self.load_1min > self.cores + 0.5

    @property
    def oversubscribed(self) -> bool:
        """torch runs more threads than this process has cores: they time-slice each other."""
        return self.threads > self.cores

    @property
    def caveat(self) -> str | None:
        """A sentence describing the load when it is high, or ``None`` on a quiet machine."""
        parts = []
        if self.busy:
            parts.append(f"the machine is busy (load average {self.load_1min:.1f} on {self.cores} "
                         f"core{'s' if self.cores != 1 else ''}: other processes compete for the CPU)")
        if self.oversubscribed:
            parts.append(f"torch uses {self.threads} threads on {self.cores} core"
                         f"{'s' if self.cores != 1 else ''}, so its own threads take turns")
        if not parts:
            return None
        return "caveat: " + " and ".join(parts) + "; speed ratios measured now may not repeat"


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (else ``os.cpu_count()``), capped by a
    cgroup v2 CPU quota (``/sys/fs/cgroup/cpu.max``, e.g. ``200000 100000``: 2 cores' worth), which
    containers (``docker --cpus``, Kubernetes limits, hosted notebooks) set while still showing
    every core of the host."""
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cores = max(1, os.cpu_count() or 1)
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cores = max(1, min(cores, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cores


def machine_load(threads: int | None = None) -> Load:
    """Read the load now. ``threads`` defaults to ``torch.get_num_threads()``."""
    if threads is None:
        threads = torch.get_num_threads()
    threads = check_int(threads, "threads", min=1)
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on Windows
        load = None
    return Load(load, usable_cores(), threads)


def _busy_jiffies() -> tuple[int, int] | None:
    try:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def others_busy(window_s: float = 0.25) -> float | None:
    """Fraction of all cores that *other* processes kept busy during a short idle wait (Linux;
    ``None`` elsewhere).

    This process sleeps for ``window_s`` while ``/proc/stat`` counts busy time on every core, so
    whatever was busy was someone else. Near 0 on a quiet machine; on a shared one, a CPU
    benchmark's multi-threaded timings are only trustworthy when it is small.
    """
    window_s = check_number(window_s, "window_s", positive=True)
    a = _busy_jiffies()
    if a is None:
        return None
    time.sleep(window_s)
    b = _busy_jiffies()
    total = b[1] - a[1]
    return round((b[0] - a[0]) / total, 3) if total > 0 else None
