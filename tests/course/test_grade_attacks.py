"""Grading by value, attacked as a learner would: every cheat fails or is flagged, honest work passes.

Issue 29's attacks passed because the old checks ran inside the learner's kernel: the expected
value, the comparison and the guard were objects the learner's code could reach. Each attack here
is a few lines in a notebook cell, written with the course's source open, against the new design
(plans in the kernel, verdicts in the judge). The class is graded with ``python -m amp_edu grade``
and every attacker must end with no check ``pass``: a wrong answer ``fail``s, a rule the exercise
states ``fail``s, a reach for the grader's machinery is ``tampered``. The honest notebooks in the
same class pass every check.

The whole class is graded in bubblewrap. Without a sandbox only the attacks whose outcome can
depend on it are graded again, with the honest notebooks: what bubblewrap changes is what the
kernel can reach *outside its own process* -- files (the checkout, the real ``amp_edu/checks``,
the instructor's home are not mounted; the package and the environment are read-only), the
network, other processes; the kernel's environment is the same minimal one in both modes. An
attack that works inside the kernel's memory (lying values, stack frames, ``gc``, a function mode, an
aten override, patched builtins, a profile hook, patched guard or runner objects) or one the judge
finds in the notebook's source (the exercises' rules, code built at run time, a table, a printed
PASS, another exercise) meets the same defences in both modes, so grading it twice only repeats
the bubblewrap run. The attacks that read the grader's files -- by import (``import_reference``:
which ``amp_edu`` the kernel imports depends on what it can see) or by path
(``reference_by_path``) -- can succeed or fail by the sandbox alone, so they run in both modes
(:data:`SANDBOX_DEPENDENT`). A new attack that reads or writes files, starts processes or opens
sockets belongs there too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from amp_edu.checks import l01
from amp_edu.course import sandbox

from handins import exercise, solved, with_cell  # noqa: E402  (tests/ is on sys.path)

ROOT = Path(__file__).resolve().parents[2]
EX01, EX04 = "01_number_formats.ipynb", "04_gradscaler_from_scratch.ipynb"
SANDBOX = sandbox.bwrap_problem()


def _fate_table() -> dict:
    """What a learner who ran the self-check with a right answer could have written down: the
    fate of every input the self-check's seed draws (the grader draws others)."""
    from amp_edu.formats import decompose

    return {x.hex(): decompose(x, "fp16").kind for (x,) in l01.check_fp16_fate.cases(0) if x == x}


LIAR_FLOAT = ("class Yes(float):\n    def __eq__(self, other):\n        return True\n"
              "    __ne__ = lambda self, other: False\n    __hash__ = float.__hash__\n"
              "def decode(bits, exponent_bits=5, mantissa_bits=10):\n    return Yes(0.0)")
LIAR_STR = ("class Yes(str):\n    def __eq__(self, other):\n        return True\n    __hash__ = str.__hash__\n"
            "def fp16_fate(x):\n    return Yes('normal')")
LIAR_OBJECT = ("class Anything:\n    def __eq__(self, other):\n        return True\n"
               "    def __hash__(self):\n        return 0\n"
               "def fp16_fate(x):\n    return Anything()")
LIAR_NUMPY = ("import numpy as np\nclass Yes(np.float64):\n    def __eq__(self, other):\n        return True\n"
              "    __hash__ = np.float64.__hash__\n"
              "def decode(bits, exponent_bits=5, mantissa_bits=10):\n    return Yes(0.0)")
LIAR_TENSOR = ("import torch\nclass Agree(torch.Tensor):\n"
               "    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
               "        if getattr(func, '__name__', '') in ('equal', '__eq__', 'allclose'):\n            return True\n"
               "        return super().__torch_function__(func, types, args, kwargs or {})\n"
               "def unscale_and_check_(grads, scale):\n    return torch.zeros(()).as_subclass(Agree)")
CLASS_SWAP = ("import torch\nclass Agree(torch.Tensor):\n"
              "    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
              "        if getattr(func, '__name__', '') in ('equal', '__eq__'):\n            return True\n"
              "        return super().__torch_function__(func, types, args, kwargs or {})\n"
              "def update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):\n"
              "    scale.__class__ = Agree\n    growth_tracker.__class__ = Agree")
FRAMES = ("import sys\n"
          "def decode(bits, exponent_bits=5, mantissa_bits=10):\n"
          "    f = sys._getframe(1)\n"
          "    while f is not None:\n"
          "        for name in ('expected', 'exp', 'reference', 'want'):\n"
          "            if name in f.f_locals and isinstance(f.f_locals[name], float):\n"
          "                return f.f_locals[name]\n"
          "        f = f.f_back\n"
          "    return 0.0")
