"""amp_edu.checks.rules: an exercise's "don't call X" found in the code, however it is spelled."""

import pytest

from amp_edu.checks.rules import GRADER_RULES, Rule, grader_internals, violations

OPTIM = Rule("amp_edu.optim", ("stochastic_round", "kahan_add_"), "plain tensor operations")


@pytest.mark.parametrize("code", [
    "from amp_edu.optim import stochastic_round",
    "from amp_edu.optim import kahan_add_ as k",
    "from amp_edu.optim.sr import stochastic_round",
    "import amp_edu.optim as O\ny = O.stochastic_round(x, g)",
    "import amp_edu.optim\namp_edu.optim.kahan_add_(p, c, u)",
    "import amp_edu\ny = amp_edu.optim.stochastic_round",
    "from amp_edu import optim\ny = optim.stochastic_round",
    "from amp_edu import optim as q\ny = getattr(q, 'kahan_add_')",
    "%time x = 1\nfrom amp_edu.optim import stochastic_round",
])
def test_uses_are_found(code):
    found = violations([("cell 3", code)], [OPTIM])
    assert found and found[0].startswith("cell 3: ") and "plain tensor operations" in found[0]


@pytest.mark.parametrize("code", [
    "def stochastic_round(x, generator):\n    return x",            # the learner's own function
    "from amp_edu.optim import AdamW",                                # another name of the module
    "import torch\nx = torch.stochastic_round",                       # another module
    "def kahan_add_(p, c, u):\n    p.add_(u)\nkahan_add_(a, b, c)",
    "this is not python (",
])
def test_other_code_is_not(code):
    assert violations([("c", code)], [OPTIM]) == []


def test_imports_carry_to_later_cells():
    assert violations([("c1", "import amp_edu.optim as O"), ("c2", "O.kahan_add_(p, c, u)")], [OPTIM])


def test_a_rule_without_names_forbids_the_module_and_strings_naming_it():
    r = Rule("amp_edu.checks")
    assert violations([("c", "import amp_edu.checks.l01")], [r])
    assert violations([("c", "importlib.import_module('amp_edu.checks.l01')")], [r])
    assert not violations([("c", "import amp_edu.checker_tools")], [r])


@pytest.mark.parametrize("code, what", [
    ("import sys\nf = sys._getframe(2)", "_getframe"),
    ("import inspect\ninspect.stack()", "stack"),
    ("import gc\n[o for o in gc.get_objects()]", "get_objects"),
    ("from torch.overrides import TorchFunctionMode", "TorchFunctionMode"),
    ("import torch.library\nlib = torch.library.Library('aten', 'IMPL')", "torch.library"),
    ("import builtins\nbuiltins.isinstance = f", "builtins"),
    ("import importlib.util\nimportlib.util.spec_from_file_location('x', p)", "spec_from_file_location"),
    ("exec(open(p).read())", "exec() of code built at run time"),
    ("p = '/x/amp_edu/checks/l01.py'", "amp_edu/checks"),
    ("import sys\nsys.modules['amp_edu.plans.runner'] = fake", "sys.modules"),
])
def test_grader_internals_are_named(code, what):
    found = grader_internals([("cell 2", code)])
    assert found and any(what in f for f in found), found


def test_honest_code_touches_no_grader_internals():
    code = ("import math, gc, sys\nimport torch\nfrom amp_edu import data, models\n"
            "def f(x):\n    gc.collect()\n    return torch.isfinite(x).all() and math.isnan(1.0)\nprint(sys.version)")
    assert grader_internals([("c", code)]) == []


def test_bad_rules_are_refused():
    with pytest.raises(ValueError, match="dotted module name"):
        Rule("not a module")
    with pytest.raises(TypeError, match="tuple of strings"):
        Rule("amp_edu.optim", ["stochastic_round"])
    assert all(isinstance(r, Rule) for r in GRADER_RULES)


def test_the_checks_module_allows_the_exercises_names_but_not_writes_or_private_names():
    names = ("l01", "l06", "check_*", "run_ranks")
    assert grader_internals([("c", "from amp_edu.checks.l01 import check_decode, check_fp16_fate")], names) == []
    assert grader_internals([("c", "from amp_edu.checks import l06\nl06.check_arithmetic_intensity(f)")], names) == []
    for code, what in [("import amp_edu.checks.l01 as l\nl._reference_decode", "_reference_decode"),
                       ("from amp_edu.checks.l01 import _all_values", "_all_values"),
                       ("import amp_edu.checks.core", "amp_edu.checks.core"),
                       ("import amp_edu.checks.l01 as l\nl.check_decode = print", "assigns l.check_decode"),
                       ("from amp_edu.checks import l01\nsetattr(l01, 'check_decode', 1)", "setattr on l01")]:
        found = grader_internals([("c", code)], names)
        assert found and what in found[0], (code, found)
