"""Lesson 09's grader: the reference passes; plausible wrong answers fail with a useful message."""

import pytest
import torch

from amp_edu.checks import l09
from amp_edu.checks.core import CheckFailed
from checkhelp import verdict  # noqa: E402  (tests/ is on sys.path)


def _tensors(out, nested=(list, tuple), dicts=True):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, nested):
        return [t for o in out for t in _tensors(o, nested, dicts)]
    if dicts and isinstance(out, dict):
        return [t for o in out.values() for t in _tensors(o, nested, dicts)]
    return []


def _bad(out, test=lambda t: ~torch.isfinite(t), **which):
    return any(t.is_floating_point() and bool(test(t).any()) for t in _tensors(out, **which))


def _hits(model, x, *, bad=_bad, which=lambda name, mod: True, pre=False, remove=True):
    """Names of the hooked modules whose output (inputs, with ``pre``) is ``bad``, in firing order."""
    hits, handles = [], []
    for name, mod in model.named_modules():
        if not which(name, mod):
            continue
        if pre:
            handles.append(mod.register_forward_pre_hook(lambda m, i, name=name: hits.append(name) if bad(i) else None))
        else:
            handles.append(mod.register_forward_hook(lambda m, i, o, name=name: hits.append(name) if bad(o) else None))
    try:
        model(x)
    finally:
        if remove:
            for h in handles:
                h.remove()
    return hits


def _first(hits):
    return hits[0] if hits else None


def reference(model, x):
    return _first(_hits(model, x))


def output_only(model, x):
    return "" if _bad(model(x)) else None


def _outputs(model, x):
    outs = {}
    handles = [mod.register_forward_hook(lambda m, i, o, name=name: outs.setdefault(name, o))
               for name, mod in model.named_modules()]
    model(x)
    for h in handles:
        h.remove()
    return outs


def registration_order(model, x):
    outs = _outputs(model, x)
    return next((n for n, _ in model.named_modules() if n in outs and _bad(outs[n])), None)


def pre_hooks(model, x):
    return _first(_hits(model, x, pre=True))


def leaves_only(model, x):
    return _first(_hits(model, x, which=lambda name, mod: next(mod.children(), None) is None))


def nan_only(model, x):
    return _first(_hits(model, x, bad=lambda o: _bad(o, torch.isnan)))


def last_hit(model, x):
    hits = _hits(model, x, which=lambda name, mod: bool(name))
    return hits[-1] if hits else None


def keeps_hooks(model, x):
    return _first(_hits(model, x, remove=False))


def class_name(model, x):
    name = reference(model, x)
    return None if name is None else type(dict(model.named_modules())[name]).__name__


def tensors_only(model, x):
    return _first(_hits(model, x, bad=lambda o: isinstance(o, torch.Tensor) and not torch.isfinite(o).all()))


def tuples_only(model, x):
    return _first(_hits(model, x, bad=lambda o: _bad(o, nested=tuple)))


def no_dicts(model, x):
    return _first(_hits(model, x, bad=lambda o: _bad(o, dicts=False)))


def none_crashes(model, x):
    """Treats every output that is not a tensor as a container (iterating None raises)."""
    def flat(o):
        return [o] if isinstance(o, torch.Tensor) else [t for i in (o.values() if isinstance(o, dict) else o)
                                                       for t in flat(i)]
    return _first(_hits(model, x, bad=lambda o: any(t.is_floating_point() and not torch.isfinite(t).all()
                                                    for t in flat(o))))


def dict_overwrite(model, x):
    last = {}
    handles = [mod.register_forward_hook(lambda m, i, o, name=name: last.__setitem__(name, _bad(o)))
               for name, mod in model.named_modules()]
    model(x)
    for h in handles:
        h.remove()
    return next((n for n, b in last.items() if b), None)


def skip_root(model, x):
    return _first(_hits(model, x, which=lambda name, mod: bool(name)))


def registration_order_without_root(model, x):
    outs = _outputs(model, x)
    return next((n for n, _ in model.named_modules() if n and n in outs and _bad(outs[n])), None)


def uses_the_library(model, x):
    from amp_edu.debug import first_nonfinite
    r = first_nonfinite(model, x)
    return r and r.name


