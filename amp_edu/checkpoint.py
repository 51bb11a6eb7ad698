"""Checkpoint and resume a mixed-precision run so that it continues *bit for bit*.

A run that resumes from a checkpoint should be indistinguishable from one that never stopped.
With AMP that needs more than the weights:

* ``model.state_dict()`` — the fp32 weights (autocast's fp16/bf16 copies are never saved);
* ``optimizer.state_dict()`` — momentum, Adam's moments and step counts;
* ``scaler.state_dict()`` — the loss scale, the growth tracker and the scaler's settings. Forget
  it and the resumed run starts again at 2^16: it skips steps the original did not, and its scale
  takes thousands of steps to find its way back;
* ``scheduler.state_dict()`` — where the learning-rate schedule is;
* the random number generators — torch's global CPU (and CUDA) generators, for dropout and
  initialisation, and any ``torch.Generator`` that draws the batches;
* the step number.

:func:`checkpoint` collects all of it into one dict of **copies**. The copy matters: a
``state_dict()`` holds *references* to the live tensors, so a checkpoint kept in memory without
copying silently follows the training that continues after it. ``torch.save(ckpt, path)`` writes
it to disk; :func:`restore` puts everything back.
"""

from __future__ import annotations

import copy

import torch

from .validate import check_int

__all__ = ["checkpoint", "restore"]


def _has_state(obj, what: str):
    if obj is not None and not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
        raise TypeError(f"{what} must have state_dict()/load_state_dict(), got {type(obj).__name__}")


def _check_generators(generators) -> dict:
    if generators is not None and not isinstance(generators, dict):
        raise TypeError("generators must be a dict {name: torch.Generator} (e.g. {'batches': gen}), "
                        f"got {type(generators).__name__}")
    generators = dict(generators or {})
    for name, g in generators.items():
        if not isinstance(g, torch.Generator):
            raise TypeError(f"generators[{name!r}] must be a torch.Generator, got {type(g).__name__}")
    return generators


def checkpoint(model, optimizer, scaler=None, scheduler=None, *, step: int | None = None,
               generators: dict | None = None) -> dict:
    """A deep copy of everything a bit-exact resume needs (see the module docstring).

    ``generators`` maps names to the ``torch.Generator`` objects the loop draws from (e.g. the
    one that picks batches); their states are saved under the same names.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    _has_state(scaler, "scaler")
    _has_state(scheduler, "scheduler")
    if step is not None:
        step = check_int(step, "step")
        if step < 0:
            raise ValueError(f"step must be None or an int >= 0 (the optimizer steps taken), got {step!r}")
    generators = _check_generators(generators)
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "generators": {name: g.get_state() for name, g in generators.items()},
    }
    return copy.deepcopy(state)


def restore(ckpt: dict, model, optimizer, scaler=None, scheduler=None, *,
            generators: dict | None = None) -> int | None:
    """Load a :func:`checkpoint` into fresh objects; returns the saved step.

    Every object that was checkpointed must be given back (a scaler saved but not restored is
    exactly the bug this guards against), and vice versa.
    """
    if not isinstance(ckpt, dict) or "model" not in ckpt or "optimizer" not in ckpt:
        raise TypeError("ckpt must be a dict made by amp_edu.checkpoint.checkpoint")
    _has_state(scaler, "scaler")
    _has_state(scheduler, "scheduler")
    generators = _check_generators(generators)
    for what, obj in (("scaler", scaler), ("scheduler", scheduler)):
        if (ckpt.get(what) is None) != (obj is None):
            have = "has" if ckpt.get(what) is not None else "has no"
            raise ValueError(f"the checkpoint {have} {what} state but {what}={obj!r} was given: "
                             f"restore every piece that was saved")
    if set(generators) != set(ckpt.get("generators", {})):
        raise ValueError(f"the checkpoint saved generators {sorted(ckpt.get('generators', {}))}, "
                         f"got {sorted(generators)}")
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    if scaler is not None:
        scaler.load_state_dict(ckpt["scaler"])
    if scheduler is not None:
        scheduler.load_state_dict(ckpt["scheduler"])
    torch.set_rng_state(ckpt["rng_cpu"])
    if ckpt.get("rng_cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(ckpt["rng_cuda"])
    for name, g in generators.items():
        g.set_state(ckpt["generators"][name])
    return ckpt.get("step")
