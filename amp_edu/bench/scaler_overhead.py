"""What does our from-scratch GradScaler cost per step, next to ``torch.amp.GradScaler``?

Torch does the two heavy parts of a scaler step in fused private kernels: one pass over every
gradient that multiplies by ``1/S`` *and* checks for inf/NaN, and a one-thread kernel for the
update rule. Ours (:mod:`amp_edu.scaler`) uses public ops: ``torch._foreach_mul_`` for the
multiply, and a check that gathers small gradients into a few buffers so that it needs a few
reductions instead of one per tensor. The cost that matters is per *tensor* and per *call*, not
per element, so we measure on a model with many small parameter tensors (≥100), where overhead
shows most.

What is timed: the scaler's own work in one iteration -- ``scale(loss)``, ``unscale_(opt)``,
``step(opt)``, ``update()`` -- with an optimizer whose ``step`` does nothing, so the ratio is
scaler against scaler, not diluted by the optimizer's arithmetic. The scale is 1 so that the
gradients stay the same from one repeat to the next (multiplying by 1 costs what any multiply
costs; torch's kernel even skips it). For context we also time a whole training step (forward,
backward, torch's scaler, a real SGD step) and express the difference between the scalers as a
share of it.

Both variants run side by side in one process, interleaved (:func:`amp_edu.measure.timing.compare`),
and :func:`describe` calls ours faster or slower only as :func:`amp_edu.measure.verdict.speed_verdict`
allows: beyond the spread of the repeats, and not at all when they spread so much that the
machine was busy.
``python -m amp_edu.bench.scaler_overhead [--quick]`` prints the result.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import torch

from ..device import pick, pick_device
from ..measure.load import others_busy
from ..measure.timing import Timing, compare, measure
from ..measure.verdict import Verdict, speed_verdict
from ..models import mlp
from ..recipes import Recipe
from ..scaler import GradScaler
from ..validate import check_int

__all__ = ["Result", "tall_mlp", "run", "describe", "main"]


@dataclass
class Result:
    """Median times (s) of the scaler ops with each scaler, and of a whole training step."""

    device: str
    n_tensors: int
    n_elements: int
    scaler_ops: dict[str, Timing]      # {"torch": ..., "ours": ...}
    train_step: Timing                 # forward + backward + torch's scaler + SGD step
    others_busy: float | None          # share of the CPU other processes used while we ran

    @property
    def ratio(self) -> float:
        """ours / torch for the scaler ops alone (the benchmark's figure)."""
        return self.scaler_ops["ours"].median_s / self.scaler_ops["torch"].median_s

    @property
    def verdict(self) -> Verdict:
        """Ours against torch's, scaler ops alone: :func:`amp_edu.measure.verdict.speed_verdict`."""
        return speed_verdict(self.scaler_ops["ours"], self.scaler_ops["torch"])

    @property
    def extra_share(self) -> float:
        """(ours - torch) scaler time as a fraction of a whole training step."""
        return (self.scaler_ops["ours"].median_s - self.scaler_ops["torch"].median_s) / self.train_step.median_s


def tall_mlp(width: int, depth: int, seed: int | None = None) -> torch.nn.Sequential:
    """``depth`` Linear+ReLU layers of ``width`` (:func:`amp_edu.models.mlp`): ``2 * depth``
    parameter tensors."""
    depth = check_int(depth, "depth", min=1)
    return mlp([width] * (depth + 1), final_activation=True, seed=seed)


class _NoStep(torch.optim.Optimizer):
    """An optimizer whose step does nothing: what is left to time is the scaler."""

    def __init__(self, params):
        super().__init__(params, {})

    def step(self, closure=None):
        return None


def _scaler_ops(scaler, opt, loss):
    def ops():
        scaler.scale(loss)
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
    return ops


def _train_step(model, scaler, opt, x):
    rec = Recipe(scaler=scaler)              # fp32 + dynamic loss scaling: amp_edu.train's step
    rec.before_fit(model, opt)

    def step():
        rec.zero_grad()
        rec.backward(model(x).square().mean())
        rec.step()
    return step


def run(*, quick: bool = False, device=None, width: int | None = None, depth: int | None = None) -> Result:
    """Time both scalers on a ``tall_mlp`` (default: 60 layers, 120 parameter tensors)."""
    dev = torch.device(device) if device is not None else pick_device()
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be a cpu or cuda device, got {dev}")
    width = width or pick(smoke=16, cpu=64, gpu=1024, device=dev)
    depth = depth or pick(smoke=50, cpu=60, gpu=60, device=dev)
    width, depth = check_int(width, "width", min=1), check_int(depth, "depth", min=1)
    rounds, repeats = (2, 3) if quick else pick(smoke=(2, 3), cpu=(7, 10), gpu=(7, 20), device=dev)
    min_time = 0.02 if quick else pick(smoke=0.02, cpu=0.1, gpu=0.1, device=dev)
    model = tall_mlp(width, depth, seed=0).to(dev)
    x = torch.randn(32, width, generator=torch.Generator().manual_seed(0)).to(dev)
    model(x).square().mean().backward()           # gradients for the scaler to work on
    params = list(model.parameters())
    loss = torch.ones((), device=dev)
    busy = others_busy() if dev.type == "cpu" else None

    ops = {}
    for name, cls in (("torch", torch.amp.GradScaler), ("ours", GradScaler)):
        scaler = cls(dev.type, init_scale=1.0, growth_interval=10 ** 9)
        ops[name] = _scaler_ops(scaler, _NoStep(params), loss)
    scaler_times = compare(ops, device=dev, rounds=rounds, repeats=repeats, min_time_s=min_time)

    net = tall_mlp(width, depth, seed=1).to(dev)
    step = _train_step(net, torch.amp.GradScaler(dev.type, growth_interval=10 ** 9),
                       torch.optim.SGD(net.parameters(), lr=1e-3), x)
    step_time = measure(step, device=dev, repeats=5, min_time_s=min_time)
    return Result(dev.type, len(params), sum(p.numel() for p in params), scaler_times, step_time, busy)


def describe(r: Result) -> str:
    """The result in sentences (what the lesson prints). The share of a training step is printed
    only when the verdict concluded: on a busy machine the difference it divides is not measured."""
    t, o = r.scaler_ops["torch"], r.scaler_ops["ours"]
    v = r.verdict
    lines = [
        f"model: {r.n_tensors} parameter tensors, {r.n_elements:,} elements, on {r.device}",
        f"scaler ops per iteration: torch.amp.GradScaler {t.median_s * 1e6:.0f} us "
        f"(IQR {t.iqr_s * 1e6:.0f}), ours {o.median_s * 1e6:.0f} us (IQR {o.iqr_s * 1e6:.0f})",
        v.sentence("ours", "torch's"),
    ]
    if v.concluded:
        lines.append(f"a whole training step of this model takes {r.train_step.median_s * 1e3:.2f} ms with torch's "
                     f"scaler: the difference between the scalers is {r.extra_share:+.1%} of a step")
    if r.others_busy is not None:
        lines.append(f"other processes kept {r.others_busy:.0%} of this machine's CPU busy when the timing began")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m amp_edu.bench.scaler_overhead", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a few seconds)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    args = ap.parse_args(argv)
    print(describe(run(quick=args.quick, device=args.device)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