def test_reference_passes(capsys):
    assert l09.check_first_nonfinite(reference).startswith("PASS first_nonfinite_layer")
    assert "PASS" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, case", [
    (output_only, "nan_mid"),
    (registration_order, "nan_mid"),
    (pre_hooks, "nan_mid"),
    (leaves_only, "parent_inline"),
    (nan_only, "finite_again"),
    (last_hit, "nan_mid"),
    (keeps_hooks, "nan_mid"),
    (class_name, "nan_mid"),
    (tensors_only, "tuple_output"),
    (tuples_only, "list_output"),
    (no_dicts, "dict_output"),
    (none_crashes, "none_output"),
    (dict_overwrite, "shared_module"),
    (skip_root, "root_inline"),
    (registration_order_without_root, "nested"),
])
def test_wrong_answers_fail_on_the_case_that_exposes_them(wrong, case):
    with pytest.raises(CheckFailed) as err:
        l09.check_first_nonfinite(wrong)
    msg = str(err.value)
    assert f"case {case!r}" in msg, msg
    assert "expected:" in msg and "got:" in msg and "hint:" in msg


def no_finally(model, x):
    """Removes its hooks after the forward, but not in a finally: block."""
    hits, handles = [], []
    for name, mod in model.named_modules():
        handles.append(mod.register_forward_hook(lambda m, i, o, name=name: hits.append(name) if _bad(o) else None))
    model(x)
    for h in handles:
        h.remove()
    return _first(hits)


def swallows_errors_but_cleans_up(model, x):
    try:
        return reference(model, x)
    except RuntimeError:
        return None


def test_hooks_must_be_removed_even_when_the_forward_raises(capsys):
    with pytest.raises(CheckFailed) as err:
        l09.check_first_nonfinite(no_finally)
    msg = str(err.value)
    assert "case 'forward_raises'" in msg and "finally" in msg and "hooks still registered" in msg, msg
    assert l09.check_first_nonfinite(swallows_errors_but_cleans_up).startswith("PASS")


def test_unsolved_and_library_answers_fail_usefully():
    with pytest.raises(CheckFailed, match="answer key"):
        l09.check_first_nonfinite(uses_the_library)
    with pytest.raises(CheckFailed, match="a function"):
        l09.check_first_nonfinite("first_nonfinite_layer")


def test_cases_are_fresh_and_cover_every_hint():
    a, b = l09.cases(), l09.cases()
    assert [c[0] for c in a] == list(l09._HINTS)
    assert all(ma is not mb for (_, _, ma, _), (_, _, mb, _) in zip(a, b))
    assert [c[0] for c in l09.check_first_nonfinite.cases(0)] == [*l09._HINTS, "forward_raises"]


def test_drawn_cases_differ_by_seed_and_the_reference_passes_for_several():
    a, b = l09.check_first_nonfinite.cases(1), l09.check_first_nonfinite.cases(2)
    assert [(s, x.tolist()) for _, _, s, x in a] != [(s, x.tolist()) for _, _, s, x in b]
    for seed in (0, 1, 2, 12345):
        assert verdict(l09.check_first_nonfinite, seed, reference).startswith("PASS first_nonfinite_layer: 14 models")


@pytest.mark.parametrize("wrong, case", [
    (output_only, "nan_mid"), (nan_only, "finite_again"), (leaves_only, "parent_inline"),
    (dict_overwrite, "shared_module"), (skip_root, "root_inline"), (pre_hooks, "nan_mid"),
])
def test_wrong_answers_fail_for_other_seeds_too(wrong, case):
    with pytest.raises(CheckFailed, match=f"case {case!r}"):
        verdict(l09.check_first_nonfinite, 7, wrong)


class Liar(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def test_lying_answers_fail():
    with pytest.raises(CheckFailed, match="str subclass"):
        l09.check_first_nonfinite(lambda model, x: Liar("0"))

    def changes_x(model, x):
        name = reference(model, x)
        x.mul_(0)
        return name
    with pytest.raises(CheckFailed, match="must not change the input"):
        l09.check_first_nonfinite(changes_x)

    def answers_for_another_input(model, x):
        return reference(model, torch.randn_like(x))     # not the x it was asked about
    with pytest.raises(CheckFailed, match="case"):
        l09.check_first_nonfinite(answers_for_another_input)
