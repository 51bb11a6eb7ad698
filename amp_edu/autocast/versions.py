"""Which torch the op tables come from, and where the learner's torch differs.

``policy.py``'s tables copy the ops torch :data:`TABLES_FROM` registers for its ``AutocastCPU`` and
``AutocastCUDA`` dispatch keys. Torch changes those registrations between releases: an op is added
to a list, or leaves it. The installed torch says which ops it registers
(``torch._C._dispatch_get_registrations_for_dispatch_key``, read once into
``routes.TORCH_REGISTERED``), so the difference is computed, not remembered:

>>> from amp_edu.autocast import versions
>>> print(versions.report())          # doctest: +SKIP
The op tables are torch 2.13.0's. Your torch 2.14.1 differs here: ...

A registration tells *that* torch casts an op, not *how* (which list): the kind of an op new in a
later release is in :data:`KNOWN_CHANGES` where it was measured (on a CPU, for the CPU table: the
output dtype under ``torch.autocast("cpu")``), and ``None`` where measuring needs a GPU.

The tables themselves stay :data:`TABLES_FROM`'s, so the lessons print the same tables on every
machine; a difference is reported as "your torch differs here", never as a failed parity. What
``amp_edu.autocast`` does then: an op only your torch registers runs with your torch's own autocast
(the mode leaves ops it does not list alone); an op only the tables list is still cast by them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import policy

__all__ = ["TABLES_FROM", "KNOWN_CHANGES", "Differences", "differences", "expected", "report"]

TABLES_FROM = "2.13.0"

#: per torch release (major.minor): what its registrations changed against :data:`TABLES_FROM`,
#: per policy: ``added`` {op: kind or None (not measured: needs a GPU)} and ``removed`` ops.
#: Read from torch 2.14.1's registrations; the CPU kind measured under torch.autocast("cpu").
KNOWN_CHANGES: dict[str, dict[str, dict]] = {
    "2.14": {
        "cpu": {"added": {"linalg_matrix_sqrth": policy.FP32}, "removed": ("cholesky", "qr")},
        "cuda": {"added": {"_cudnn_rnn": None, "linalg_matrix_sqrth": None}, "removed": ()},
    },
}


@dataclass(frozen=True)
class Differences:
    """One policy's table against one torch's registrations."""

    policy: str
    torch_version: str
    added: tuple[str, ...] = field(default=())     # registered by that torch, not in the table
    removed: tuple[str, ...] = field(default=())   # in the table, no longer registered

    @property
    def same(self) -> bool:
        return not self.added and not self.removed

    def __str__(self) -> str:
        if self.same:
            return f"{self.policy.upper()}: the same ops"
        kinds = KNOWN_CHANGES.get(_minor(self.torch_version), {}).get(self.policy, {}).get("added", {})
        parts = []
        if self.added:
            parts.append("also casts " + ", ".join(
                f"{op} ({kinds[op]})" if kinds.get(op) else op for op in self.added))
        if self.removed:
            parts.append("no longer casts " + ", ".join(self.removed))
        return f"{self.policy.upper()}: " + "; ".join(parts)


def _minor(version: str) -> str:
    if not isinstance(version, str):
        raise TypeError(f"version must be a string such as '2.14.1', got {type(version).__name__}")
    return ".".join(version.split("+")[0].split(".")[:2])


def differences(pol: str, registered=None, torch_version: str | None = None) -> Differences:
    """``pol``'s table (``"cpu"`` or ``"cuda"``) against ``registered`` (default: the installed
    torch's registrations for that key)."""
    if pol not in policy.REGISTERED:
        raise ValueError(f"pol must be one of {', '.join(policy.REGISTERED)}, got {pol!r}")
    if registered is None:
        from .routes import TORCH_REGISTERED
        registered = TORCH_REGISTERED[pol]
    table = set(policy.REGISTERED[pol])
    registered = set(registered)
    return Differences(pol, torch_version or torch.__version__,
                       tuple(sorted(registered - table)), tuple(sorted(table - registered)))


def expected(torch_version: str, pol: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """``(added, removed)`` recorded for ``torch_version``'s release; ``((), ())`` for
    :data:`TABLES_FROM`'s; ``None`` for a release the course has not recorded."""
    minor = _minor(torch_version)
    if minor == _minor(TABLES_FROM):
        return (), ()
    if minor not in KNOWN_CHANGES:
        return None
    c = KNOWN_CHANGES[minor][pol]
    return tuple(sorted(c["added"])), tuple(sorted(c["removed"]))


def report(registered: dict | None = None, torch_version: str | None = None) -> str:
    """One paragraph: the tables' torch, and where this torch's registrations differ from them."""
    version = torch_version or torch.__version__
    diffs = [differences(p, None if registered is None else registered[p], version) for p in ("cpu", "cuda")]
    if all(d.same for d in diffs):
        return f"The op tables are torch {TABLES_FROM}'s; your torch {version} registers the same ops."
    lines = [f"The op tables are torch {TABLES_FROM}'s. Your torch {version} differs here:"]
    lines += [f"  {d}" for d in diffs if not d.same]
    return "\n".join(lines)
