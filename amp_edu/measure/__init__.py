"""Measurement with no model in it: how the course times code, tests paired samples and words a verdict.

Every number the course calls "faster", "slower" or "better" goes through this package, and
nothing here knows about models, recipes or benchmarks, so a lesson, a benchmark and the study
import the same rules without pulling each other in:

=========== =============================================================================
``timing``  the one timing primitive: warm-up; on CUDA many back-to-back calls per event
            pair (warm or L2-flushed); CPU ``Timer`` with all threads; median and IQR;
            :func:`~amp_edu.measure.timing.compare` times variants side by side
``stats``   paired samples: the paired t-test and the exact sign test (no SciPy)
``verdict`` what a measurement supports, in words: "faster"/"slower" only beyond the
            spread of the repeats, **no verdict at all** when the repeats spread so much
            that the machine was busy; the paired tests' calls
``load``    how busy the machine is (load average, other processes' CPU share): context
            recorded beside a result
=========== =============================================================================

Import the module you need (``from amp_edu.measure.timing import compare``); this package file
imports none of them.
"""
