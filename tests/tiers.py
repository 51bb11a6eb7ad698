"""The test tiers, decided in one place: :data:`COURSE_TIER`.

* **fast** (``pytest -m "not slow"``): the library's unit tests, a few minutes on two cores;
* **course** (``pytest -m slow``): everything that runs notebooks, servers or other processes, or
  compiles.

A test is in the course tier when :data:`COURSE_TIER` names it (its file, its test function, or
some of its parameters), and only then: :func:`mark` (called by ``tests/conftest.py`` at
collection) gives those tests the ``slow`` marker, which the Makefile's ``-m`` selects. Test files
do not write ``pytest.mark.slow`` themselves (``tests/test_tiers.py`` checks that, and that every
entry still names a test). A plain module, not the conftest, so that the conftest and
``tests/test_tiers.py`` share one copy of it (pytest imports test files with
``--import-mode=importlib``; ``tests/`` is on ``sys.path`` for helpers like this one).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _where(item) -> str:
    """A test's file as a :class:`Tier` names it: its path from the checkout, ``/``-separated
    (``tests/course/test_grade_class.py``, ``notebooks/05_autocast_from_scratch.ipynb``)."""
    path = Path(item.path).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


@dataclass(frozen=True)
class Tier:
    """Tests of the course tier: those of ``file`` (a path from the checkout such as
    ``tests/course/test_lab.py``, or a glob such as ``*.ipynb``),
    whose function is ``test`` (a glob; every test by default) and whose parameters include
    ``params`` (name -> value; any by default), or whose parameter id matches ``param_id``; ``why``
    says what makes them slow."""

    file: str
    why: str
    test: str = "*"
    params: dict = field(default_factory=dict)
    param_id: str = "*"

    def selects(self, item) -> bool:
        if not fnmatch.fnmatchcase(_where(item), self.file):
            return False
        if not fnmatch.fnmatchcase(getattr(item, "originalname", item.name), self.test):
            return False
        callspec = getattr(item, "callspec", None)
        if self.params and (callspec is None or any(
                k not in callspec.params or callspec.params[k] != v for k, v in self.params.items())):
            return False
        return self.param_id == "*" or (callspec is not None and fnmatch.fnmatchcase(callspec.id, self.param_id))


_COMPILES = "it compiles (dynamo, Inductor or torchao's compiled step)"
_GRADES = "it starts grading kernels"
_RANKS = "it starts rank processes"
_FRESH = "it starts a fresh interpreter"

#: The course tier, one row per file, test or parameter set; everything else is the fast tier.
COURSE_TIER = (
    Tier("*.ipynb", "nbval runs a lesson or a solution, every cell, in a kernel"),
    # whole files
    Tier("tests/autocast/test_under_compile.py", _COMPILES),
    Tier("tests/course/test_browser.py", "Chromium opens every lesson"),
    Tier("tests/compile/test_guards.py", _COMPILES),
    Tier("tests/distributed/test_byvalue.py", "functions run in fresh interpreters"),
    Tier("tests/distributed/test_experiments.py", "two-rank FSDP2/DDP runs"),
    Tier("tests/distributed/test_launch.py", _RANKS),
    Tier("tests/distributed/test_launch_origins.py", "8 ranks per origin, and a kernel for the notebook"),
    Tier("tests/fp8/test_fsdp_allgather.py", "two-rank FSDP2 runs"),
    Tier("tests/course/test_grade_attacks.py", _GRADES),
    Tier("tests/course/test_grade_class.py", _GRADES),
    Tier("tests/course/test_grade_integrity.py", _GRADES),
    Tier("tests/course/test_lab.py", "it starts JupyterLab"),
    Tier("tests/tools/test_mutation.py", "mutants run in worker processes"),
    Tier("tests/optim/test_checkpoint_sharded.py", _RANKS),
    Tier("tests/optim/test_parity.py", _COMPILES),
    Tier("tests/course/test_site.py", "it builds the site and opens it in Chromium"),
    # single tests
    Tier("tests/checks/test_l13.py", "Inductor compiles the two models", test="test_the_written_out_kernel_names_are_inductors"),
    Tier("tests/compile/test_graphs.py", "Inductor (a C++ build on a cold cache)",
         test="test_inductor_fuses_autocast_casts_and_matches_eager_with_emulated_casts"),
    Tier("tests/course/test_exercises.py", _GRADES, test="test_every_shipped_exercise_fails_at_each_check"),
    Tier("tests/device/test_device.py", "a fresh interpreter per limit", test="test_the_rule_follows_torch_under_a_limit"),
    Tier("tests/fp8/test_pieces.py", _RANKS, test="test_reduce_amax_takes_the_max_across_ranks"),
    Tier("tests/fp8/test_torchao_port.py", "48 cases x 2 libraries", test="test_linear_from_config_params"),
    Tier("tests/fp8/test_torchao_port.py", "36 cases x 2 libraries", test="test_linear_from_recipe"),
    Tier("tests/fp8/test_torchao_port.py", "a 1/32-width Llama FFN, forward and backward", test="test_encoder_fw_bw_from_recipe"),
    Tier("tests/course/test_grade_handout.py", _GRADES, test="test_a_tampered_submission_is_graded_with_the_course_checks"),
    Tier("tests/course/test_grade_judge.py", "it starts judge processes",
         test="test_the_judge_process_answers_and_is_restarted_after_a_timeout"),
    Tier("tests/course/test_nbgrader.py", "nbgrader generates and autogrades in kernels",
         test="test_nbgrader_generates_the_exercise_and_autogrades_solved_full_and_shipped_zero"),
    Tier("tests/optim/test_torchao_port.py", _COMPILES, test="test_quantize_*bit_with_qmap_compile"),
    Tier("tests/test_packaging.py", "it builds and installs a wheel", test="test_doctor_runs_from_any_folder_when_installed_without_e"),
    Tier("tests/test_packaging.py", "it builds and installs a wheel", test="test_authoring_tools_refuse_clearly_without_a_checkout"),
    Tier("tests/test_packaging.py", "it builds and installs a wheel, and grades", test="test_grade_runs_from_any_folder_when_installed_without_e"),
    Tier("tests/recipes/test_recipes.py", _FRESH,
         test="test_the_families_register_on_import_and_the_packages_below_know_nothing_of_recipes"),
    Tier("tests/test_viz.py", _FRESH, test="test_a_format_colour_does_not_load_the_recipes"),
    # some parameters of a test
    Tier("tests/checks/test_all.py", "lesson 13's graders compile models with Inductor", param_id="13-*"),
    Tier("tests/optim/test_state.py", "torchao's step compiles", test="test_load_state_dict_moves_states_to_the_parameters_device",
         params={"lib": "torchao"}),
    Tier("tests/optim/test_torchao_port.py", "torchao's step compiles", test="test_optim_smoke", params={"lib": "torchao"}),
    Tier("tests/optim/test_torchao_port.py", "torchao's step compiles", test="test_optim_default_dtype_bf16",
         params={"lib": "torchao"}),
    Tier("tests/optim/test_torchao_port.py", "torchao's step compiles", test="test_param_groups", params={"lib": "torchao"}),
    Tier("tests/optim/test_torchao_port.py", "torchao's step compiles", test="test_optim_bf16_stochastic_round_correctness",
         params={"lib": "torchao"}),
    Tier("tests/optim/test_torchao_port.py", _COMPILES, test="test_bf16_stochastic_round*", params={"compile": True}),
)


UNMATCHED_TIERS = pytest.StashKey[list]()


def mark(config, items) -> None:
    """Give the tests :data:`COURSE_TIER` names the ``slow`` marker; remember entries that select none."""
    used, files = set(), {_where(item) for item in items}
    for item in items:
        chosen = [i for i, tier in enumerate(COURSE_TIER) if tier.selects(item)]
        if chosen:
            item.add_marker(pytest.mark.slow)
            used.update(chosen)
    # an entry whose file was collected but which selects none of its tests names a test that is gone
    config.stash[UNMATCHED_TIERS] = [t for i, t in enumerate(COURSE_TIER) if i not in used
                                     and any(fnmatch.fnmatchcase(f, t.file) for f in files)]
