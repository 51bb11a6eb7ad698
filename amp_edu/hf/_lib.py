"""Import ``transformers`` and ``accelerate`` offline, with the noise of a CPU-only machine filtered.

The course never downloads a model or a data set: ``HF_HUB_OFFLINE=1`` is set (if the environment
has not set it already) before ``transformers`` is imported, so any attempt to reach the Hub fails
at once instead of waiting on the network. ``transformers`` imports ``torchao`` when it is installed
(the course has it for lesson 10), and on a machine without CUDA that logs one "Failed to load ...so"
line per CUDA extension and a torch deprecation notice;
:func:`load` filters exactly those lines (the filter of :mod:`amp_edu.fp8.torchao_import`) while it
imports.

:func:`quiet` hides two messages that every Trainer run here prints and that are not about mixed
precision: the DataLoader's ``pin_memory`` notice on a machine without an accelerator, and the
``loss_type=None`` notice of models whose class name names no loss type (GPT-2's; lesson 14 §3
reads that attribute itself). Anything else still shows.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings

__all__ = ["load", "quiet"]

_HIDDEN_LOGS = ("`loss_type=None` was set in the config but it is unrecognized",)
_HIDDEN_WARNINGS = ("'pin_memory' argument is set as true but no accelerator is found",)


_LOADED = []


def load():
    """Import and return ``(transformers, accelerate)``, offline, torchao's CPU notices filtered.

    transformers imports lazily: the Trainer and GPT-2 modules (and, through its quantizers, more
    of torchao) load when first touched, so they are touched here, inside the filter."""
    if _LOADED:
        return _LOADED[0]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from amp_edu.fp8.torchao_import import _QUIET, _Drop as _DropTorchao
    filters = [(logging.getLogger(name), _DropTorchao(match)) for name, match in _QUIET]
    for lg, f in filters:
        lg.addFilter(f)
    try:
        import accelerate
        import transformers
        for name in ("Trainer", "TrainingArguments", "TrainerCallback", "GPT2Config", "GPT2LMHeadModel",
                     "default_data_collator", "set_seed"):
            getattr(transformers, name)
        import transformers.trainer_callback  # noqa: F401
    finally:
        for lg, f in filters:
            lg.removeFilter(f)
    _LOADED.append((transformers, accelerate))
    return _LOADED[0]


class _Drop(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(h in msg for h in _HIDDEN_LOGS)


@contextlib.contextmanager
def quiet():
    """Run the block with the two known, irrelevant notices hidden (see the module docstring)."""
    transformers, _ = load()
    drop = _Drop()
    loggers = [logging.getLogger(n) for n in ("transformers", "transformers.modeling_utils")]
    for lg in loggers:
        lg.addFilter(drop)
    # transformers' own handler sits on the "transformers" logger; filter on it too
    handlers = list(logging.getLogger("transformers").handlers)
    for h in handlers:
        h.addFilter(drop)
    try:
        with warnings.catch_warnings():
            for text in _HIDDEN_WARNINGS:
                warnings.filterwarnings("ignore", message=f".*{text}.*")
            yield
    finally:
        for lg in loggers:
            lg.removeFilter(drop)
        for h in handlers:
            h.removeFilter(drop)
