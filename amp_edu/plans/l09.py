"""Exercise 09's plan: the models whose forward goes non-finite, and the run of the learner's
``first_nonfinite_layer(model, x)`` on each.

A model cannot travel to the judge, so a case names it: a label (which architecture, where the
NaN or inf is made) and the seed its weights are drawn with (:func:`build`); the input ``x`` is a
plain tensor. :func:`first_nonfinite` builds each model here, calls the learner's function on it
and reports, per case, the outcome, the hooks still registered on the model afterwards and ``x``
after the call (the function must only read it). It also reports the names the learner's function
refers to (its code's ``co_names``), so the judge can tell an answer that calls the library's own
finder.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from ..device import num_threads
from ..models import seeded
from .runner import call

__all__ = ["build", "hooks_left", "first_nonfinite", "LABELS"]


class _Sqrt(nn.Module):
    def forward(self, x):
        return torch.sqrt(x)                 # NaN for negative inputs


class _Block(nn.Module):
    def __init__(self, d, poison=False):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.act = nn.GELU()
        self.proj = nn.Linear(d, d)
        if poison:
            with torch.no_grad():
                self.fc.weight[0, 0] = float("nan")

    def forward(self, x):
        return x + self.proj(self.act(self.fc(x)))


class _Encoder(nn.Module):
    def __init__(self, d, poison_block):
        super().__init__()
        self.embed = nn.Linear(4, d)
        self.blocks = nn.Sequential(*[_Block(d, poison=i == poison_block) for i in range(3)])
        self.head = nn.Linear(d, 2)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x)))


class _InlineLog(nn.Module):
    """Its own forward takes the log of a linear output: the parent, not a child, makes NaN."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.log(self.fc(x))


class _Reordered(nn.Module):
    """``late`` is registered first but called second; ``early`` makes the NaN."""

    def __init__(self):
        super().__init__()
        self.late = nn.Linear(4, 4)
        self.early = _Sqrt()
        self.stem = nn.Linear(4, 4)

    def forward(self, x):
        return self.late(self.early(self.stem(x)))


class _Shared(nn.Module):
    """One activation module used twice; between its calls ``fc2`` overflows to inf."""

    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()
        self.fc1 = nn.Linear(4, 4)
        self.fc2 = nn.Linear(4, 4)
        with torch.no_grad():
            self.fc1.bias.fill_(4.0)
            self.fc2.weight.fill_(3e38)

    def forward(self, x):
        return self.act(self.fc2(self.act(self.fc1(x))))


class _TupleOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        return h, torch.log(h.abs() - 10)    # the auxiliary output is NaN


class _TupleNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.split = _TupleOut()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        h, aux = self.split(x)
        return self.head(h) + 0 * torch.nan_to_num(aux).sum()


class _PackedOut(nn.Module):
    """Returns ``(h, aux)`` packed as a list or a dict; ``aux`` is NaN."""

    def __init__(self, pack):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.pack = pack

    def forward(self, x):
        h = self.fc(x)
        aux = torch.log(h.abs() - 10)
        return [h, aux] if self.pack == "list" else {"h": h, "aux": aux}


class _PackedNet(nn.Module):
    def __init__(self, pack):
        super().__init__()
        self.split = _PackedOut(pack)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        out = self.split(x)
        h = out[0] if isinstance(out, list) else out["h"]
        return self.head(h)


class _Logger(nn.Module):
    """Records a statistic and returns None (a module whose output is not a tensor at all)."""

    def forward(self, x):
        self.last_max = float(x.detach().abs().max())


class _WithLogger(nn.Module):
    """stem → a logger that returns None → sqrt (NaN for negative values) → head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.log = _Logger()
        self.root = _Sqrt()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        h = self.stem(x)
        self.log(h)
        return self.head(self.root(h))


class _RootInline(nn.Module):
    """The model's own forward divides by a norm that is 0 for a zero row: NaN at the root."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4, bias=False)

    def forward(self, x):
        h = self.fc(x)
        return h / h.norm(dim=-1, keepdim=True)


class _Fails(nn.Module):
    def forward(self, x):
        raise RuntimeError("a forward that fails half-way (a shape error, an out-of-memory ...)")


def _finite_again():
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Hardtanh(), nn.Linear(8, 2))
    with torch.no_grad():
        net[0].weight.fill_(3e38)
    return net


_BUILDERS = {
    "nan_mid": lambda: nn.Sequential(nn.Linear(4, 8), _Sqrt(), nn.Linear(8, 2)),
    "inf_first_fp16": lambda: nn.Sequential(OrderedDict(stem=nn.Linear(4, 8), act=nn.ReLU(),
                                                        head=nn.Linear(8, 2))).half(),
    "finite_again": _finite_again,
    "nested": lambda: _Encoder(8, poison_block=1),
    "parent_inline": lambda: nn.Sequential(nn.Linear(4, 4), _InlineLog(), nn.Linear(4, 2)),
    "call_order": _Reordered,
    "shared_module": _Shared,
    "tuple_output": _TupleNet,
    "list_output": lambda: _PackedNet("list"),
    "dict_output": lambda: _PackedNet("dict"),
    "none_output": _WithLogger,
    "root_inline": _RootInline,
    "all_finite": lambda: _Encoder(8, poison_block=-1),
    "forward_raises": lambda: nn.Sequential(OrderedDict(fc=nn.Linear(4, 4), fails=_Fails(), head=nn.Linear(4, 2))),
}

LABELS = tuple(_BUILDERS)     # every model :func:`build` knows, in the order the check grades them


def build(label: str, seed: int) -> nn.Module:
    """The model ``label`` with its weights drawn from ``seed`` (a fresh one every call)."""
    with seeded(seed):
        return _BUILDERS[label]()


def hooks_left(model: nn.Module) -> list[str]:
    """The modules that still have forward hooks or pre-hooks (``'(model)'`` for the model itself)."""
    left = []
    for name, m in model.named_modules():
        if m._forward_hooks or m._forward_pre_hooks or getattr(m, "_forward_hooks_with_kwargs", None):
            left.append(name or "(model)")
    return left


def first_nonfinite(cases, first_nonfinite_layer) -> dict:
    """``first_nonfinite_layer(model, x)`` on each case ``(label, description, seed, x)``.

    Returns ``{"names": the function's co_names (or None), "cases": [{"outcome", "hooks", "x"}]}``.
    """
    code = getattr(first_nonfinite_layer, "__code__", None)
    names = list(code.co_names) if type(code) is type(first_nonfinite.__code__) else None
    out = []
    with num_threads(1):        # tiny models: one thread is much faster on a busy machine
        for label, _desc, seed, x in cases:
            model = build(label, seed)
            outcome = call(first_nonfinite_layer, model, x)
            out.append({"outcome": outcome, "hooks": hooks_left(model), "x": x})
    return {"names": names, "cases": out}
