"""amp_edu.models: models for the tasks, deterministic, castable to fp16 and bf16."""

import pytest
import torch

from amp_edu import data, models


@pytest.fixture(scope="module")
def tasks():
    return {n: data.get_task(n, device="cpu", n=64, block_size=8) if n != "chars"
            else data.get_task(n, device="cpu", block_size=8) for n in data.TASKS}


@pytest.mark.parametrize("task_name", data.TASKS)
def test_default_model_gives_logits_of_the_right_shape(tasks, task_name):
    task = tasks[task_name]
    m = models.build(None, task, seed=0)
    x, y = task.batch(4, torch.Generator().manual_seed(0))
    out = m(x)
    assert out.shape == (*y.shape, task.n_classes)
    loss = task.loss(out, y)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())


@pytest.mark.parametrize("name, task_name", [("mlp", "blobs"), ("mlp", "shapes"), ("cnn", "shapes"),
                                             ("transformer", "chars")])
def test_build_is_deterministic_and_leaves_global_rng_alone(tasks, name, task_name):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = models.build(name, tasks[task_name], seed=7)
    after = torch.rand(1)
    assert torch.equal(before, after), "build() must not consume the global RNG"
    b = models.build(name, tasks[task_name], seed=7)
    c = models.build(name, tasks[task_name], seed=8)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("task_name", data.TASKS)
def test_models_run_in_low_precision(tasks, task_name, dtype):
    task = tasks[task_name]
    m = models.build(None, task).to(dtype)
    x, y = task.batch(4, torch.Generator().manual_seed(0))
    if x.is_floating_point():
        x = x.to(dtype)
    out = m(x)
    assert out.dtype == dtype and torch.isfinite(out).all()


def test_transformer_is_causal(tasks):
    task = tasks["chars"]
    m = models.build("transformer", task, seed=0)
    x = task.x_train[:1].clone()
    y1 = m(x)
    x[0, -1] = (x[0, -1] + 1) % task.n_classes     # change only the last token
    y2 = m(x)
    assert torch.allclose(y1[0, :-1], y2[0, :-1], atol=1e-6), "earlier positions must not see later tokens"
    assert not torch.allclose(y1[0, -1], y2[0, -1])


def test_size_overrides_and_n_params(tasks):
    m = models.build("mlp", tasks["blobs"], width=16, depth=1)
    assert models.n_params(m) == 32 * 16 + 16 + 16 * 8 + 8


@pytest.mark.parametrize("name, task_name, err", [
    ("resnet", "blobs", ValueError), ("transformer", "blobs", ValueError),
    ("mlp", "chars", ValueError), ("cnn", "blobs", ValueError),
])
def test_bad_combinations_are_rejected(tasks, name, task_name, err):
    with pytest.raises(err, match="accepted|needs|classifier|language model"):
        models.build(name, tasks[task_name])


def test_task_must_be_a_task():
    with pytest.raises(TypeError, match="Task"):
        models.build("mlp", "blobs")
    with pytest.raises(ValueError, match="divisible"):
        models.TransformerBlock(30, 4)


def test_seeded_gives_the_same_weights_and_restores_the_rng():
    torch.manual_seed(123)
    want_next = torch.rand(3)
    torch.manual_seed(123)
    with models.seeded(5):
        a = torch.nn.Linear(3, 3).weight.detach().clone()
    with models.seeded(5):
        b = torch.nn.Linear(3, 3).weight.detach().clone()
    assert torch.equal(a, b)
    assert torch.equal(torch.rand(3), want_next)           # the learner's RNG stream is untouched
    with pytest.raises(TypeError, match="seed must be an int"):
        with models.seeded(True):
            pass


def test_mlp_builder():
    m = models.mlp([4, 8, 8, 2], seed=0)
    assert [type(x).__name__ for x in m] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    m2 = models.mlp([4, 8, 2], activation=torch.nn.GELU, final_activation=True, dtype=torch.float16)
    assert [type(x).__name__ for x in m2] == ["Linear", "GELU", "Linear", "GELU"] and m2[0].weight.dtype == torch.float16
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), models.mlp([4, 8, 8, 2], seed=0).parameters()))
    for bad, err in [([4], ValueError), ([4, 0], ValueError), ([4, True], TypeError), ("48", ValueError)]:
        with pytest.raises(err):
            models.mlp(bad)


def test_build_rejects_a_bool_seed(tasks):
    with pytest.raises(TypeError, match="seed must be an int"):
        models.build("mlp", tasks["blobs"], seed=True)
