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

The models are built by :mod:`amp_edu.plans.l09` from a label and a seed; the seeds and the
inputs are drawn from the check's seed (redrawn until the model's trace — which module calls are
finite, and whether the first non-finite output is inf or NaN — is the one the case is about), the expected name is
:func:`amp_edu.debug.first_nonfinite` on the judge's own copy of each model.
"""

from __future__ import annotations

import functools

import torch

from .. import debug
from ..device import num_threads
from ..plans import l09 as plan
from .core import SELF_CHECK_SEED, Check, fail, returned

__all__ = ["check_first_nonfinite"]

_DESCRIPTIONS = {
    "nan_mid": "Sequential(Linear, Sqrt, Linear): sqrt of negative values makes NaN mid-network",
    "inf_first_fp16": "fp16 model Sequential(stem=Linear, act=ReLU, head=Linear) fed raw inputs × 1e5: "
                      "the first layer overflows fp16 to inf",
    "finite_again": "Sequential(Linear with 3e38 weights, ReLU, Hardtanh, Linear) on positive inputs: "
                    "layer 0 overflows to inf, ReLU passes it on, Hardtanh clamps it back, the final output is finite",
    "nested": "Encoder(embed, blocks=3 × Block(fc, act, proj), head) with a NaN weight in blocks[1].fc",
    "parent_inline": "Sequential(Linear, Block whose own forward takes log(fc(x)), Linear): the block's "
                     "inline log makes NaN, its child fc is finite",
    "call_order": "Module registering late, early, stem but calling stem → early (sqrt) → late",
    "shared_module": "one ReLU module called twice; fc2 (weights 3e38) overflows to inf between the calls",
    "tuple_output": "a module returning (h, log(|h| - 10)): the second element of its tuple output is NaN",
    "list_output": "a module returning the list [h, log(|h| - 10)]: the second element is NaN",
    "dict_output": "a module returning the dict {'h': h, 'aux': log(|h| - 10)}: the 'aux' value is NaN",
    "none_output": "stem → a logging module whose output is None → sqrt (NaN for negative values) → head",
    "root_inline": "the model's own forward divides by a row norm that is 0 for an all-zero input row",
    "all_finite": "a healthy Encoder: every output finite",
    "forward_raises": "a model whose forward raises RuntimeError in its second module "
                      "(the error may pass through your function)",
}

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

_REMOVE_HINT = ("keep the handles that register_forward_hook returns and call "
                ".remove() on each, in a finally: block so an exception cannot leave them")
_FINALLY_HINT = ("the forward raised before your .remove() calls ran: register the hooks, then run "
                 "the model inside try: ... finally: (remove every handle in the finally block)")
_X_HINT = "only read x: your function must not change the input it is given (no in-place ops on x)"


def _x(seed: int, n: int = 6) -> torch.Tensor:
    return torch.randn(n, 4, generator=torch.Generator().manual_seed(seed))


def _input(label: str, seed: int) -> torch.Tensor:
    """Case ``label``'s input, drawn from ``seed``: what makes its model go non-finite."""
    if label == "inf_first_fp16":
        return (_x(seed) * 1e5).half()
    if label == "finite_again":
        return _x(seed).abs() + 1
    if label == "root_inline":
        return torch.cat([_x(seed, 3), torch.zeros(1, 4)])
    if label == "forward_raises":
        return _x(seed, 3)
    return _x(seed)


def _trace(label: str, seed: int, x: torch.Tensor) -> tuple:
    """Which module calls of the model are finite, in call order, and what the first non-finite
    output holds (inf, NaN or both)."""
    if label == "forward_raises":
        return ()
    _, calls = debug.trace_modules(plan.build(label, seed), x)
    first = next((c.kind for c in calls if not c.finite), None)
    return (first, *((c.name, c.finite) for c in calls))


@functools.lru_cache(maxsize=None)
def _intended(label: str) -> tuple:
    """The trace the case is about: the lesson's model and input with fixed seeds."""
    i = plan.LABELS.index(label)
    return _trace(label, i, _input(label, 100 + i))


