"""Exercise 11's grader, both ways: the solution passes; plausible wrong answers fail with a hint
that points at the mistake. Two ranks are emulated by threads with gloo groups (seconds)."""

import pytest
import torch
import torch.distributed as dist

from amp_edu.checks import l11
from amp_edu.checks.core import SELF_CHECK_SEED, CheckFailed
from amp_edu.plans import byvalue
from amp_edu.plans import l11 as plans_l11


def make(*, sync="sum", compare_one=False, unscale="inv", skip_empty=False, dtype="float32",
         shape=(1,), per_tensor=False, group_kw=True, not_done=False, check="isfinite"):
    """The learner's unscale_and_sync_ with one mistake switched in."""
    def unscale_and_sync_(grads, scale, group):
        if not_done:
            raise NotImplementedError()
        found = torch.zeros(shape, dtype=torch.float32)
        inv = scale.double().reciprocal().float()
        if skip_empty and not grads:
            return found                                   # never joins the all-reduce
        for g in grads:
            bad = (not torch.isfinite(g).all()) if check == "isfinite" else bool(torch.isinf(g).any())
            if bad:
                found.fill_(1.0)
            if unscale == "inv":
                g.mul_(inv)
            elif unscale == "scale":
                g.mul_(scale)
            elif unscale == "divide":
                g.div_(scale)
            elif unscale == "float64":
                g.copy_(g.double() * scale.double().reciprocal())
            elif unscale == "inv_in_grad_dtype":
                g.mul_(inv.to(g.dtype))
            elif unscale == "float32_reciprocal":
                g.mul_(scale.reciprocal())
            elif unscale == "float64_inverse":
                g.mul_(scale.double().reciprocal())           # the inverse never rounded to float32
            if per_tensor:
                dist.all_reduce(found, group=group)
        if sync and not per_tensor:
            op = dist.ReduceOp.MAX if sync == "max" else dist.ReduceOp.SUM
            if group_kw:
                dist.all_reduce(found, op=op, group=group)
            else:
                dist.all_reduce(found, op=op)
        if compare_one:
            found = (found == 1.0).float()
        if dtype == "bool":
            return found.bool()
        return found
    return unscale_and_sync_


def test_solution_passes(capsys):
    l11.check_unscale_and_sync(make())
    assert capsys.readouterr().out.startswith("PASS unscale_and_sync_")


def test_max_reduction_is_accepted_too():
    l11.check_unscale_and_sync(make(sync="max"))


@pytest.mark.parametrize("wrong, hint", [
    (dict(not_done=True), "not done yet"),
    (dict(sync=None), "only its own shard"),
    (dict(compare_one=True), "SUM all-reduce gives 2.0"),
    (dict(unscale=None), "not unscaled"),
    (dict(unscale="scale"), "multiplied by the scale S"),
    (dict(unscale="divide"), "float32-rounded inverse"),
    (dict(unscale="float64"), "float32-rounded inverse"),
    (dict(unscale="inv_in_grad_dtype"), "rounded to the gradients' dtype (float16) before multiplying"),
    (dict(unscale="float64_inverse"), "the inverse stayed float64"),
    (dict(dtype="bool"), "float32 tensor of shape (1,)"),
    (dict(shape=()), "float32 tensor of shape (1,)"),
    (dict(check="isinf"), "isfinite"),
    (dict(group_kw=False), "pass the group"),
])
def test_wrong_answers_fail_with_a_pointed_hint(wrong, hint):
    with pytest.raises(CheckFailed) as e:
        l11.check_unscale_and_sync(make(**wrong))
    assert hint in str(e.value), str(e.value)


def test_a_rank_without_gradients_must_still_join_the_collective():
    with pytest.raises(CheckFailed) as e:
        l11.check_unscale_and_sync(make(skip_empty=True))
    msg = str(e.value)
    assert "holds no gradients and made no all-reduce (it returned early" in msg, msg
    assert "rank 1 holds no gradients" in msg


def test_one_all_reduce_per_tensor_deadlocks_and_is_named_as_such():
    with pytest.raises(CheckFailed) as e:
        l11.check_unscale_and_sync(make(per_tensor=True))
    msg = str(e.value)
    assert "an all-reduce per tensor makes rank 0 wait" in msg and "once, after the loop" in msg, msg
    assert "returned early" not in msg, msg


