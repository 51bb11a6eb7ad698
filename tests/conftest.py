"""Shared fixtures, and the two test tiers, decided here and nowhere else.

* **fast** (``pytest -m "not slow"``, ``make test-fast``): the library's unit tests, in-process;
* **course** (``pytest -m slow``, ``make test-course``): everything that runs notebooks, kernels,
  servers or other processes, or compiles -- nbval over the lessons and solutions, kernels started
  by the grader, JupyterLab and the browser, multi-rank launches, fresh interpreters, the mutation
  sweep, Inductor.

A test is in the course tier when :data:`COURSE_TIER` names it (its file, its test function, or
some of its parameters), and only then: this hook gives those tests the ``slow`` marker, which the
Makefile's ``-m`` selects. Test files do not write ``pytest.mark.slow`` themselves
(``tests/test_tiers.py`` checks that, and that every entry still names a test). ``make test`` runs
both tiers, fast first; the course tier on two pytest-xdist workers, each taking whole files
(``--dist loadfile``: a notebook's cells stay in order on one kernel), so a course test counts only
the processes it started itself and keeps its time limits loose enough for a second busy worker.
"""

import fnmatch
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))     # tests/labserver.py
# Library tests run at smoke sizes, like the notebooks.
os.environ.setdefault("AMP_EDU_SMOKE", "1")


@dataclass(frozen=True)
class Tier:
    """Tests of the course tier: those of ``file`` (a file name, or a glob such as ``*.ipynb``),
    whose function is ``test`` (a glob; every test by default) and whose parameters include
    ``params`` (name -> value; any by default), or whose parameter id matches ``param_id``; ``why``
    says what makes them slow."""

    file: str
    why: str
    test: str = "*"
    params: dict = field(default_factory=dict)
    param_id: str = "*"

    def selects(self, item) -> bool:
        if not fnmatch.fnmatchcase(item.path.name, self.file):
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
    Tier("test_autocast_compile.py", _COMPILES),
    Tier("test_browser.py", "Chromium opens every lesson"),
    Tier("test_compile_guards.py", _COMPILES),
    Tier("test_distributed_byvalue.py", "functions run in fresh interpreters"),
    Tier("test_distributed_experiments.py", "two-rank FSDP2/DDP runs"),
    Tier("test_distributed_launch.py", _RANKS),
    Tier("test_distributed_launch_origins.py", "8 ranks per origin, and a kernel for the notebook"),
    Tier("test_fp8_fsdp_allgather.py", "two-rank FSDP2 runs"),
    Tier("test_grade_attacks.py", _GRADES),
    Tier("test_grade_class.py", _GRADES),
    Tier("test_grade_integrity.py", _GRADES),
    Tier("test_lab.py", "it starts JupyterLab"),
    Tier("test_mutation.py", "mutants run in worker processes"),
    Tier("test_optim_distributed.py", _RANKS),
    Tier("test_optim_parity.py", _COMPILES),
    Tier("test_site.py", "it builds the site and opens it in Chromium"),
    # single tests
    Tier("test_checks_l13.py", "Inductor compiles the two models", test="test_the_written_out_kernel_names_are_inductors"),
    Tier("test_compile.py", "Inductor (a C++ build on a cold cache)",
         test="test_inductor_fuses_autocast_casts_and_matches_eager_with_emulated_casts"),
    Tier("test_course.py", _GRADES, test="test_every_shipped_exercise_fails_at_each_check"),
    Tier("test_device.py", "a fresh interpreter per limit", test="test_the_rule_follows_torch_under_a_limit"),
    Tier("test_fp8.py", _RANKS, test="test_reduce_amax_takes_the_max_across_ranks"),
    Tier("test_fp8_torchao_port.py", "48 cases x 2 libraries", test="test_linear_from_config_params"),
    Tier("test_fp8_torchao_port.py", "36 cases x 2 libraries", test="test_linear_from_recipe"),
    Tier("test_fp8_torchao_port.py", "a 1/32-width Llama FFN, forward and backward", test="test_encoder_fw_bw_from_recipe"),
    Tier("test_grade_handout.py", _GRADES, test="test_a_tampered_submission_is_graded_with_the_course_checks"),
    Tier("test_grade_judge.py", "it starts judge processes",
         test="test_the_judge_process_answers_and_is_restarted_after_a_timeout"),
    Tier("test_nbgrader.py", "nbgrader generates and autogrades in kernels",
         test="test_nbgrader_generates_the_exercise_and_autogrades_solved_full_and_shipped_zero"),
    Tier("test_optim_torchao_port.py", _COMPILES, test="test_quantize_*bit_with_qmap_compile"),
    Tier("test_packaging.py", "it builds and installs a wheel", test="test_doctor_runs_from_any_folder_when_installed_without_e"),
    Tier("test_packaging.py", "it builds and installs a wheel", test="test_authoring_tools_refuse_clearly_without_a_checkout"),
    Tier("test_packaging.py", "it builds and installs a wheel, and grades", test="test_grade_runs_from_any_folder_when_installed_without_e"),
    Tier("test_recipes.py", _FRESH,
         test="test_the_families_register_on_import_and_the_packages_below_know_nothing_of_recipes"),
    Tier("test_viz.py", _FRESH, test="test_a_format_colour_does_not_load_the_recipes"),
    # some parameters of a test
    Tier("test_checks_all.py", "lesson 13's graders compile models with Inductor", param_id="13-*"),
    Tier("test_optim_state.py", "torchao's step compiles", test="test_load_state_dict_moves_states_to_the_parameters_device",
         params={"lib": "torchao"}),
    Tier("test_optim_torchao_port.py", "torchao's step compiles", test="test_optim_smoke", params={"lib": "torchao"}),
    Tier("test_optim_torchao_port.py", "torchao's step compiles", test="test_optim_default_dtype_bf16",
         params={"lib": "torchao"}),
    Tier("test_optim_torchao_port.py", "torchao's step compiles", test="test_param_groups", params={"lib": "torchao"}),
    Tier("test_optim_torchao_port.py", "torchao's step compiles", test="test_optim_bf16_stochastic_round_correctness",
         params={"lib": "torchao"}),
    Tier("test_optim_torchao_port.py", _COMPILES, test="test_bf16_stochastic_round*", params={"compile": True}),
)


