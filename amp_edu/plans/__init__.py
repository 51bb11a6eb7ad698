"""The kernel's half of every check: which learner functions to call, on what, in which order.

A check (:mod:`amp_edu.checks`) is written once, in three parts:

* a **plan** (here, ``amp_edu.plans.lNN``): calls the learner's functions on the check's inputs
  and returns what came back — return values, arguments a function mutates, errors — and nothing
  else. It holds no expected value and decides nothing;
* the **cases** and the **reference** (``amp_edu.checks.lNN``): the inputs, drawn from a seed, and
  the expected values computed from the same inputs;
* the **comparison** (``amp_edu.checks.lNN``): expected against returned, a hint for each likely
  mistake.

In a learner's own notebook a ``# CHECK:`` cell runs all three in the kernel, through
:func:`amp_edu.plans.byvalue.roundtrip`, so the values judged are exactly those the class grader
would judge. In the class grader only the plan runs in the kernel (:func:`runner.run`): the inputs
arrive from the judge as a file, the plan's result leaves as a file of plain values
(:mod:`.byvalue`), and the cases, reference and comparison run in a judge process that never
executed learner code (:mod:`amp_edu.course.judge`). The kernel's copy of the package then has
no ``amp_edu.checks``: only stand-ins that say so, and this package.

Plans import the lesson library and nothing of :mod:`amp_edu.checks` or :mod:`amp_edu.course`.
"""