GC_SEARCH = ("import gc\n"
             "def fp16_fate(x):\n"
             "    for o in gc.get_objects():\n"
             "        if isinstance(o, dict) and 'expected' in o and isinstance(o['expected'], str):\n"
             "            return o['expected']\n"
             "    return 'normal'")
MODE = ("import torch\nfrom torch.overrides import TorchFunctionMode\n"
        "class Yes(TorchFunctionMode):\n"
        "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
        "        if getattr(func, '__name__', '') in ('equal', 'allclose', '__eq__'):\n            return True\n"
        "        return func(*args, **(kwargs or {}))\n"
        "Yes().__enter__()\n"
        "def unscale_and_check_(grads, scale):\n    return torch.zeros(())\n"
        "def update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):\n"
        "    pass")
LIBRARY = ("import torch\nlib = torch.library.Library('aten', 'IMPL')\n"
           "lib.impl('equal', lambda a, b: True, 'CPU')\n"
           "def unscale_and_check_(grads, scale):\n    return torch.zeros(())")
BUILTINS = ("import builtins\n_real = builtins.isinstance\nbuiltins.isinstance = lambda o, t: True\n"
            "builtins.type = lambda o: float\n"
            "def decode(bits, exponent_bits=5, mantissa_bits=10):\n    return 'anything'")
PROFILE = ("import sys, torch\n_real = torch.equal\n"
           "def hook(frame, event, arg):\n"
           "    torch.equal = (lambda a, b: True) if event == 'call' else _real\n"
           "sys.setprofile(hook)\n"
           "def unscale_and_check_(grads, scale):\n    return torch.zeros(())")
GUARD = ("for name, obj in list(globals().items()):\n"
         "    if name.startswith('_amp_edu_grader_'):\n"
         "        first = obj.snapshot()\n"
         "        obj.snapshot = lambda: first\n"
         "        obj.run = lambda *a, **k: print('PASS decode: 131355 cases')\n"
         "def decode(bits, exponent_bits=5, mantissa_bits=10):\n    return 0.0")
RUNNER = ("import amp_edu.plans.runner as runner\n"
          "runner.run = lambda *a, **k: print('PASS decode: 131355 cases')\n"
          "runner.each = lambda cases, fn: {'values': [0.0] * len(cases), 'raised': None}")
STUB_CHECKS = ("import amp_edu.checks.l01 as l01\n"
               "print([n for n in dir(l01) if not n.startswith('__')])\n"
               "try:\n    from amp_edu.checks.l01 import _reference_decode as decode\n"
               "except ImportError as exc:\n    print('no reference here:', exc)\n"
               "    decode = lambda bits, e=5, m=10: 0.0")
BY_PATH = ("import importlib.util, glob, os, sys\n"
           "cands = [p for p in glob.glob(sys.prefix + '/lib/python*/site-packages/__editable__*finder.py')]\n"
           "decode = lambda bits, e=5, m=10: 0.0\n"
           "for finder in cands:\n"
           "    text = open(finder).read()\n"
           "    start = text.find(\"'amp_edu': '\")\n"
           "    if start >= 0:\n"
           "        root = text[start + 12:text.find(\"'\", start + 12)]\n"
           "        spec = importlib.util.spec_from_file_location('ref01', os.path.join(root, 'checks', 'l01.py'),\n"
           "                                                      submodule_search_locations=None)\n"
           "        try:\n"
           "            import amp_edu\n"
           "            sys.path.insert(0, os.path.dirname(root))\n"
           "            mod = importlib.util.module_from_spec(spec)\n"
           "            mod.__package__ = 'amp_edu.checks'\n"
           "            spec.loader.exec_module(mod)\n"
           "            decode = lambda bits, e=5, m=10: mod._reference_decode(bits, e, m)\n"
           "        except Exception as exc:\n"
           "            print('could not load the reference:', type(exc).__name__, exc)")
EXEC = ("src = 'from amp_edu.formats import decompose as d'\n"
        "exec(src.replace('formats', 'formats'))\n"
        "def fp16_fate(x):\n    return d(x, 'fp16').kind")
LIBRARY_ANSWER = ("from amp_edu.formats import decompose\n"
                  "def fp16_fate(x):\n    return decompose(x, 'fp16').kind")