def pytest_configure(config):
    """nbval's per-cell limit is the grader's (``amp_edu.course.limits.DEFAULT.cell_s``), unless
    given on the command line: one number for every runner of a notebook."""
    from amp_edu.course.limits import DEFAULT
    if getattr(config.option, "nbval_cell_timeout", None) == 2000:      # nbval's own default: not given
        config.option.nbval_cell_timeout = DEFAULT.cell_s


UNMATCHED_TIERS = pytest.StashKey[list]()


@pytest.hookimpl(tryfirst=True)          # before ``-m`` deselects by the marker
def pytest_collection_modifyitems(config, items):
    used, files = set(), {item.path.name for item in items}
    for item in items:
        chosen = [i for i, tier in enumerate(COURSE_TIER) if tier.selects(item)]
        if chosen:
            item.add_marker(pytest.mark.slow)
            used.update(chosen)
    # an entry whose file was collected but which selects none of its tests names a test that is gone
    config.stash[UNMATCHED_TIERS] = [t for i, t in enumerate(COURSE_TIER) if i not in used
                                     and any(fnmatch.fnmatchcase(f, t.file) for f in files)]


@pytest.fixture
def one_thread():
    """torch on one thread for the test, restored after: tiny models run faster without thread
    start-up costs, and a busy machine disturbs them less (``pytest.mark.usefixtures("one_thread")``)."""
    from amp_edu.device import num_threads

    with num_threads(1):
        yield


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """One ``make lab`` server for the whole session; yields ``(base_url, token)``."""
    import labserver
    try:
        with labserver.serve(tmp_path_factory.mktemp("lab")) as served:
            yield served
    except RuntimeError as exc:
        pytest.fail(str(exc))
