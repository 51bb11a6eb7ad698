"""Why did dynamo recompile? Collect the guard failures it reports, without printing them.

Dynamo writes each recompile's failed guards to its ``recompiles`` log artifact
(``torch._dynamo.guards``, ``get_and_maybe_log_recompilation_reasons``), which
``torch._logging.set_logs(recompiles=True)`` prints to stderr. :func:`recompile_reasons` switches
that artifact on, keeps its records in a list instead of printing them, and restores the logging
state on exit::

    with recompile_reasons() as reasons:
        f(x); f(x.bfloat16())
    reasons   # ["tensor 'x' dtype mismatch. expected Float, actual BFloat16", ...]

Each item is one failed guard as dynamo words it (the cache entry's ``N/M:`` prefix removed); a
recompile lists one failed guard per cache entry it tried, so one call can add several.
"""

from __future__ import annotations

import contextlib
import logging
import re

import torch

__all__ = ["recompile_reasons"]

_ENTRY = re.compile(r"^-\s+(?:\d+/\d+:\s*)?")


class _Keep(logging.Handler):
    def __init__(self, into: list):
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record):
        for line in record.getMessage().splitlines():
            s = line.strip()
            if s.startswith("- ") and not s.startswith("-   "):
                text = _ENTRY.sub("", s).strip()
                if text and not text.startswith("File ") and text != "User stack trace:":
                    self.into.append(text)


@contextlib.contextmanager
def recompile_reasons():
    """Collect the failed guards of every recompile inside the block (a list, filled as they come)."""
    reasons: list[str] = []
    log = torch._logging.getArtifactLogger("torch._dynamo.guards", "recompiles")
    handler = _Keep(reasons)
    saved = (log.propagate, log.level)
    torch._logging.set_logs(recompiles=True)
    log.addHandler(handler)
    log.propagate = False                 # keep torch's stderr handler (on the "torch" logger) out of it
    log.setLevel(logging.DEBUG)
    try:
        yield reasons
    finally:
        log.removeHandler(handler)
        log.propagate, _ = saved
        torch._logging.set_logs()
        log.setLevel(saved[1])