TORCH_CAST = ("import torch\n"
              "def fp16_fate(x):\n"
              "    v = torch.tensor(x).half().float().item()\n"
              "    import math\n"
              "    if math.isnan(v): return 'nan'\n"
              "    if math.isinf(v): return 'inf'\n"
              "    if v == 0: return 'zero'\n"
              "    return 'subnormal' if abs(v) < 2 ** -14 else 'normal'")
SCALER_ANSWER = ("from amp_edu import scaler\n"
                 "def update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):\n"
                 "    scaler.update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval)")
PRIVATE_AMP = ("import torch\n"
               "def update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):\n"
               "    torch._amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval)")
EXIT_PASS = ("import sys\nprint('PASS decode: 131355 cases')\nprint('PASS fp16_fate: 102 cases')\n"
             "def decode(bits, exponent_bits=5, mantissa_bits=10):\n    raise SystemExit(0)")


def table_attack() -> str:
    return (f"TABLE = {_fate_table()!r}\n"
            "def fp16_fate(x):\n    return 'nan' if x != x else TABLE.get(x.hex(), 'normal')")


def after_answers(nb, code: str):
    """``nb`` with ``code`` as a cell after the last answer cell (it replaces the learner's answer)."""
    last = max(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and not c.source.startswith("# CHECK:")
               and ("def " in c.source or "YOUR CODE" in c.source))
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    return with_cell(nb, code, after=code_cells.index(last) + 1)


def before_checks(nb, code: str):
    """``nb`` with ``code`` right before each check cell (so it wins over the answer cells above)."""
    import copy

    import nbformat

    nb = copy.deepcopy(nb)
    out = []
    for c in nb.cells:
        if c.cell_type == "code" and c.source.startswith("# CHECK:"):
            out.append(nbformat.v4.new_code_cell(code))
        out.append(c)
    nb.cells = out
    return nb


ATTACKS = {   # name: (exercise file, notebook builder)
    "lying_float": (EX01, lambda: before_checks(exercise(EX01), LIAR_FLOAT)),
    "lying_str": (EX01, lambda: before_checks(exercise(EX01), LIAR_STR)),
    "lying_object": (EX01, lambda: before_checks(exercise(EX01), LIAR_OBJECT)),
    "lying_numpy": (EX01, lambda: before_checks(exercise(EX01), LIAR_NUMPY)),
    "lying_tensor": (EX04, lambda: before_checks(exercise(EX04), LIAR_TENSOR)),
    "class_swap": (EX04, lambda: before_checks(exercise(EX04), CLASS_SWAP)),
    "frames": (EX01, lambda: before_checks(exercise(EX01), FRAMES)),
    "gc_search": (EX01, lambda: before_checks(exercise(EX01), GC_SEARCH)),
    "torch_mode": (EX04, lambda: before_checks(exercise(EX04), MODE)),
    "torch_library": (EX04, lambda: before_checks(exercise(EX04), LIBRARY)),
    "builtins": (EX01, lambda: before_checks(exercise(EX01), BUILTINS)),
    "profile_hook": (EX04, lambda: before_checks(exercise(EX04), PROFILE)),
    "guard_objects": (EX01, lambda: before_checks(exercise(EX01), GUARD)),
    "runner_patch": (EX01, lambda: before_checks(exercise(EX01), RUNNER)),
    "import_reference": (EX01, lambda: before_checks(exercise(EX01), STUB_CHECKS)),
    "reference_by_path": (EX01, lambda: before_checks(exercise(EX01), BY_PATH)),
    "exec_built_code": (EX01, lambda: before_checks(solved(EX01), EXEC)),
    "library_answer": (EX01, lambda: before_checks(solved(EX01), LIBRARY_ANSWER)),
    "torch_cast": (EX01, lambda: before_checks(solved(EX01), TORCH_CAST)),
    "scaler_answer": (EX04, lambda: before_checks(solved(EX04), SCALER_ANSWER)),
    "private_amp": (EX04, lambda: before_checks(solved(EX04), PRIVATE_AMP)),
    "remembered_table": (EX01, lambda: before_checks(exercise(EX01), table_attack())),
    "print_pass_and_exit": (EX01, lambda: before_checks(exercise(EX01), EXIT_PASS)),
    "other_exercise": (EX01, lambda: solved(EX04)),         # a solved 04 handed in as 01
}
HONEST = {"alice": (EX01, lambda: solved(EX01)), "dave": (EX04, lambda: solved(EX04))}
#: the attacks whose outcome can depend on the sandbox (see the module docstring): graded in both modes
SANDBOX_DEPENDENT = ("import_reference", "reference_by_path")


