"""A run resumed from amp_edu.checkpoint.checkpoint continues bit for bit like one that never stopped."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from amp_edu import checkpoint as ckpt_mod
from amp_edu.study import num_threads


@pytest.fixture(autouse=True)
def one_thread():
    with num_threads(1):           # tiny models: thread start-up dominates, and the machine is shared
        yield


def fresh(seed):
    """Model (with dropout: it consumes the global RNG), AdamW, scaler, scheduler, batch generator."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    # init_scale 2**20 makes the first steps overflow and be skipped; growth_interval 3 makes it grow
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 20, growth_interval=3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    gen = torch.Generator().manual_seed(seed + 100)
    return model, opt, scaler, sched, gen


def run(model, opt, scaler, sched, gen, steps, log=None):
    for _ in range(steps):
        x = torch.randn(16, 8, generator=gen)
        y = torch.randint(0, 4, (16,), generator=gen)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        before = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        if scaler.get_scale() >= before:       # the step was not skipped
            sched.step()
        if log is not None:
            log.append(before)


def snapshot(model, opt, scaler, sched):
    return ([p.detach().clone() for p in model.parameters()],
            {k: v for k, v in scaler.state_dict().items()},
            [(k, v.clone() if torch.is_tensor(v) else v) for s in opt.state.values() for k, v in s.items()],
            sched.get_last_lr())


def assert_same(a, b):
    pa, sa, oa, la = a
    pb, sb, ob, lb = b
    assert all(torch.equal(x, y) for x, y in zip(pa, pb)), "parameters differ"
    assert sa == sb, f"scaler state differs: {sa} vs {sb}"
    assert len(oa) == len(ob) and all(ka == kb and (torch.equal(va, vb) if torch.is_tensor(va) else va == vb)
                                      for (ka, va), (kb, vb) in zip(oa, ob)), "optimizer state differs"
    assert la == lb, "learning rate differs"


N, K = 14, 6


def uninterrupted():
    objs = fresh(0)
    scales = []
    run(*objs, N, scales)
    return snapshot(*objs[:4]), scales


def test_the_situation_exercises_skips_growth_and_the_schedule():
    _, scales = uninterrupted()
    assert scales[1] < scales[0], "the first steps should overflow and back off"
    assert any(b > a for a, b in zip(scales, scales[1:])), "the scale should also grow"


def test_resume_from_disk_is_bit_exact(tmp_path):
    want, _ = uninterrupted()
    model, opt, scaler, sched, gen = fresh(0)
    run(model, opt, scaler, sched, gen, K)
    torch.save(ckpt_mod.checkpoint(model, opt, scaler, sched, step=K, generators={"data": gen}), tmp_path / "ckpt.pt")
    del model, opt, scaler, sched, gen
    torch.manual_seed(12345)                               # the new process's RNG is elsewhere
    model, opt, scaler, sched, gen = fresh(7)              # different weights, RNG and batches
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert ckpt_mod.restore(ckpt, model, opt, scaler, sched, generators={"data": gen}) == K
    run(model, opt, scaler, sched, gen, N - K)
    assert_same(snapshot(model, opt, scaler, sched), want)


def test_forgetting_the_scaler_breaks_the_resume():
    want, _ = uninterrupted()
    model, opt, scaler, sched, gen = fresh(0)
    run(model, opt, scaler, sched, gen, K)
    ckpt = ckpt_mod.checkpoint(model, opt, None, sched, generators={"data": gen})
    model, opt, scaler, sched, gen = fresh(7)
    ckpt_mod.restore(ckpt, model, opt, None, sched, generators={"data": gen})
    run(model, opt, scaler, sched, gen, N - K)              # a brand-new scaler: starts at 2**20 again
    with pytest.raises(AssertionError):
        assert_same(snapshot(model, opt, scaler, sched), want)


def test_checkpoint_is_a_copy_not_a_view_of_live_state():
    model, opt, scaler, sched, gen = fresh(0)
    run(model, opt, scaler, sched, gen, K)
    ckpt = ckpt_mod.checkpoint(model, opt, scaler, sched, generators={"data": gen})
    aliased = {"model": model.state_dict()}                 # what a naive in-memory checkpoint keeps
    frozen = {k: v.clone() for k, v in ckpt["model"].items()}
    run(model, opt, scaler, sched, gen, 3)
    assert all(torch.equal(ckpt["model"][k], frozen[k]) for k in frozen)
    assert not all(torch.equal(aliased["model"][k], frozen[k]) for k in frozen)


def test_restore_refuses_mismatched_pieces():
    model, opt, scaler, sched, gen = fresh(0)
    ckpt = ckpt_mod.checkpoint(model, opt, scaler, sched, generators={"data": gen})
    with pytest.raises(ValueError, match="scaler"):
        ckpt_mod.restore(ckpt, model, opt, None, sched, generators={"data": gen})
    with pytest.raises(ValueError, match="generators"):
        ckpt_mod.restore(ckpt, model, opt, scaler, sched)
    with pytest.raises(TypeError):
        ckpt_mod.restore({"x": 1}, model, opt)
    with pytest.raises(TypeError):
        ckpt_mod.checkpoint(model, "adam")
    with pytest.raises(TypeError):
        ckpt_mod.checkpoint(model, opt, generators={"data": 3})


def test_checkpoint_rejects_bad_step_and_generators():
    m = nn.Linear(2, 2)
    o = torch.optim.SGD(m.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="step"):
        ckpt_mod.checkpoint(m, o, step=-1)
    with pytest.raises(ValueError, match="the optimizer steps taken"):
        ckpt_mod.checkpoint(m, o, step=-1)
    for bad in ("5", True, 5.0):
        with pytest.raises(TypeError, match="step must be an int"):
            ckpt_mod.checkpoint(m, o, step=bad)
    assert ckpt_mod.checkpoint(m, o, step=3)["step"] == 3
    with pytest.raises(TypeError, match="dict"):
        ckpt_mod.checkpoint(m, o, generators=[torch.Generator()])
