"""Where the course runs and how big its experiments are: the device, the sizes, the threads.

The course runs everywhere: :func:`pick_device` takes CUDA when present, else the CPU, and
:func:`pick` chooses problem sizes for the mode — ``AMP_EDU_SMOKE=1`` (set by the tests) shrinks
everything so a notebook runs in seconds; otherwise sizes suit a laptop CPU or, larger, a GPU.
:func:`num_threads` runs a block on a given number of CPU threads.
"""

from __future__ import annotations

import contextlib
import os

import torch

from ..validate import check_int

__all__ = ["is_smoke", "pick_device", "pick", "num_threads"]

_TRUE = {"1", "true", "yes", "on"}


def is_smoke() -> bool:
    """True when ``AMP_EDU_SMOKE`` is set to 1/true/yes/on: tiny sizes, for tests."""
    return os.environ.get("AMP_EDU_SMOKE", "").strip().lower() in _TRUE


def pick_device(prefer: str | None = None) -> torch.device:
    """The device the lessons run on: CUDA when available, else the CPU.

    ``prefer="cpu"`` forces the CPU; ``prefer="cuda"`` raises if there is no GPU.
    ``AMP_EDU_DEVICE`` in the environment does the same as ``prefer``.
    """
    prefer = prefer or os.environ.get("AMP_EDU_DEVICE") or None
    if prefer is not None and prefer not in ("cpu", "cuda"):
        raise ValueError(f"prefer must be 'cpu', 'cuda' or None, got {prefer!r}")
    if prefer == "cuda" and not torch.cuda.is_available():
        raise ValueError("prefer='cuda' but torch.cuda.is_available() is False on this machine")
    if prefer == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


def pick(*, smoke, cpu, gpu=None, device: torch.device | str | None = None):
    """Choose a size for this mode: ``smoke`` under AMP_EDU_SMOKE, ``gpu`` on CUDA, else ``cpu``.

    >>> pick(smoke=8, cpu=256, gpu=4096)   # doctest: +SKIP
    """
    if is_smoke():
        return smoke
    dev = torch.device(device) if device is not None else pick_device()
    if dev.type == "cuda" and gpu is not None:
        return gpu
    return cpu


@contextlib.contextmanager
def num_threads(n: int | None):
    """Run the block with ``torch.set_num_threads(n)`` (``None``: leave the setting alone).

    The course's models are tiny: splitting their small matmuls over CPU threads costs more in
    synchronisation than it saves — on a busy machine, many times more — so the study's, the
    graders' and the benchmarks' CPU runs can ask for one thread. The previous setting is
    restored afterwards.
    """
    if n is None:
        yield
        return
    n = check_int(n, "threads")
    if n < 1:
        raise ValueError(f"threads must be None or a positive int, got {n!r}")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
