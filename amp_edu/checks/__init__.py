"""Graders for the exercises, one module per lesson (``amp_edu.checks.l01`` for lesson 01, ...).

Every grader follows one contract (see :mod:`amp_edu.checks.core`): it runs the learner's code on
many cases — the example from the lesson *and* adversarial ones a nearly-right answer gets wrong —
and on the first wrong answer raises ``AssertionError`` naming the input, the expected and the
actual value, and a hint. On success it prints one line starting with ``PASS``.
"""
