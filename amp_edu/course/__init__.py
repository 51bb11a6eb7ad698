"""Course machinery: running notebooks, generating exercises, grading (``make exercises``, ``make grade``).

:data:`ROOT` is the folder holding the ``amp_edu`` package: the checkout in an editable install or
a clone, site-packages after ``pip install .`` (:func:`.exercises.checkout_root` finds a checkout
where one is required). The grader copies the package from there into each graded kernel, and the
judge imports its checks from there.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
