"""Grader for lesson 09's exercise: find the first module that produces inf/NaN.

The learner writes ``first_nonfinite_layer(model, x) -> str | None``: the qualified name (as in
``model.named_modules()``; ``''`` for the model itself) of the first module, in the order module
calls *finish*, whose output holds inf or NaN — or ``None`` when every output is finite. The
hooks must be gone afterwards.

The models here are not the lesson's: NaN made mid-network, inf in the very first layer, a model
whose later layers make the output finite again, nested blocks, a parent whose own inline op is
the culprit, modules called in a different order than they were registered, a module called
twice, tuple, list and dict outputs, a module whose output is None, an fp16 model. Each wrong idea a learner is likely to have — look only at
the final output, walk ``named_modules()`` in registration order, check inputs (pre-hooks)
instead of outputs, hook only leaves, test only ``isnan``, keep the last hit instead of the
first, forget to remove the hooks — fails at least one of them. A last model's forward *raises*
half-way (after its first layer's hook has fired): the error may pass through the learner's
function, but no hook may stay on the model — hooks removed after ``model(x)`` instead of in a
``finally:`` block stay there for good.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from .. import debug
from ..models import seeded
from .core import call_learner, fail, passed, require_callable

__all__ = ["check_first_nonfinite", "cases"]


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


def _x(seed=0, n=6):
    return torch.randn(n, 4, generator=torch.Generator().manual_seed(seed))


def cases():
    """``(label, description, model, x)`` for every graded case (fresh models each call)."""
    out = []

    def add(label, desc, build, x):
        with seeded(len(out)):
            model = build()
        out.append((label, desc, model, x))

    add("nan_mid", "Sequential(Linear, Sqrt, Linear): sqrt of negative values makes NaN mid-network",
        lambda: nn.Sequential(nn.Linear(4, 8), _Sqrt(), nn.Linear(8, 2)), _x(1))
    add("inf_first_fp16", "fp16 model Sequential(stem=Linear, act=ReLU, head=Linear) fed raw inputs × 1e5: "
        "the first layer overflows fp16 to inf",
        lambda: nn.Sequential(OrderedDict(stem=nn.Linear(4, 8), act=nn.ReLU(), head=nn.Linear(8, 2))).half(),
        (_x(2) * 1e5).half())
    add("finite_again", "Sequential(Linear with 3e38 weights, ReLU, Hardtanh, Linear) on positive inputs: "
        "layer 0 overflows to inf, ReLU passes it on, Hardtanh clamps it back, the final output is finite",
        _finite_again, _x(3).abs() + 1)
    add("nested", "Encoder(embed, blocks=3 × Block(fc, act, proj), head) with a NaN weight in blocks[1].fc",
        lambda: _Encoder(8, poison_block=1), _x(4))
    add("parent_inline", "Sequential(Linear, Block whose own forward takes log(fc(x)), Linear): the block's "
        "inline log makes NaN, its child fc is finite", lambda: nn.Sequential(nn.Linear(4, 4), _InlineLog(), nn.Linear(4, 2)),
        _x(5))
    add("call_order", "Module registering late, early, stem but calling stem → early (sqrt) → late",
        _Reordered, _x(6))
    add("shared_module", "one ReLU module called twice; fc2 (weights 3e38) overflows to inf between the calls",
        _Shared, _x(7))
    add("tuple_output", "a module returning (h, log(|h| - 10)): the second element of its tuple output is NaN",
        _TupleNet, _x(8))
    add("list_output", "a module returning the list [h, log(|h| - 10)]: the second element is NaN",
        lambda: _PackedNet("list"), _x(11))
    add("dict_output", "a module returning the dict {'h': h, 'aux': log(|h| - 10)}: the 'aux' value is NaN",
        lambda: _PackedNet("dict"), _x(12))
    add("none_output", "stem → a logging module whose output is None → sqrt (NaN for negative values) → head",
        _WithLogger, _x(13))
    add("root_inline", "the model's own forward divides by a row norm that is 0 for an all-zero input row",
        _RootInline, torch.cat([_x(9, 3), torch.zeros(1, 4)]))
    add("all_finite", "a healthy Encoder: every output finite", lambda: _Encoder(8, poison_block=-1), _x(10))
    return out


def _finite_again():
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Hardtanh(), nn.Linear(8, 2))
    with torch.no_grad():
        net[0].weight.fill_(3e38)
    return net


def _hooks_left(model) -> list[str]:
    left = []
    for name, m in model.named_modules():
        if m._forward_hooks or m._forward_pre_hooks or getattr(m, "_forward_hooks_with_kwargs", None):
            left.append(name or "(model)")
    return left


_HINTS = {
    "nan_mid": "Record the module whose *output* first holds NaN (a forward hook sees outputs; a "
               "pre-hook sees inputs and names the next module instead)",
    "inf_first_fp16": "Check for inf as well as NaN: torch.isfinite(t).all() catches both",
    "finite_again": "Keep the *first* non-finite output, not the last, and do not look only at the "
                    "final output: later layers can make values finite again",
    "nested": "Return the qualified name from model.named_modules() (e.g. 'a.b.c'), not the class "
              "or the attribute name; named_modules() lists parents before their children, while "
              "hooks fire children first",
    "parent_inline": "Hook every module, parents included: here the parent's own code makes NaN "
                     "while its child's output is finite",
    "call_order": "Hooks fire in the order modules finish; registration order (named_modules) is "
                  "not call order — record hits as they happen",
    "shared_module": "A module called twice must not overwrite its first record; remember the first "
                     "non-finite call in time order",
    "tuple_output": "Outputs can be tuples/lists of tensors: check every tensor in them",
    "list_output": "Outputs can be lists of tensors too: check every tensor in a list or tuple",
    "dict_output": "Outputs can be dicts of tensors (e.g. {'logits': ..., 'aux': ...}): check every tensor "
                   "among the dict's values",
    "none_output": "A module's output need not be a tensor at all (None here): skip what holds no tensor, "
                   "don't let your hook raise on it",
    "root_inline": "The model itself is a module too; its name in named_modules() is ''",
    "all_finite": "Return None when every output is finite",
}


def _diagnose(model, x, expected, got) -> str:
    """A sentence on how ``got`` relates to ``expected`` in this model's call order."""
    _, calls = debug.trace_modules(model, x)
    order = {}
    for c in calls:
        order.setdefault(c.name, c)
    if expected is None:
        return "Every module's output is finite here."
    exp = order[expected]
    if got is None:
        return (f"Module {expected!r} outputs {exp.kind} values (call #{exp.index} of {len(calls)}), "
                "but you found nothing.")
    if not isinstance(got, str) or got not in order:
        return f"{got!r} is not a module name from model.named_modules()."
    first_bad = next((c for c in calls if c.name == got and not c.finite), None)
    if first_bad is None:
        return f"Every output of {got!r} is finite."
    return (f"{got!r} first outputs non-finite values at call #{first_bad.index}, after {expected!r} "
            f"produced them at call #{exp.index}.")