def write_class(root: Path, attackers) -> Path:
    """A class folder: one hand-in per attacker named in ``attackers``, and the honest ones."""
    import nbformat

    for who, (name, build) in {**{a: ATTACKS[a] for a in attackers}, **HONEST}.items():
        (root / who).mkdir()
        nbformat.write(build(), root / who / name)
    return root


@pytest.fixture(scope="module")
def klass(tmp_path_factory) -> Path:
    return write_class(tmp_path_factory.mktemp("class"), ATTACKS)


@pytest.fixture(scope="module")
def sandbox_dependent_class(tmp_path_factory) -> Path:
    return write_class(tmp_path_factory.mktemp("class_none"), SANDBOX_DEPENDENT)


def grade(klass: Path, mode: str, tmp: Path) -> dict:
    out = tmp / f"grades_{mode}.json"
    env = {k: v for k, v in os.environ.items() if k != "AMP_EDU_SMOKE"}
    proc = subprocess.run([sys.executable, "-m", "amp_edu", "grade", str(klass), "--jobs", "2", "--smoke",
                           "--sandbox", mode, "--timeout", "120", "--json", str(out)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=1500)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    by = {}
    for row in data["rows"]:
        by.setdefault(Path(row["notebook"]).parent.name, []).append(row)
    notes = {Path(n["notebook"]).parent.name: n for n in data["notebooks"]}
    return {"rows": by, "notebooks": notes, "stdout": proc.stdout}


def assert_every_attack_fails_or_is_flagged(result: dict, attackers) -> None:
    """Honest work passes; every attacker in ``attackers`` passes no check, and each is failed or
    flagged for the reason its attack calls for."""
    rows, notebooks = result["rows"], result["notebooks"]
    assert set(rows) == set(attackers) | set(HONEST), sorted(rows)
    for who in HONEST:
        assert {r["status"] for r in rows[who]} == {"pass"}, (who, rows[who])
    passed = {who: [r["check"] for r in rows[who] if r["status"] == "pass"] for who in attackers}
    assert not any(passed.values()), {w: p for w, p in passed.items() if p}
    if "other_exercise" in attackers:
        flagged = notebooks["other_exercise"]
        assert any(n.startswith("flagged:") and "04_gradscaler_from_scratch" in n for n in flagged["notes"]), flagged
    # the rules the exercises state are named where they are broken
    for who, words in {"library_answer": "amp_edu.formats", "torch_cast": "no torch casts",
                       "scaler_answer": "amp_edu.scaler", "private_amp": "torch._amp_"}.items():
        if who in attackers:
            assert any(r["status"] == "fail" and words in r["detail"] for r in rows[who]), (who, rows[who])
    # values that could lie arrive as markers naming their type
    for who, words in {"lying_float": "float subclass", "lying_str": "str subclass", "lying_numpy": "no numpy casts",
                       "lying_tensor": "torch.Tensor subclass"}.items():
        if who in attackers:
            assert words in json.dumps(rows[who]), (who, rows[who])
    # reaching for the grader's machinery is named, never a pass
    for who in ("frames", "gc_search", "torch_mode", "torch_library", "builtins", "profile_hook", "runner_patch",
                "import_reference", "reference_by_path", "exec_built_code"):
        if who in attackers:
            assert {r["status"] for r in rows[who]} == {"tampered"}, (who, rows[who])


@pytest.mark.skipif(bool(SANDBOX), reason=f"no sandbox here: {SANDBOX}")
def test_every_attack_fails_or_is_flagged_in_the_sandbox(klass, tmp_path):
    assert_every_attack_fails_or_is_flagged(grade(klass, "bwrap", tmp_path), ATTACKS)


def test_the_attacks_that_depend_on_the_sandbox_fail_or_are_flagged_without_one(sandbox_dependent_class, tmp_path):
    """Without a sandbox, the attacks whose outcome can depend on it (see the module docstring)."""
    assert_every_attack_fails_or_is_flagged(grade(sandbox_dependent_class, "none", tmp_path), SANDBOX_DEPENDENT)


def test_every_attack_is_graded_in_the_sandbox_and_the_file_readers_without_one_too():
    """The split is explicit: every attack is in the bubblewrap class, the no-sandbox class holds
    only named attacks, and both attacks that reach for the grader's files are among them."""
    assert set(SANDBOX_DEPENDENT) <= set(ATTACKS)
    assert {"import_reference", "reference_by_path"} <= set(SANDBOX_DEPENDENT)
