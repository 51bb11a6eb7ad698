"""Import torchao, the library the course checks itself against, with its CPU noise filtered.

On a machine without CUDA, ``import torchao`` logs a warning for each CUDA extension it cannot
load (``Failed to load .../_C_cutlass_90a.abi3.so: ...``) and torch logs a deprecation notice
about ``register_constant`` on an Enum. Neither is an error for fp8 training on a CPU.
:func:`import_torchao` filters exactly those two messages (nothing else: any other warning or
an import error still shows) and tells whether torchao imported, so a lesson can say so.

It imports one of the torchao modules the course compares with, :data:`TORCHAO_MODULES`, each by
a plain ``import`` statement. Only the comparison code (lesson cells, ``tests/``, the
distributed lesson's torchao run and :mod:`amp_edu.hf`, whose ``transformers`` imports torchao)
calls it: ``amp_edu.fp8`` itself never imports torchao.
"""

from __future__ import annotations

import logging

__all__ = ["import_torchao", "TorchaoStatus", "TORCHAO_MODULES"]

_QUIET = (
    ("torchao", lambda msg: msg.startswith("Failed to load ") and ".so" in msg),
    ("torch.utils._pytree", lambda msg: "is an Enum subclass and is now natively supported" in msg),
)


def _float8():
    import torchao.float8  # noqa: F401


def _optim():
    import torchao.optim  # noqa: F401


def _mx_tensor():
    import torchao.prototype.mx_formats.mx_tensor  # noqa: F401


def _nvfp4_tensor():
    import torchao.prototype.mx_formats.nvfp4_tensor  # noqa: F401


#: The torchao modules the course compares with (lessons 10, 12, 13, the tests), each imported by
#: a plain statement: fp8 training, the low-bit optimizers, MX and NVFP4 tensors.
TORCHAO_MODULES = {
    "torchao.float8": _float8,
    "torchao.optim": _optim,
    "torchao.prototype.mx_formats.mx_tensor": _mx_tensor,
    "torchao.prototype.mx_formats.nvfp4_tensor": _nvfp4_tensor,
}


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


def import_torchao(module: str = "torchao.float8") -> TorchaoStatus:
    """Import ``module`` (one of :data:`TORCHAO_MODULES`) with torchao's CPU-only notices
    filtered; never raises ImportError (the status says why not)."""
    if module not in TORCHAO_MODULES:
        raise ValueError(f"module must be one of {', '.join(TORCHAO_MODULES)}, got {module!r}")
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
        TORCHAO_MODULES[module]()
        import torchao
        return TorchaoStatus(True, getattr(torchao, "__version__", "?"), None, len(counted))
    except ImportError as exc:
        return TorchaoStatus(False, None, f"{type(exc).__name__}: {exc}", len(counted))
    finally:
        for logger, f in filters:
            logger.removeFilter(f)
