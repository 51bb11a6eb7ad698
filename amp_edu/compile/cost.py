"""When does compiling pay? Compile time against the time it saves per step, noise included.

``torch.compile`` pays once (dynamo's tracing, AOTAutograd, Inductor's lowering and a C++ or
Triton compile; Inductor's on-disk caches make a second process much cheaper) and may save a
little on every later call. Compiling is worth it after ``compile_s / (eager_s - compiled_s)``
steps, *if* the saving is real. Whether it is, is the course's one rule for comparing timings
(:func:`amp_edu.measure.verdict.speed_verdict`, the compiled step's timing against the eager
one's): timings that show a busy machine support no comparison at all, so no break-even step
either; a compiled step that is not "faster" beyond the spread of the repeats gives none ("within
noise"), and one that is "slower" never pays for itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..measure.timing import Timing
from ..measure.verdict import Verdict, speed_verdict
from ..validate import check_number

__all__ = ["BreakEven", "break_even"]

_A, _B = "a compiled step", "an eager step"     # how the verdict names the two timings


@dataclass
class BreakEven:
    compile_s: float
    eager_s: float
    compiled_s: float
    verdict: Verdict         # the compiled step's timing against the eager one's (measure.verdict)
    steps: float | None      # steps until compiling has paid for itself; None: no measured saving

    @property
    def speedup(self) -> float:
        return self.eager_s / self.compiled_s

    def sentence(self) -> str:
        """e.g. ``"compile 12.3 s; per step eager 2 ms, compiled 1 ms: a compiled step took 0.50x the
        time of an eager step: faster (the 50% difference exceeds the 5% spread of the repeats), so
        compiling pays for itself after about 12,300 steps"``; on a busy machine only the compile
        time and the refusal (``"... a compiled step against an eager step: no verdict: ..."``)."""
        head = f"compile {self.compile_s:.1f} s; "
        if not self.verdict.concluded:
            return head + self.verdict.sentence(_A, _B)
        head += (f"per step eager {self.eager_s * 1e3:.3g} ms, compiled {self.compiled_s * 1e3:.3g} ms: "
                 + self.verdict.sentence(_A, _B))
        if self.steps is not None:
            return head + f", so compiling pays for itself after about {math.ceil(self.steps):,} steps"
        if self.verdict.word == "slower":
            return head + ", so compiling never pays for itself"
        return head + ", so no break-even step can be claimed"


def break_even(compile_s: float, eager: Timing, compiled: Timing) -> BreakEven:
    """Steps after which ``compile_s`` seconds of compiling are repaid (see the module docstring):
    ``steps`` is ``None`` unless :func:`~amp_edu.measure.verdict.speed_verdict` finds the compiled
    step faster."""
    compile_s = check_number(compile_s, "compile_s", min=0.0)
    for name, t in (("eager", eager), ("compiled", compiled)):
        if not isinstance(t, Timing):
            raise TypeError(f"{name} must be an amp_edu.measure.timing.Timing, got {type(t).__name__}")
    v = speed_verdict(compiled, eager)
    steps = compile_s / (eager.median_s - compiled.median_s) if v.word == "faster" else None
    return BreakEven(compile_s, eager.median_s, compiled.median_s, v, steps)
