"""Finding where a mixed-precision run goes wrong.

A NaN loss says *that* something broke, not *where*. The tools here answer "where":

* :func:`trace_modules` runs the model once with a forward hook on every module and records, for
  each module call in the order the calls *finish*, the output's dtype, its largest finite
  magnitude and how many values are inf or NaN. Hooks fire when a module returns, so a child
  always reports before the parent that called it.
* :func:`first_nonfinite` is the first of those calls whose output holds inf or NaN: the module
  that *produced* the first non-finite value. Looking at the final output is not enough — a later
  ``relu`` turns ``-inf`` into 0 and a ``nan_to_num`` or a mask hides a NaN — and neither is the
  order of ``named_modules()``, which is the order modules were *registered*, not called.
* :func:`backward_anomaly` does the same for the backward pass with
  ``torch.autograd.detect_anomaly``: it names the backward function that returned NaN and the
  forward line that created it.
* :func:`preflight` lists settings that break in low precision before you train: ``eps`` values
  that round to 0 in fp16 (Adam's default 1e-8 does; so does BERT's layer-norm 1e-12) and fp16
  parameters that ``GradScaler`` will refuse ("Attempting to unscale FP16 gradients.").
* :func:`scale_verdict` reads a GradScaler's scale trajectory: skips at a scale that had already
  worked mean the model, loss or data makes inf/NaN. Underflow never lowers the scale; only
  non-finite gradients do. Tuning ``growth_interval`` / ``backoff_factor`` hides that, it does
  not fix it.
* :func:`nonfinite_rows` finds the samples of a batch that already hold inf/NaN.

Each tool is a small module of this package — :mod:`.modules` (the forward trace),
:mod:`.plot`, :mod:`.anomaly`, :mod:`.eps` (preflight) and :mod:`.scale` (the scale verdict) —
and every name is importable from ``amp_edu.debug`` itself.
"""

from .anomaly import AnomalyReport, backward_anomaly
from .eps import effective_eps, effective_floor, preflight
from .modules import ModuleCall, first_nonfinite, nonfinite_rows, trace_modules
from .plot import plot_module_calls
from .scale import ScaleDiagnosis, diagnose_scales, scale_verdict

__all__ = ["ModuleCall", "trace_modules", "first_nonfinite", "plot_module_calls", "AnomalyReport",
           "backward_anomaly", "effective_eps", "effective_floor", "preflight", "scale_verdict",
           "ScaleDiagnosis", "diagnose_scales", "nonfinite_rows"]
