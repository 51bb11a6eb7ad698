"""Graders for exercise 05 (autocast from scratch): eligibility, the cast decision, the weight cache.

=================  ===============================================================
``eligible``       part A, ``check_is_eligible``: would autocast cast this tensor at all?
``args``           part B, ``check_autocast_args``: the arguments autocast hands an op
``cache``          part C, ``check_cached_cast``: the weight-cast cache, scenario by scenario
=================  ===============================================================

The reference is :mod:`amp_edu.autocast` (proven equal to torch's autocast on torch's own test
lists). The cases are ops and tensors the lesson did not show, with the arguments a nearly-right
answer gets wrong; the tensors' values are drawn from the check's seed, and part A adds drawn
tensors of every kind (dtype, device, parameter or not) to its named cases. ``tools/mutate.py``
runs systematic mutants of the solution through these graders; the gaps it found are cases now.

Meta tensors and parameters cannot travel by value: the cases describe them and
:mod:`amp_edu.plans.l05` builds them (:func:`amp_edu.plans.l05.build`), in the kernel for the
learner's functions and here for the reference. The weight cache's checks are about object
identity and autograd history, which only the kernel sees: its plan reports them per scenario.
"""

from .args import check_autocast_args
from .cache import check_cached_cast
from .eligible import check_is_eligible

__all__ = ["check_is_eligible", "check_autocast_args", "check_cached_cast"]
