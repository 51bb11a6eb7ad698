"""The autocast state of a thread: torch's own flags, which regions write, and what torch has no slot for.

Library code asks *torch* whether autocast is on: ``nn.LSTM`` checks
``torch._C._is_any_autocast_enabled()`` before accepting an input whose dtype differs from its
weights, ``torch.amp.custom_fwd`` reads ``torch.is_autocast_enabled(device)`` and
``torch.get_autocast_dtype(device)``, ``torch.utils.checkpoint`` saves them and re-enters
``torch.autocast`` with them for the recompute, ``nn.TransformerEncoderLayer`` picks its fast path
from them. A from-scratch region that kept its state to itself would send all of them down the
wrong branch. So a region (:mod:`.region`) *writes torch's own thread-local state*
(``torch.set_autocast_enabled``, ``set_autocast_dtype``, ``set_autocast_cache_enabled``, the
nesting counter) on entry and restores it on exit, and the queries below *read it back* from torch.
Every query in torch and in user code sees the region, and a ``torch.autocast(enabled=False)``
opened inside it (``custom_fwd(cast_inputs=...)``, checkpoint, user code) switches our casting off.

What torch has no slot for lives in :data:`_STATE`, one per thread: which op table each device's
region uses (``policy``), how many amp_edu regions are open, the weight cache (:mod:`.cache`),
the mode object the outermost region pushed (:mod:`.mode`), and the warnings already given.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from .cache import WeightCache

__all__ = ["DEVICE_TYPES", "is_autocast_available", "is_autocast_enabled", "get_autocast_dtype",
           "get_autocast_policy", "is_autocast_cache_enabled", "clear_autocast_cache", "weight_cache",
           "check_device_type"]

DEVICE_TYPES = ("cpu", "cuda")


class _State(threading.local):
    """One thread's amp_edu-only state (the enabled flags, dtypes and cache switch are torch's)."""

    def __init__(self):
        self.policy = {d: d for d in DEVICE_TYPES}
        self.depth = 0            # amp_edu regions open in this thread
        self.cache = WeightCache()
        self.mode = None          # the mode on torch's stack while a region is open (mode._AutocastMode)
        self.spare = None         # the same object between regions: one per thread, reused
        self.opening: list = []   # Python-level functions being run with the mode active
        self.warned: set = set()


_STATE = _State()


def check_device_type(device_type: Any) -> str:
    """``device_type`` if amp_edu's autocast supports it; torch's errors otherwise."""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if device_type not in DEVICE_TYPES:
        torch.device(device_type)          # not a device string at all: torch's RuntimeError
        raise ValueError(f"amp_edu.autocast supports device_type 'cpu' or 'cuda', got {device_type!r}")
    return device_type


def is_autocast_available(device_type: str) -> bool:
    """Can ``amp_edu.autocast`` run on ``device_type``? ('cpu' and 'cuda'; like
    ``torch.amp.is_autocast_available``, a string that names no device is a RuntimeError.)"""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    torch.device(device_type)
    return device_type in DEVICE_TYPES


def is_autocast_enabled(device_type: str) -> bool:
    """Is autocast enabled for ``device_type`` in this thread? (torch's flag, which regions set.)"""
    return torch.is_autocast_enabled(check_device_type(device_type))


def get_autocast_dtype(device_type: str) -> torch.dtype:
    """The low-precision dtype of the current region for ``device_type`` (torch's setting; default:
    fp16 for cuda, bf16 for cpu)."""
    return torch.get_autocast_dtype(check_device_type(device_type))


def get_autocast_policy(device_type: str) -> str:
    """Which op table (``'cuda'`` or ``'cpu'``) the current amp_edu region uses for ``device_type``."""
    return _STATE.policy[check_device_type(device_type)]


def is_autocast_cache_enabled() -> bool:
    """Is the weight-cast cache on in the current region (default True)? (torch's setting.)"""
    return torch.is_autocast_cache_enabled()


def clear_autocast_cache() -> None:
    """Forget this thread's cached weight casts, and torch's (called when the outermost region exits)."""
    _STATE.cache.clear()
    torch.clear_autocast_cache()


def weight_cache() -> WeightCache:
    """This thread's weight cache (for the lesson's cache experiments and tests)."""
    return _STATE.cache
