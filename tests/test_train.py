"""amp_edu.train: one loop, precision recipes, deterministic, and the options lesson 08 needs."""

import math

import pytest
import torch

from amp_edu import data, models, recipes
from amp_edu import train as T
from amp_edu.study import num_threads


@pytest.fixture(autouse=True)
def one_thread():
    with num_threads(1):           # tiny models: thread start-up dominates, and the machine is shared
        yield


@pytest.fixture(scope="module")
def task():
    return data.get_task("blobs", device="cpu", n=256)


def small(task, seed=0):
    return models.build("mlp", task, seed=seed, width=32, depth=2)


@pytest.mark.parametrize("spec, name, scale, master", [
    ("fp32", "fp32", None, False), ("fp16_static_scale(1024)", "fp16_static_scale(1024)", 1024.0, False),
    ("fp16_static_scale(2**10)", "fp16_static_scale(1024)", 1024.0, False),
    ("fp16_master_scale( 8 )", "fp16_master_scale(8)", 8.0, True), ("fp16_master", "fp16_master", None, True),
    ("fp16_static_scale(0.5)", "fp16_static_scale(0.5)", 0.5, False),
])
def test_parse_recipe(spec, name, scale, master):
    r = T.parse_recipe(spec)
    assert r.name == name and isinstance(r, recipes.Master) == master
    r.before_fit(torch.nn.Linear(2, 2), lambda params: torch.optim.SGD(params, lr=0.1))
    assert r.scale == (scale or 1.0) and r.skips_nonfinite == (scale is not None)
    assert T.parse_recipe(r) is r


@pytest.mark.parametrize("spec, err", [
    ("fp8", ValueError), ("fp16_static_scale()", ValueError), ("fp16_static_scale(x)", ValueError),
    ("fp16_static_scale(0)", ValueError), ("fp16_static_scale(inf)", ValueError),
    ("fp16_static_scale(-2)", ValueError), (16, TypeError),
])
def test_parse_recipe_rejects(spec, err):
    with pytest.raises(err, match="recipe|scale"):
        T.parse_recipe(spec)


def test_deterministic_for_a_seed(task):
    kw = dict(steps=5, batch_size=16, lr=0.05, optimizer="sgd")
    a = T.train(task, small(task), "fp32", seed=1, **kw)
    b = T.train(task, small(task), "fp32", seed=1, **kw)
    c = T.train(task, small(task), "fp32", seed=2, **kw)
    assert a.loss == b.loss and a.loss != c.loss
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_fp32_learns_and_history_is_complete(task):
    h = T.train(task, small(task), "fp32", steps=40, batch_size=32, lr=3e-3, eval_every=20)
    assert h.steps == 40 and len(h.accuracy) == len(h.scale) == len(h.skipped) == len(h.time_s) == 40
    assert h.final_loss() < h.loss[0]
    assert h.eval_steps == [20, 40] and h.final_eval["accuracy"] > 1 / task.n_classes
    assert h.scale == [1.0] * 40 and h.skipped_steps == 0 and h.recipe == "fp32"
    assert set(h.to_dict()) >= {"loss", "scale", "skipped", "time_s", "eval_loss"}


@pytest.mark.parametrize("recipe, dtype", [("fp16_pure", torch.float16), ("bf16_pure", torch.bfloat16),
                                           ("fp16_master", torch.float16), ("amp_fp16", torch.float32),
                                           ("amp_bf16", torch.float32)])
def test_recipes_put_weights_in_the_right_dtype(task, recipe, dtype):
    h = T.train(task, small(task), recipe, steps=2, batch_size=8, lr=0.01, optimizer="sgd", eval_every=0)
    assert {p.dtype for p in h.model.parameters()} == {dtype}
    assert (h.scaler is not None) == (recipe == "amp_fp16")      # the only enabled scaler
    assert all(math.isfinite(x) for x in h.loss)


