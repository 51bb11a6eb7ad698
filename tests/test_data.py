"""amp_edu.data: offline tasks, seeded and deterministic, with one interface."""

import pytest
import torch

from amp_edu import data


@pytest.mark.parametrize("name", data.TASKS)
def test_task_is_deterministic_and_well_formed(name):
    a = data.get_task(name, seed=3, device="cpu")
    b = data.get_task(name, seed=3, device="cpu")
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_eval, b.y_eval)
    assert a.x_train.shape[1:] == a.input_shape == a.x_eval.shape[1:]
    assert a.y_train.dtype == torch.long
    assert int(a.y_train.max()) < a.n_classes and int(a.y_train.min()) >= 0
    if a.kind == "lm":
        assert a.x_train.dtype == torch.long
        # y is x shifted by one character
        assert torch.equal(a.x_train[:, 1:], a.y_train[:, :-1])
    else:
        assert a.x_train.dtype == torch.float32 and torch.isfinite(a.x_train).all()
        # every class is present in the training set
        assert set(a.y_train.tolist()) == set(range(a.n_classes))


@pytest.mark.parametrize("name", ["blobs", "spirals", "shapes"])
def test_seed_changes_the_data_and_splits_are_disjoint(name):
    a = data.get_task(name, seed=0, device="cpu", n=256)
    b = data.get_task(name, seed=1, device="cpu", n=256)
    assert not torch.equal(a.x_train, b.x_train)
    assert a.x_train.shape[0] + a.x_eval.shape[0] == 256
    rows = {tuple(r.flatten().tolist()) for r in a.x_train}
    assert not any(tuple(r.flatten().tolist()) in rows for r in a.x_eval)


def test_chars_is_the_zen_of_python():
    text = data.zen_text()
    assert text.startswith("The Zen of Python, by Tim Peters")
    assert "Beautiful is better than ugly." in text
    t = data.get_task("chars", device="cpu", block_size=8)
    decoded = "".join(t.vocab[i] for i in t.x_train[0].tolist())
    assert decoded == text[:8]
    assert t.n_classes == len(set(text)) and t.input_shape == (8,)


def test_batches_are_reproducible_from_a_generator():
    t = data.get_task("blobs", device="cpu", n=128)
    x1, y1 = t.batch(16, torch.Generator().manual_seed(5))
    x2, y2 = t.batch(16, torch.Generator().manual_seed(5))
    x3, _ = t.batch(16, torch.Generator().manual_seed(6))
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and not torch.equal(x1, x3)
    assert x1.shape == (16, 32)


def test_shapes_classes_differ_visibly():
    x, y = data.make_shapes(600, noise=0.0, seed=0)
    means = torch.stack([x[y == k].mean(0).flatten() for k in range(len(data.SHAPE_CLASSES))])
    # horizontal stripes vary along rows, vertical along columns
    h = x[y == 0][:, 0]
    v = x[y == 1][:, 0]
    assert (h.std(dim=2).mean() < 1e-6) and (v.std(dim=1).mean() < 1e-6)
    assert torch.cdist(means, means).fill_diagonal_(1.0).min() > 0.1


def test_loss_accuracy_and_evaluate():
    t = data.get_task("blobs", device="cpu", n=64)
    y = t.y_eval
    perfect = torch.nn.functional.one_hot(y, t.n_classes).float() * 20
    assert t.accuracy(perfect, y) == 1.0
    assert t.loss(perfect, y).item() < 1e-6
    assert t.loss(perfect.half(), y).dtype == torch.float32

    class Oracle(torch.nn.Module):
        def forward(self, x):  # always predicts class 0
            out = torch.zeros(x.shape[0], t.n_classes)
            return out

    res = t.evaluate(Oracle(), batch_size=5)
    assert res["accuracy"] == pytest.approx((y == 0).float().mean().item())
    assert res["loss"] == pytest.approx(torch.log(torch.tensor(float(t.n_classes))).item(), rel=1e-6)


def test_chars_evaluate_weights_by_character():
    t = data.get_task("chars", device="cpu", block_size=8)


    # a model that predicts the next char perfectly: look it up from the eval targets
    lookup = {tuple(x.tolist()): yy for x, yy in zip(t.x_eval, t.y_eval)}

    class Perfect(torch.nn.Module):
        def forward(self, idx):
            ys = torch.stack([lookup[tuple(r.tolist())] for r in idx])
            return torch.nn.functional.one_hot(ys, t.n_classes).float()

    assert t.evaluate(Perfect(), batch_size=3)["accuracy"] == 1.0


@pytest.mark.parametrize("kwargs, err", [
    (dict(name="mnist"), ValueError), (dict(name="blobs", seed=1.5), TypeError),
    (dict(name="blobs", n=3), ValueError), (dict(name="chars", block_size=0), ValueError),
])
def test_bad_input_is_rejected(kwargs, err):
    name = kwargs.pop("name")
    with pytest.raises(err, match="accepted|must be"):
        data.get_task(name, device="cpu", **kwargs)


def test_batch_size_must_be_positive():
    t = data.get_task("blobs", device="cpu", n=64)
    with pytest.raises(ValueError, match="batch_size"):
        t.batch(0)
    with pytest.raises(ValueError, match="batch_size"):
        next(t.eval_batches(-1))


@pytest.mark.parametrize("bad", [True, False, 2.0, "8", None])
def test_batch_rejects_bools_and_non_ints_before_torch_sees_them(bad):
    t = data.get_task("blobs", device="cpu", n=64)
    with pytest.raises(TypeError, match="batch_size must be an int"):   # True used to reach torch.randint
        t.batch(bad)
    with pytest.raises(TypeError, match="batch_size must be an int"):
        next(t.eval_batches(bad))


@pytest.mark.parametrize("kwargs", [dict(seed=True), dict(seed=None), dict(n=True), dict(block_size=True)])
def test_get_task_rejects_bools(kwargs):
    with pytest.raises(TypeError, match="must be an int"):            # seed=True used to crash in torch
        data.get_task("chars" if "block_size" in kwargs else "blobs", device="cpu", **kwargs)


def test_numpy_ints_are_ints():
    np = pytest.importorskip("numpy")
    t = data.get_task("blobs", device="cpu", n=np.int64(64), seed=np.int64(3))
    assert t.batch(np.int64(5))[0].shape[0] == 5
