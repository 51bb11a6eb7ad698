"""Exercise 11's grader, both ways: the solution passes; plausible wrong answers fail with a hint
that points at the mistake. Two ranks are emulated by threads with gloo groups (seconds)."""

import pytest
import torch
import torch.distributed as dist

from amp_edu.checks import l11
from amp_edu.checks.core import CheckFailed


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