def test_pure_fp16_loses_small_updates_and_master_copy_keeps_them(task):
    # SGD with a tiny lr: lr * grad is far below 2^-11 of most weights
    kw = dict(steps=3, batch_size=32, lr=1e-4, optimizer="sgd", track_updates=True, eval_every=0)
    pure = T.train(task, small(task), "fp16_pure", **kw)
    master = T.train(task, small(task), "fp16_master", **kw)
    fp32 = T.train(task, small(task), "fp32", **kw)
    assert min(pure.lost_updates) > 0.5
    assert max(master.lost_updates) < 0.01 and max(fp32.lost_updates) < 0.01
    # the master copy holds what fp16 cannot: it differs from its fp16 rounding
    opt_params = master.optimizer.param_groups[0]["params"]
    assert all(p.dtype == torch.float32 for p in opt_params)


def test_too_large_static_scale_skips_every_step_and_leaves_weights(task):
    m = small(task)
    init = {k: v.clone().half() for k, v in m.state_dict().items()}
    h = T.train(task, m, "fp16_static_scale(2**30)", steps=3, batch_size=16, lr=0.1, optimizer="sgd",
                eval_every=0)
    assert h.skipped == [True, True, True]
    assert h.scale == [2.0 ** 30] * 3
    assert all(torch.equal(init[k], v) for k, v in h.model.state_dict().items())


@pytest.mark.parametrize("scaled, plain", [("fp16_master_scale(64)", "fp16_master"),
                                           ("fp16_static_scale(64)", "fp16_pure")])
def test_static_scale_unscales_before_the_step(task, scaled, plain):
    # a safe scale changes only rounding: the SGD update is the unscaled run's, not 64x it
    kw = dict(steps=1, batch_size=16, lr=0.05, optimizer="sgd", eval_every=0)
    init = [p.detach().float() for p in small(task).half().parameters()]
    a = T.train(task, small(task), scaled, **kw)
    b = T.train(task, small(task), plain, **kw)
    ua = torch.cat([(q.detach().float() - i).flatten() for q, i in zip(a.optimizer.param_groups[0]["params"], init)])
    ub = torch.cat([(q.detach().float() - i).flatten() for q, i in zip(b.optimizer.param_groups[0]["params"], init)])
    assert ua.norm() == pytest.approx(ub.norm().item(), rel=0.02)
    assert a.skipped_steps == 0 and a.scale == [64.0]


def test_pure_fp16_adam_breaks_on_its_eps(task):
    # Adam's eps=1e-8 is 0 in fp16: a weight whose gradient history underflows divides 0 by 0
    h = T.train(task, small(task), "fp16_pure", steps=3, batch_size=16, lr=1e-3, optimizer="adam",
                eval_every=0)
    w = torch.cat([p.detach().flatten() for p in h.model.parameters()])
    assert not torch.isfinite(w).all() or not all(math.isfinite(x) for x in h.loss)
    assert not any(h.skipped), "without loss scaling nothing is skipped: the NaN reaches the weights"
    assert any(h.nonfinite_grads) or not torch.isfinite(w).all()


def test_amp_fp16_backs_off_from_a_huge_initial_scale(task):
    h = T.train(task, small(task), "amp_fp16", steps=4, batch_size=16, eval_every=0,
                scaler_kwargs=dict(init_scale=2.0 ** 60))
    assert h.skipped[0] and h.scale[0] == 2.0 ** 60
    assert h.scale[1] == 2.0 ** 59               # backoff 0.5 after the overflowing step
    with pytest.raises(ValueError, match="amp_fp16 only"):
        T.train(task, small(task), "fp32", steps=1, scaler_kwargs=dict(init_scale=2.0))