def test_a_float32_reciprocal_is_the_same_answer():
    """Torch computes 1/S in float64 and rounds to float32; for a float32 S a float32 reciprocal
    gives the same bits (double rounding is innocuous for division when the wider format has at
    least 2p + 2 bits: 53 >= 2 * 24 + 2), so the grader accepts it -- and cannot tell them apart."""
    l11.check_unscale_and_sync(make(unscale="float32_reciprocal"))
    g = torch.Generator().manual_seed(0)
    s = torch.randint(0, 0x7F800000, (2_000_000,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    assert torch.equal(s.reciprocal().view(torch.int32), s.double().reciprocal().float().view(torch.int32))


def test_the_fp16_case_tells_an_fp16_inverse_from_the_float32_one():
    from amp_edu.checks.l11 import _cases
    label, per_rank, scale = next(c for c in _cases() if c[0].startswith("fp16 gradients and a scale"))
    g0 = per_rank[0][0]
    inv = torch.tensor(scale).double().reciprocal().float()
    assert g0.dtype == torch.float16 and scale != 2.0 ** round(torch.log2(torch.tensor(scale)).item())
    differ = (g0.clone().mul_(inv) != g0.clone().mul_(inv.half())).sum().item()
    assert differ >= 3, differ


def test_not_callable():
    with pytest.raises(CheckFailed, match="a function"):
        l11.check_unscale_and_sync(42)


def test_run_ranks_reports_each_rank():
    out = l11.run_ranks(lambda x, group: x * 2, [(1,), (2,)])
    assert out == [("ok", 2), ("ok", 4)]


def test_run_ranks_lives_in_the_plans_and_the_kernel_stand_in_imports_it():
    from amp_edu.course.kernelpackage import stub_source

    assert l11.run_ranks is plans_l11.run_ranks
    assert "from amp_edu.plans.l11 import run_ranks as run_ranks" in stub_source("amp_edu.checks.l11")


# --- by value, drawn cases ------------------------------------------------------------------------
def sent_for(cases, fn) -> dict:
    return byvalue.roundtrip({"learner": [{"callable": True, "type": "function"}],
                              "result": l11.check_unscale_and_sync.plan(byvalue.roundtrip(cases), fn)})


def verdict(fn, seed):
    """The check's verdict on ``fn`` for ``seed``, as the class grader reaches it."""
    cases = l11.check_unscale_and_sync.cases(seed)
    return l11.check_unscale_and_sync.verdict(byvalue.roundtrip(cases), sent_for(cases, fn))


def test_drawn_cases_differ_by_seed_and_the_solution_passes_for_each():
    check = l11.check_unscale_and_sync
    assert byvalue.dumps(check.cases(1)) != byvalue.dumps(check.cases(2))
    assert byvalue.dumps(check.cases(2)) == byvalue.dumps(check.cases(2))
    drawn = [c for c in check.cases(5) if c[0].startswith("drawn")]
    assert len(drawn) == 3 and any(len(c[1][0]) != len(c[1][1]) for c in drawn)
    for seed in (1, 2):
        assert verdict(make(), seed).startswith("PASS unscale_and_sync_: 16 cases")


class Liar(torch.Tensor):
    """A tensor subclass that answers every comparison with True."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.equal, torch.Tensor.__eq__, torch.Tensor.__ne__):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_found_inf_that_lies_fails():
    right = make()

    def liar(grads, scale, group):
        return right(grads, scale, group).as_subclass(Liar)
    with pytest.raises(CheckFailed, match=r"float32 tensor of shape \(1,\)") as e:
        l11.check_unscale_and_sync(liar)
    assert "subclass" in str(e.value)


def test_gradients_replaced_instead_of_unscaled_in_place_fail():
    """The plan hands back the gradient tensors it made: new tensors put into the list are not the
    rank's gradients."""
    right = make()

    def replaces(grads, scale, group):
        copies = [g.clone() for g in grads]
        found = right(copies, scale, group)
        grads[:] = copies
        return found
    with pytest.raises(CheckFailed, match="not unscaled"):
        l11.check_unscale_and_sync(replaces)


def _flags(seed) -> list[bool]:
    """Per case of ``seed``: does some rank hold an inf or NaN."""
    return [any(not torch.isfinite(g).all() for gs in per_rank for g in gs)
            for _, per_rank, _ in l11.check_unscale_and_sync.cases(seed)]


def test_answers_learned_from_the_self_check_fail_under_another_seed():
    """found_inf replayed, call by call on each rank, from the notebook's seed (the gradients
    unscaled right): another seed's drawn cases hold their infs elsewhere."""
    cases = byvalue.roundtrip(l11.check_unscale_and_sync.cases(SELF_CHECK_SEED))
    recorded = [[rk["outcome"]["ok"] for rk in ranks] for ranks in l11.check_unscale_and_sync.plan(cases, make())]
    local = make(sync=None)

    def replay(grads, scale, group):
        r = group.rank()
        local(grads, scale, group)
        replay.calls[r] += 1
        return recorded[replay.calls[r]][r].clone()

    replay.calls = [-1, -1]
    assert verdict(replay, SELF_CHECK_SEED).startswith("PASS")
    seed = next(s for s in range(1, 50) if _flags(s) != _flags(SELF_CHECK_SEED))
    replay.calls = [-1, -1]
    with pytest.raises(CheckFailed, match="drawn"):
        verdict(replay, seed)


def _crafted(case_index: int, kinds: list[str]) -> tuple[list, dict]:
    """The cases of seed 0 and a plan result where every case before ``case_index`` is right and
    case ``case_index`` ends per rank as ``kinds`` says (``ok`` with the right answer, ``hung``)."""
    cases = l11.check_unscale_and_sync.cases(SELF_CHECK_SEED)
    sent = sent_for(cases[:case_index + 1], make())
    ranks = sent["result"][case_index]
    for r, kind in enumerate(kinds):
        if kind == "hung":
            ranks[r].update(kind="hung", outcome=None)
    return cases[:case_index + 1], sent


def test_which_rank_hung_decides_the_hint():
    i = next(k for k, c in enumerate(l11._cases()) if c[0] == "rank 1 holds no gradients; all clean")
    cases, sent = _crafted(i, ["hung", "ok"])          # rank 1 (no gradients) returned, rank 0 waited
    with pytest.raises(CheckFailed) as e:
        l11.check_unscale_and_sync.verdict(cases, sent)
    assert "rank 1 holds no gradients and made no all-reduce" in str(e.value) and "[rank 0]" in str(e.value)
    cases, sent = _crafted(i, ["ok", "hung"])          # rank 1 hung: an endless loop, not an early return
    with pytest.raises(CheckFailed) as e:
        l11.check_unscale_and_sync.verdict(cases, sent)
    assert "did not return within the time limit" in str(e.value) and "[rank 1]" in str(e.value)
    assert "got:      'no answer (hung)'" in str(e.value)


def test_an_unreadable_result_fails_saying_so():
    cases = l11.check_unscale_and_sync.cases(SELF_CHECK_SEED)
    for result in (None, [], [[{"kind": "ok"}]] * len(cases)):
        with pytest.raises(CheckFailed, match="could not read"):
            l11.check_unscale_and_sync.verdict(cases, {"learner": [{"callable": True, "type": "function"}],
                                                       "result": result})


def test_the_plan_stops_after_a_case_where_a_rank_hung(monkeypatch):
    """A rank that never returns keeps running in the kernel: the plan hands back the cases up to
    that one, and the judge fails it naming the rank; a shorter result without a hang is unreadable."""
    import threading
    monkeypatch.setattr(plans_l11.run_ranks, "__defaults__", (0.2,))
    stop = threading.Event()
    right = make()

    def hangs_on_rank_1(grads, scale, group):
        if group.rank() == 1 and len(grads) == 1:      # case "ranks hold different numbers of tensors"
            stop.wait(30)
            return None
        return right(grads, scale, group)
    cases = l11.check_unscale_and_sync.cases(SELF_CHECK_SEED)
    try:
        sent = sent_for(cases, hangs_on_rank_1)
    finally:
        stop.set()
    i = next(k for k, c in enumerate(cases) if c[0] == "ranks hold different numbers of tensors")
    assert len(sent["result"]) == i + 1 and sent["result"][i][1]["kind"] == "hung"
    with pytest.raises(CheckFailed) as e:
        l11.check_unscale_and_sync.verdict(cases, sent)
    assert "ranks hold different numbers of tensors" in str(e.value) and "[rank " in str(e.value)
    cases, sent = _crafted(3, ["ok", "ok"])
    with pytest.raises(CheckFailed, match="could not read"):
        l11.check_unscale_and_sync.verdict(l11.check_unscale_and_sync.cases(SELF_CHECK_SEED), sent)
