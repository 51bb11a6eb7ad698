"""When does compiling pay? Compile time against the time it saves per step, noise included.

``torch.compile`` pays once (dynamo's tracing, AOTAutograd, Inductor's lowering and a C++ or
Triton compile; Inductor's on-disk caches make a second process much cheaper) and may save a
little on every later call. Compiling is worth it after ``compile_s / (eager_s - compiled_s)``
steps, *if* the saving is real: when the per-step difference is within the timing noise (the
larger interquartile range of the two side-by-side timings), no break-even step can be claimed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..measure.timing import Timing
from ..validate import check_number

__all__ = ["BreakEven", "break_even"]


@dataclass
class BreakEven:
    compile_s: float
    eager_s: float
    compiled_s: float
    noise_s: float           # the larger IQR of the two timings
    steps: float | None      # steps until compiling has paid for itself; None: no measurable saving

    @property
    def speedup(self) -> float:
        return self.eager_s / self.compiled_s

    def sentence(self) -> str:
        head = (f"compile {self.compile_s:.1f} s; per step eager {self.eager_s * 1e3:.3g} ms, compiled "
                f"{self.compiled_s * 1e3:.3g} ms ({self.speedup:.2f}×, noise ±{self.noise_s * 1e3:.2g} ms)")
        if self.steps is None:
            slower = self.compiled_s > self.eager_s + self.noise_s
            return head + (": compiled is slower here, so compiling never pays for itself" if slower else
                           ": the difference is within the noise, so no break-even step can be claimed")
        return head + f": compiling pays for itself after about {math.ceil(self.steps):,} steps"


def break_even(compile_s: float, eager: Timing, compiled: Timing) -> BreakEven:
    """Steps after which ``compile_s`` seconds of compiling are repaid (see the module docstring)."""
    compile_s = check_number(compile_s, "compile_s", min=0.0)
    for name, t in (("eager", eager), ("compiled", compiled)):
        if not isinstance(t, Timing):
            raise TypeError(f"{name} must be an amp_edu.measure.timing.Timing, got {type(t).__name__}")
    noise = max(eager.iqr_s, compiled.iqr_s)
    saving = eager.median_s - compiled.median_s
    steps = compile_s / saving if saving > noise else None
    return BreakEven(compile_s, eager.median_s, compiled.median_s, noise, steps)