def test_clipping_acts_on_unscaled_gradients(task):
    clip, lr = 1e-3, 1.0
    for recipe in ("fp32", "amp_fp16", "fp16_master_scale(1024)"):
        m = small(task)
        before = [p.detach().clone() for p in (m.half() if "fp16" in recipe and "amp" not in recipe
                                                else m).parameters()]
        h = T.train(task, m, recipe, steps=1, batch_size=16, lr=lr, optimizer="sgd", clip_grad_norm=clip,
                    eval_every=0)
        assert not h.skipped[0]
        stepped = h.optimizer.param_groups[0]["params"]       # the fp32 master copy where there is one
        moved = torch.sqrt(sum(((p.detach().float() - b.float()) ** 2).sum() for p, b in zip(stepped, before)))
        assert moved <= lr * clip * 1.05, f"{recipe}: update norm {moved} > lr * clip"
        assert moved >= lr * clip * 0.5, f"{recipe}: update far smaller than the clip: clipped scaled grads?"


def test_gradient_accumulation_equals_a_big_batch(task):
    kw = dict(steps=3, lr=0.05, optimizer="sgd", seed=4, eval_every=0)
    a = T.train(task, small(task), "fp32", batch_size=8, accumulate=2, **kw)
    b = T.train(task, small(task), "fp32", batch_size=16, **kw)
    assert a.loss == pytest.approx(b.loss, rel=1e-5)
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert all(torch.allclose(sa[k], sb[k], atol=1e-6) for k in sa)


def test_scheduler_callback_and_progress(task, capsys):
    seen = []
    h = T.train(task, small(task), "fp32", steps=4, batch_size=8, lr=0.1, optimizer="adamw",
                scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5),
                callback=lambda step, hist: seen.append((step, hist.steps)), log_every=2, eval_every=0)
    assert h.lr == pytest.approx([0.1, 0.05, 0.025, 0.0125])
    assert seen == [(1, 1), (2, 2), (3, 3), (4, 4)]
    out = capsys.readouterr().out
    assert "[fp32] step     2/4" in out and "step     4/4" in out


def test_model_by_name_and_bad_arguments(task):
    h = T.train(task, "mlp", "fp32", steps=1, batch_size=4, eval_every=0)
    assert isinstance(h.model, models.MLP)
    for kw, match in [(dict(steps=0), "steps"), (dict(batch_size=0), "batch_size"),
                      (dict(accumulate=0), "accumulate"), (dict(clip_grad_norm=0.0), "clip"),
                      (dict(optimizer="lion"), "optimizer"), (dict(lr=-1.0), "lr"),
                      (dict(eval_every=-1), "eval_every")]:
        with pytest.raises(ValueError, match=match):
            T.train(task, small(task), "fp32", **kw)
    with pytest.raises(TypeError, match="nn.Module"):
        T.train(task, 3, "fp32", steps=1)
    with pytest.raises(TypeError, match="clip_grad_norm must be a number"):   # True is not a norm of 1
        T.train(task, small(task), "fp32", clip_grad_norm=True)


def test_wrong_types_are_type_errors_naming_the_argument(task):
    for kw, match in [(dict(batch_size=1.5), "batch_size"), (dict(steps=True), "steps"),
                      (dict(accumulate="2"), "accumulate"), (dict(log_every=None), "log_every"),
                      (dict(eval_every=True), "eval_every"), (dict(eval_every="5"), "eval_every"),
                      (dict(lr=True), "lr"), (dict(lr="0.1"), "lr")]:
        with pytest.raises(TypeError, match=match):
            T.train(task, small(task), "fp32", **kw)
    with pytest.raises(ValueError, match="eval_every must be None or an int >= 0"):
        T.train(task, small(task), "fp32", eval_every=-1)
    params = list(small(task).parameters())
    with pytest.raises(TypeError, match="lr"):
        T.make_optimizer(params, "sgd", lr=True)
    with pytest.raises(ValueError, match="lr must be > 0"):
        T.make_optimizer(params, "sgd", lr=0.0)
    assert T.make_optimizer(params, "sgd", lr=1).param_groups[0]["lr"] == 1.0