class _Fails(nn.Module):
    def forward(self, x):
        raise RuntimeError("a forward that fails half-way (a shape error, an out-of-memory ...)")


def _raising_model():
    return nn.Sequential(OrderedDict(fc=nn.Linear(4, 4), fails=_Fails(), head=nn.Linear(4, 2)))


def _require_no_hooks(name: str, model: nn.Module, shown: str, hint: str) -> None:
    left = _hooks_left(model)
    if left:
        raise fail(name, input=shown, expected="no hooks left on the model",
                   got=f"hooks still registered on {left}", hint=hint)


def check_first_nonfinite(fn) -> str:
    """Grade ``fn(model, x) -> str | None`` on models the lesson did not show."""
    name = "first_nonfinite_layer"
    require_callable(name, fn)
    code = getattr(fn, "__code__", None)
    if code is not None and {"first_nonfinite", "trace_modules"} & set(code.co_names):
        raise fail(name, expected="your own forward hooks", got="a call to amp_edu.debug",
                   hint="write it with module.register_forward_hook; amp_edu.debug is the answer key")
    n = 0
    for label, desc, model, x in cases():
        ref = debug.first_nonfinite(model, x)
        expected = ref.name if ref is not None else None
        got = call_learner(name, fn, (model, x), input=f"case {label!r}: {desc}", expected=expected,
                           hint="your function raised on this model")
        if got != expected or type(got) is not type(expected):
            raise fail(name, input=f"case {label!r}: {desc}", expected=expected, got=got,
                       hint=_diagnose(model, x, expected, got) + " " + _HINTS[label])
        _require_no_hooks(name, model, f"case {label!r}: {desc}",
                          "keep the handles that register_forward_hook returns and call "
                          ".remove() on each, in a finally: block so an exception cannot leave them")
        n += 1
    model, desc = _raising_model(), ("a model whose forward raises RuntimeError in its second module "
                                     "(the error may pass through your function)")
    call_learner(name, fn, (model, torch.randn(3, 4)), input=f"case 'forward_raises': {desc}",
                 expected="the RuntimeError passed through, or a result", returns=(RuntimeError,))
    _require_no_hooks(name, model, f"case 'forward_raises': {desc}",
                      "the forward raised before your .remove() calls ran: register the hooks, then run "
                      "the model inside try: ... finally: (remove every handle in the finally block)")
    n += 1
    return passed(name, f"{n} models: first non-finite module found, hooks removed")
