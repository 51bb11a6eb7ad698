"""Import torchao, the library ``amp_edu.fp8`` is checked against, with its CPU noise filtered.

On a machine without CUDA, ``import torchao`` logs a warning for each CUDA extension it cannot
load (``Failed to load .../_C_cutlass_90a.abi3.so: ...``) and torch logs a deprecation notice
about ``register_constant`` on an Enum. Neither is an error for fp8 training on a CPU.
:func:`import_torchao` filters exactly those two messages (nothing else: any other warning or
an import error still shows) and tells whether torchao imported, so a lesson can say so.

Only the comparison code (lesson cells and ``tests/``) calls this: ``amp_edu.fp8`` itself never
imports torchao.
"""

from __future__ import annotations

import importlib
import logging

__all__ = ["import_torchao", "TorchaoStatus"]

_QUIET = (
    ("torchao", lambda msg: msg.startswith("Failed to load ") and ".so" in msg),
    ("torch.utils._pytree", lambda msg: "is an Enum subclass and is now natively supported" in msg),
)


class _Drop(logging.Filter):
    def __init__(self, match):
        super().__init__()
        self.match = match

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.match(record.getMessage())


class TorchaoStatus:
    """``ok`` (bool), ``version``, ``error`` (why not, or None), ``filtered`` (messages hidden)."""

    def __init__(self, ok, version=None, error=None, filtered=0):
        self.ok, self.version, self.error, self.filtered = ok, version, error, filtered

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return (f"torchao {self.version} imported ({self.filtered} CUDA-extension notices filtered)"
                if self.ok else f"torchao not available: {self.error}")


def import_torchao(submodule: str = "torchao.float8") -> TorchaoStatus:
    """Import ``submodule`` with torchao's CPU-only notices filtered; never raises ImportError."""
    counted = []

    class _Count(_Drop):
        def filter(self, record):
            keep = super().filter(record)
            if not keep:
                counted.append(record.getMessage())
            return keep

    filters = [(logging.getLogger(name), _Count(match)) for name, match in _QUIET]
    for logger, f in filters:
        logger.addFilter(f)
    try:
        importlib.import_module(submodule)
        import torchao
        return TorchaoStatus(True, getattr(torchao, "__version__", "?"), None, len(counted))
    except ImportError as exc:
        return TorchaoStatus(False, None, f"{type(exc).__name__}: {exc}", len(counted))
    finally:
        for logger, f in filters:
            logger.removeFilter(f)