def _cases(seed: int) -> list[tuple]:
    """``(label, description, model seed, x)`` per graded model: seeds and inputs drawn from ``seed``
    until the model's trace is the intended one (a case that kept its point)."""
    with num_threads(1):        # tiny models: one thread is much faster on a busy machine
        return _draw(seed)


def _draw(seed: int) -> list[tuple]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, label in enumerate(plan.LABELS):
        for _ in range(20):
            model_seed, x_seed = (int(v) for v in torch.randint(0, 2 ** 31 - 1, (2,), generator=g))
            x = _input(label, x_seed)
            if _trace(label, model_seed, x) == _intended(label):
                break
        else:                                       # (never seen) the lesson's own draw
            model_seed, x = i, _input(label, 100 + i)
        out.append((label, _DESCRIPTIONS[label], model_seed, x))
    return out


def cases(seed: int = SELF_CHECK_SEED) -> list[tuple]:
    """``(label, description, model, x)`` for every case that has an expected name (fresh models
    each call; for tools that run answers on the graded models)."""
    return [(label, desc, plan.build(label, s), x) for label, desc, s, x in _cases(seed)
            if label != "forward_raises"]


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
    if type(got) is not str or got not in order:
        return f"{got!r} is not a module name from model.named_modules()."
    first_bad = next((c for c in calls if c.name == got and not c.finite), None)
    if first_bad is None:
        return f"Every output of {got!r} is finite."
    return (f"{got!r} first outputs non-finite values at call #{first_bad.index}, after {expected!r} "
            f"produced them at call #{exp.index}.")


def _judge(cases, result) -> str:
    with num_threads(1):
        return _judge_models(cases, result)


def _judge_models(cases, result) -> str:
    name = "first_nonfinite_layer"
    if type(result) is not dict or type(result.get("cases")) is not list or len(result["cases"]) != len(cases):
        raise fail(name, expected=f"{len(cases)} answers", got=result,
                   hint="the grader could not read your function's answers")
    names = result.get("names")
    if type(names) is list and {"first_nonfinite", "trace_modules"} & {n for n in names if type(n) is str}:
        raise fail(name, expected="your own forward hooks", got="a call to amp_edu.debug",
                   hint="write it with module.register_forward_hook; amp_edu.debug is the answer key")
    n = 0
    for (label, desc, seed, x), got_case in zip(cases, result["cases"]):
        shown = f"case {label!r}: {desc}"
        if type(got_case) is not dict:
            raise fail(name, input=shown, expected="an answer", got=got_case,
                       hint="the grader could not read your function's answers")
        if label == "forward_raises":
            returned(name, got_case.get("outcome"), input=shown,
                     expected="the RuntimeError passed through, or a result", returns=("RuntimeError",))
            hint = _FINALLY_HINT
        else:
            model = plan.build(label, seed)
            ref = debug.first_nonfinite(model, x)
            expected = ref.name if ref is not None else None
            got = returned(name, got_case.get("outcome"), input=shown, expected=expected,
                           hint="your function raised on this model")
            if got != expected or type(got) is not type(expected):
                raise fail(name, input=shown, expected=expected, got=got,
                           hint=_diagnose(model, x, expected, got) + " " + _HINTS[label])
            hint = _REMOVE_HINT
        left = got_case.get("hooks")
        if left != []:
            raise fail(name, input=shown, expected="no hooks left on the model",
                       got=f"hooks still registered on {left}", hint=hint)
        after = got_case.get("x")
        if not (type(after) is torch.Tensor and after.dtype == x.dtype and after.shape == x.shape
                and torch.equal(after.nan_to_num(), x.nan_to_num())):
            raise fail(name, input=shown, expected=x, got=after, hint=_X_HINT)
        n += 1
    return f"{n} models: first non-finite module found, hooks removed"


check_first_nonfinite = Check("first_nonfinite_layer", cases=_cases, plan=plan.first_nonfinite, judge=_judge,
                              echo=True)
"""Grade ``first_nonfinite_layer(model, x) -> str | None`` on models the lesson did not show."""
