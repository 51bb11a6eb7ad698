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
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch
from torch import nn

__all__ = ["ModuleCall", "trace_modules", "first_nonfinite", "plot_module_calls", "AnomalyReport", "backward_anomaly",
           "effective_eps", "effective_floor", "preflight", "scale_verdict", "nonfinite_rows"]


def _tensors(obj: Any) -> Iterable[torch.Tensor]:
    """Every tensor inside ``obj`` (tensors, lists, tuples, dicts, nested)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


def _count_nonfinite(obj: Any) -> tuple[int, int, int, float, str | None]:
    """(n_nan, n_inf, numel, largest finite |value|, dtype name) over the floating tensors of obj."""
    n_nan = n_inf = numel = 0
    amax, dtype = 0.0, None
    for t in _tensors(obj):
        if not t.is_floating_point() and not t.is_complex():
            continue
        t = t.detach()
        dtype = dtype or str(t.dtype).replace("torch.", "")
        numel += t.numel()
        if t.numel() == 0:
            continue
        nan = torch.isnan(t)
        inf = torch.isinf(t)
        n_nan += int(nan.sum())
        n_inf += int(inf.sum())
        finite = t[~(nan | inf)]
        if finite.numel():
            amax = max(amax, float(finite.abs().max()))
    return n_nan, n_inf, numel, amax, dtype


@dataclass(frozen=True)
class ModuleCall:
    """One finished call of one module during a forward pass."""

    index: int             # order in which the call finished (0 = first)
    name: str              # qualified name as in ``model.named_modules()``; '' is the model itself
    module: str            # class name, e.g. 'Linear'
    dtype: str | None      # dtype of the (first floating) output tensor
    absmax: float          # largest finite |value| of the output (0.0 if none)
    n_nan: int
    n_inf: int
    numel: int
    inputs_finite: bool    # were all floating inputs (args and kwargs) finite?
    leaf: bool             # a module without children

    @property
    def finite(self) -> bool:
        return self.n_nan == 0 and self.n_inf == 0

    @property
    def kind(self) -> str:
        """'finite', 'nan', 'inf' or 'inf and nan'."""
        if self.finite:
            return "finite"
        if self.n_nan and self.n_inf:
            return "inf and nan"
        return "nan" if self.n_nan else "inf"

    def __str__(self) -> str:
        where = f"{self.name or '(the model itself)'} ({self.module})"
        if self.finite:
            return f"{where}: finite, max |output| {self.absmax:.4g} ({self.dtype})"
        bad = self.n_nan + self.n_inf
        origin = ("its inputs were finite, so it produced them" if self.inputs_finite else
                  "it received non-finite inputs: the cause is code that runs between modules, "
                  "in its parent's forward")
        return f"{where}: {bad} of {self.numel} output values are {self.kind} ({self.dtype}); {origin}"


def trace_modules(model: nn.Module, *inputs, **kwargs) -> tuple[Any, list[ModuleCall]]:
    """Run ``model(*inputs, **kwargs)`` with a forward hook on every module.

    Returns ``(output, calls)``: one :class:`ModuleCall` per module call, in the order the calls
    finished. A module called twice appears twice. The hooks are removed afterwards, also when the
    forward raises.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    calls: list[ModuleCall] = []
    handles = []

    def make_hook(name: str, mod: nn.Module):
        leaf = next(iter(mod.children()), None) is None

        def hook(module, args, kw, output):
            n_nan, n_inf, numel, amax, dtype = _count_nonfinite(output)
            i_nan, i_inf, *_ = _count_nonfinite((args, kw))
            calls.append(ModuleCall(len(calls), name, type(module).__name__, dtype, amax,
                                    n_nan, n_inf, numel, i_nan == 0 and i_inf == 0, leaf))
        return hook

    try:
        for name, mod in model.named_modules():
            handles.append(mod.register_forward_hook(make_hook(name, mod), with_kwargs=True))
        output = model(*inputs, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return output, calls


def first_nonfinite(model: nn.Module, *inputs, **kwargs) -> ModuleCall | None:
    """The first module call whose output holds inf or NaN, or ``None`` if every output is finite.

    "First" is in the order calls finish, so the innermost module that produced the value is found
    before the parents that merely pass it on. Check ``.inputs_finite``: if it is False, the module
    was handed non-finite values made by code between modules (an inline op in the parent's
    ``forward``), and that code is where to look.

    >>> net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())   # doctest: +SKIP
    >>> print(first_nonfinite(net, x))                     # doctest: +SKIP
    0 (Linear): 3 of 8 output values are inf (float16); its inputs were finite, so it produced them
    """
    _, calls = trace_modules(model, *inputs, **kwargs)
    return next((c for c in calls if not c.finite), None)


def plot_module_calls(calls: list[ModuleCall], ax, *, leaves_only: bool = True, limit: float | None = 65504.0,
                      limit_label: str = "fp16 max 65504"):
    """Bar chart of each module call's largest finite |output| (log2 axis), in call order.

    Calls whose output holds inf/NaN get a red bar reaching the top and an "inf"/"nan" label; the
    first of them is named in the title. ``limit`` draws a horizontal line (fp16's max by default).
    """
    from .viz import log2_axis

    shown = [c for c in calls if c.leaf or not leaves_only or not c.finite]
    if not shown:
        raise ValueError("no module calls to plot")
    finite_vals = [c.absmax for c in shown if c.absmax > 0]
    top = max(finite_vals + ([limit] if limit else [])) * 4 if finite_vals or limit else 1.0
    bottom = min(finite_vals) / 4 if finite_vals else 1.0
    heights = [top if not c.finite else max(c.absmax, bottom) for c in shown]
    colors = ["#d62728" if not c.finite else "#1f77b4" for c in shown]
    xs = range(len(shown))
    ax.bar(xs, heights, color=colors, bottom=bottom / 2)
    for i, c in enumerate(shown):
        if not c.finite:
            ax.text(i, top, c.kind, ha="center", va="bottom", fontsize=8, color="#d62728")
    if limit:
        ax.axhline(limit, color="#7f7f7f", ls="-.", lw=1.2, label=limit_label)
        ax.legend(fontsize=8, loc="upper left")
    log2_axis(ax, "y", label="largest finite |output| (log2 scale)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([c.name or "(model)" for c in shown], rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("module, in the order its call finished")
    first = next((c for c in calls if not c.finite), None)
    ax.set_title("all outputs finite" if first is None else
                 f"first non-finite output: {first.name or '(model)'} ({first.module}, {first.kind})")
    return ax


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


def effective_eps(eps: float, dtype: torch.dtype) -> float:
    """What ``eps`` becomes when it is stored in ``dtype`` (round to nearest even, like torch)."""
    if not isinstance(eps, (int, float)) or isinstance(eps, bool):
        raise TypeError(f"eps must be a float, got {type(eps).__name__}")
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype (e.g. torch.float16), got {dtype!r}")
    return float(torch.tensor(float(eps), dtype=torch.float64).to(dtype))


_NORM_TYPES = (nn.LayerNorm, nn.GroupNorm, nn.RMSNorm, nn.modules.batchnorm._NormBase) \
    if hasattr(nn, "RMSNorm") else (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)


def preflight(model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None, *,
              dtype: torch.dtype = torch.float16, scaler: bool = True) -> list[str]:
    """Settings that break in ``dtype``, as sentences (an empty list means none found).

    * an ``eps`` of an optimizer or a norm module that rounds to 0 in ``dtype`` (Adam's 1e-8 and
      BERT's layer-norm 1e-12 in fp16; for the latter even ``1/sqrt(eps)``, the reciprocal std of
      a constant input, overflows fp16). It matters where the eps is *applied* in ``dtype``: a
      pure-fp16 model (``model.half()``), or a hand-written norm under autocast;
    * with ``scaler=True``: parameters in fp16, which ``GradScaler`` refuses to unscale.
    """
    if model is None and optimizer is None:
        raise ValueError("give a model, an optimizer, or both")
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"dtype must be torch.float16 or torch.bfloat16 (the low precision to check for), got {dtype!r}")
    if not isinstance(scaler, bool):
        raise TypeError(f"scaler must be True or False (will a GradScaler be used?), got {type(scaler).__name__}")
    name = str(dtype).replace("torch.", "")
    found: list[str] = []

    def judge(where: str, eps: float, norm: bool) -> None:
        if eps is None or eps <= 0 or effective_eps(eps, dtype) != 0.0:
            return
        msg = (f"{where}: eps={eps:g} rounds to 0 in {name} (anything up to "
               f"{effective_floor(dtype) / 2:.3g} does), so where it is added in {name} a zero "
               f"{'variance' if norm else 'second moment'} divides by zero")
        if norm and 1.0 / math.sqrt(eps) > torch.finfo(dtype).max:
            msg += (f"; and 1/sqrt(eps) = {1 / math.sqrt(eps):.3g}, the reciprocal std of a constant "
                    f"input, overflows {name} in a kernel that keeps its statistics in {name}")
        found.append(msg + "; keep this computation in fp32")

    if optimizer is not None:
        for i, group in enumerate(optimizer.param_groups):
            if isinstance(group.get("eps"), (int, float)):
                judge(f"{type(optimizer).__name__} param group {i}", group["eps"], False)
    if model is not None:
        for mname, mod in model.named_modules():
            if isinstance(mod, _NORM_TYPES) and isinstance(getattr(mod, "eps", None), (int, float)):
                judge(f"{mname or '(model)'} ({type(mod).__name__})", mod.eps, True)
    if scaler:
        params = []
        if optimizer is not None:
            params = [p for g in optimizer.param_groups for p in g["params"]]
        elif model is not None:
            params = list(model.parameters())
        n16 = sum(p.numel() for p in params if p.dtype == torch.float16)
        if n16:
            found.append(f"{n16} parameter values are float16: GradScaler refuses them "
                         "(\"Attempting to unscale FP16 gradients.\"); keep parameters in fp32 and "
                         "let autocast make the fp16 copies")
    return found


def effective_floor(dtype: torch.dtype) -> float:
    """The smallest positive value of ``dtype`` (subnormals included): eps below half of it is 0."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    fi = torch.finfo(dtype)
    return fi.smallest_normal * fi.eps


def scale_verdict(scales: Iterable[float]) -> str:
    """Read a loss-scale trajectory (the scale used at each step) and say what it means.

    A step was skipped exactly when the next step's scale is lower (the scaler backed off). The
    first steps of a run back off from the initial 2^16 on purpose: that is calibration, set
    aside. After it, a skip at a scale *above* every scale that has worked so far is the scaler
    probing too high — healthy, whatever ``growth_interval`` is. A skip at a scale that had
    already worked is not explained by the scale at all: the model, loss or data made inf/NaN.
    Three or more such skips, and at least 1% of the steps, make the verdict "inf/NaN".
    """
    try:
        s = [float(v) for v in scales]
    except (TypeError, ValueError):
        raise TypeError("scales must be an iterable of numbers (the scale used at each step, "
                        f"e.g. scaler.get_scale() per step), got {scales!r:.80}") from None
    if len(s) < 2:
        raise ValueError("need the scale of at least 2 steps")
    if any(not math.isfinite(v) or v <= 0 for v in s):
        raise ValueError("scales must be positive finite numbers")
    warm = 0
    while warm + 1 < len(s) and s[warm + 1] < s[warm]:
        warm += 1
    steps = len(s) - 1 - warm
    best_ok = 0.0
    probes = unexplained = 0
    for a, b in zip(s[warm:], s[warm + 1:]):
        if b < a:
            if a <= best_ok:
                unexplained += 1
            else:
                probes += 1
        else:
            best_ok = max(best_ok, a)
    head = (f"{warm} calibration back-off(s) from 2^{math.log2(s[0]):g}; then {steps} steps, "
            f"scale 2^{math.log2(s[warm]):.3g} → 2^{math.log2(s[-1]):.3g}, {probes} skip(s) while probing "
            f"a higher scale, {unexplained} at a scale that had already worked")
    if unexplained >= 3 and unexplained >= 0.01 * max(steps, 1):
        trend = ("; the scale keeps falling" if s[-1] < s[warm] / 4 else
                 "; the scale holds up only because the scaler re-grows it")
        return (head + f" — {unexplained / max(steps, 1):.0%} of the steps had inf/NaN gradients "
                "that the scale does not explain" + trend + ". Look for what makes inf/NaN (data, "
                "loss, an op) instead of tuning growth_interval or backoff_factor.")
    return head + " — healthy."


def nonfinite_rows(x: torch.Tensor) -> torch.Tensor:
    """Indices of the samples (rows along dim 0) of ``x`` that hold any inf or NaN."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if x.dim() == 0:
        raise ValueError("x must have a batch dimension")
    if not x.is_floating_point():
        return torch.zeros(0, dtype=torch.long)
    return (~torch.isfinite(x)).reshape(x.shape[0], -1).any(1).nonzero().flatten()
