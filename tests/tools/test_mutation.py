"""The mutation tool (tools/mutate.py) and what it proves about the graders of every exercise.

Fast tests show the tool can fail: it makes mutants of every answer function, a known-wrong mutant is
killed by its own check, a mutant that never returns is stopped by the time limit, and an
equivalence claim that is false is refuted. The sweep (``slow``: minutes) runs every mutant of
every exercise (01-14) through the graders and asserts that each one is rejected or proven equivalent.
"""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import pytest


TOOLS = Path(__file__).resolve().parents[2] / "tools"
OWNED = ["01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13", "14"]


def _tool(name):
    """A module of tools/ (a folder of scripts, not a package), imported by name as the tool itself does."""
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    return importlib.import_module(name)


mutate = _tool("mutate")
equivalents = _tool("mutation_equivalents")


@pytest.mark.parametrize("lesson", OWNED)
def test_every_answer_function_gets_mutants(lesson):
    ex = mutate.load(lesson)
    assert ex.answers, "no ### BEGIN SOLUTION block found"
    ms = mutate.mutants(ex)
    for ans in ex.answers:
        assert any(m.function == ans.name for m in ms), ans.name
        assert ex.own_check.get(ans.name), f"{ans.name} has no check cell after it"
    assert len({m.source for m in ms}) == len(ms), "duplicate mutants"
    assert all(compile(m.source, "<mutant>", "exec") for m in ms)


def test_the_operators_cover_the_brief():
    ops = {m.operator for lesson in OWNED for m in mutate.mutants(mutate.load(lesson))}
    for op in ("operator", "comparison", "boolean operator", "constant", "dtype", "drop statement",
               "swap arguments", "drop keyword", "drop finally", "finally not guaranteed", "drop with",
               "not in place", "function", "if: always"):
        assert op in ops, op


def _find(lesson, function, original, replacement):
    ex = mutate.load(lesson)
    return ex, next(m for m in mutate.mutants(ex, function) if (m.original, m.replacement) == (original, replacement))


def test_a_known_wrong_mutant_is_killed_and_the_solution_passes():
    ex, m = _find("01", "fp16_fate", "a <= 2.0 ** (-25)", "a < 2.0 ** (-25)")   # the tie at 2^-25 goes to 0
    runner = mutate.Runner(ex)
    assert runner.run({}, [n for _, n in ex.checks], 60)["status"] == "survived"
    res = runner.run({m.cell: m.source}, mutate._order(ex, m.function), 60)
    assert res["status"] == "killed" and res["by"] == "fp16_fate" and "FAIL fp16_fate" in res["detail"]


def test_a_mutant_that_never_returns_is_stopped_and_its_worker_replaced():
    ex = mutate.load("01")
    ans = next(a for a in ex.answers if a.name == "decode")
    looping = "def decode(bits, exponent_bits=5, mantissa_bits=10):\n    while True:\n        pass\n"
    job = {"nb": str(ex.path), "replaced": {str(ans.cell): looping}, "order": ["decode"], "timeout": 1.0}
    w = mutate.Worker()
    try:
        res = w.run(job, hard_s=60)
        assert res["status"] == "timeout" and not w.alive()    # a worker does not outlive a timeout ...
    finally:
        w.close()
    records = mutate._dispatch([mutate.Worker()], [(job, {"k": 1}), ({**job, "replaced": {}, "timeout": 60.0}, {"k": 2})], None)
    assert [r["status"] for r in records] == ["timeout", "survived"]   # ... and a new one takes the next job


def test_a_false_equivalence_claim_is_refuted():
    ex, m = _find("01", "fp16_fate", "a <= 2.0 ** (-25)", "a < 2.0 ** (-25)")
    runner = mutate.Runner(ex)
    claim = equivalents.Claim("01", "fp16_fate", m.line, m.operator, m.original, m.replacement, "wrong on purpose",
                              lambda: [((1.0,), {}), ((2.0 ** -25,), {})])
    ok, detail = equivalents.verify(claim, runner.namespace()["fp16_fate"], runner.namespace({m.cell: m.source})["fp16_fate"])
    assert not ok and "differs" in detail


def test_identical_is_strict():
    import torch
    same = equivalents.identical
    assert same(math.nan, math.nan) and not same(0.0, -0.0) and not same(1, 1.0)
    assert not same(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not same(torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64))
    a = torch.nn.Linear(2, 2)
    b = torch.nn.Linear(2, 2)
    assert same(a, a) and not same(a, b)


def test_every_claim_names_a_mutant_of_the_current_solutions():
    keys, sizes = {}, {}
    for c in equivalents.CLAIMS:
        if (c.lesson, c.function) not in keys:
            keys[c.lesson, c.function] = {m.key for m in mutate.mutants(mutate.load(c.lesson), c.function)}
        assert (c.function, c.line, c.operator, c.original, c.replacement, c.nth) in keys[c.lesson, c.function], c
        assert c.reason
        if c.inputs not in sizes:
            sizes[c.inputs] = len(c.inputs())
        assert sizes[c.inputs] > 0, c


def test_every_mutant_of_every_exercise_is_rejected_or_proven_equivalent():
    records = mutate.sweep(OWNED, timeout_s=20.0, workers=2)
    base = [r for r in records if r["mutant"] == "baseline"]
    assert len(base) == len(OWNED) and all(r["status"] == "passed" for r in base), base
    limit = {r["lesson"]: r["limit_s"] for r in base}     # RELATIVE_LIMIT x each solution's own time
    assert all(mutate.FLOOR_S <= v <= 20.0 for v in limit.values()), limit
    late = [r for r in records if r["status"] == "timeout" and r["seconds"] > limit[r["lesson"]] + 60]
    assert not late, late                                 # a mutant is stopped at its limit, not later
    bad = [f"{r['lesson']} {r['status']}: {r['mutant']} {r.get('claim', '')} {r['detail'][:200]}"
           for r in records if r["mutant"] != "baseline"
           and (r["status"] in ("survived", "stale") or (r.get("claim") and r["status"] != "equivalent"))]
    assert not bad, "\n".join(bad)
    table = mutate.table(records)
    for lesson in OWNED:
        assert f"{lesson}       (all)" in table
