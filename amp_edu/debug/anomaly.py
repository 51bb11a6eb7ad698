"""Which backward function returned NaN, and the forward line that made it (anomaly mode)."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Callable

import torch

__all__ = ["AnomalyReport", "backward_anomaly"]


@dataclass(frozen=True)
class AnomalyReport:
    """What ``torch.autograd.detect_anomaly`` found in a backward pass."""

    function: str          # the backward node that returned NaN, e.g. 'SqrtBackward0'
    message: str           # torch's error message
    forward_line: str      # the source line of the forward op that created that node ('' if unknown)
    forward_function: str  # the Python function that line is in

    def __str__(self) -> str:
        src = (f"; it was created in {self.forward_function}() by `{self.forward_line}`"
               if self.forward_line else "")
        return f"{self.function} returned NaN in backward{src}"


_TORCH_DIR = os.path.dirname(torch.__file__)


def _parse_forward_trace(text: str) -> tuple[str, str]:
    """The last frame outside torch's own files (``File ..., line N, in fn``) and its source line."""
    lines = text.splitlines()
    func, src = "", ""
    for i, ln in enumerate(lines):
        s = ln.strip()
        if s.startswith("File ") and ", in " in s and _TORCH_DIR not in s:
            func = s.rsplit(", in ", 1)[1]
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            src = "" if nxt.startswith("File ") or nxt.startswith("(Triggered") else nxt
    return func, src


def backward_anomaly(loss_fn: Callable[[], torch.Tensor]) -> AnomalyReport | None:
    """Run ``loss_fn()`` and its backward under ``torch.autograd.detect_anomaly()``.

    ``loss_fn`` must build the graph *inside* this call (anomaly mode records a traceback for each
    forward op only while it is on) and return a scalar tensor. Returns ``None`` if the backward
    ran without NaN, else which backward function produced NaN and the forward line behind it.
    Anomaly mode checks for NaN, not inf, and slows every op down: use it to debug, not to train.
    """
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be a callable returning a scalar tensor, got {type(loss_fn).__name__}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autograd.detect_anomaly(check_nan=True):
                loss = loss_fn()
                if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                    raise TypeError("loss_fn must return a scalar tensor")
                loss.backward()
        except RuntimeError as exc:
            msg = str(exc)
            if "returned nan values" not in msg:
                raise
            function = msg.split("'")[1] if msg.count("'") >= 2 else ""
            trace = next((str(w.message) for w in caught
                          if "Traceback of forward call" in str(w.message)), "")
            func, src = _parse_forward_trace(trace)
            return AnomalyReport(function, msg, src, func)
    return None
