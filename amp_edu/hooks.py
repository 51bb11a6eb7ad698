"""Module hooks that cannot be left behind: install on every module, always remove.

Several tools watch a forward pass module by module — which module produced the first inf
(:mod:`amp_edu.debug`), which module saved a tensor for backward (:mod:`amp_edu.memory`), which
module an op ran in (:mod:`amp_edu.autocast.trace`), each leaf's activation gradient
(:mod:`amp_edu.gradients`). They all need the same two things, done here once:

* :func:`forward_hooks` registers a forward hook on each module (``register_forward_hook``) and
  removes every handle in a ``finally``, so an exception in the forward cannot leave a hook that
  would fire in the learner's next, unrelated call;
* :func:`module_stack` keeps a stack of the names of the modules currently running (a pre-hook
  pushes, a forward hook pops) and yields a function that returns the innermost one.

A hook that returns ``None`` leaves the inputs and outputs as they are; these do.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from torch import nn

__all__ = ["forward_hooks", "module_stack"]


def _modules(model: nn.Module, leaves_only: bool):
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for name, mod in model.named_modules():
        if not leaves_only or next(iter(mod.children()), None) is None:
            yield name, mod


@contextlib.contextmanager
def forward_hooks(model: nn.Module, make_hook: Callable[[str, nn.Module], Callable], *,
                  leaves_only: bool = False, with_kwargs: bool = False) -> Iterator[None]:
    """Within the ``with`` block, ``make_hook(name, module)`` is a forward hook on every module of
    ``model`` (only modules without children if ``leaves_only``); ``with_kwargs`` as in
    ``register_forward_hook``. All hooks are removed when the block ends, also on an exception."""
    handles = []
    try:
        for name, mod in _modules(model, leaves_only):
            handles.append(mod.register_forward_hook(make_hook(name, mod), with_kwargs=with_kwargs))
        yield
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def module_stack(model, label: Callable[[str, nn.Module], str] = lambda name, mod: name
                 ) -> Iterator[Callable[[], str | None]]:
    """Track which module of ``model`` is running: yields ``current()``, the ``label(name, module)``
    of the innermost module whose forward is in progress, or ``None`` outside every module (and
    always when ``model`` is not an ``nn.Module``: a plain function has no modules to watch)."""
    stack: list[str] = []
    handles = []

    def enter(text):
        return lambda module, inputs: stack.append(text)    # returns None: inputs unchanged

    def leave(module, inputs, output):
        stack.pop()                                          # returns None: output unchanged

    try:
        if isinstance(model, nn.Module):
            for name, mod in model.named_modules():
                handles.append(mod.register_forward_pre_hook(enter(label(name, mod))))
                handles.append(mod.register_forward_hook(leave))
        yield lambda: stack[-1] if stack else None
    finally:
        for h in handles:
            h.remove()
