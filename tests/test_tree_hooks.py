"""amp_edu.tree walks nested containers; amp_edu.hooks never leaves a hook behind."""

from collections import namedtuple

import pytest
import torch
from torch import nn

from amp_edu import hooks, tree


def test_tensors_and_map_tensors_walk_nested_containers():
    a, b, c = torch.ones(1), torch.zeros(2), torch.arange(3)
    obj = (a, [b, {"k": c, "s": "text"}], None, 3)
    assert [t is x for t, x in zip(tree.tensors(obj), (a, b, c))] == [True] * 3
    assert [t.dtype for t in tree.floating(obj)] == [torch.float32, torch.float32]
    P = namedtuple("P", "x y")
    out = tree.map_tensors(lambda t: t + 1, (P(a, 2), [b], {"k": c}))
    assert isinstance(out[0], P) and out[0].y == 2 and torch.equal(out[0].x, a + 1)
    assert isinstance(out[1], list) and torch.equal(out[2]["k"], c + 1)


def test_forward_hooks_are_removed_even_when_the_forward_raises():
    net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    seen = []
    with hooks.forward_hooks(net, lambda name, mod: lambda m, i, o: seen.append(name), leaves_only=True):
        net(torch.ones(1, 2))
    assert seen == ["0", "1"]
    with pytest.raises(RuntimeError):
        with hooks.forward_hooks(net, lambda name, mod: lambda m, i, o: seen.append(name)):
            net(torch.ones(1, 3))                        # wrong shape: the forward raises
    assert all(not m._forward_hooks for m in net.modules())
    with pytest.raises(TypeError, match="nn.Module"):
        with hooks.forward_hooks(lambda x: x, lambda n, m: None):
            pass


def test_module_stack_names_the_running_module():
    where = []

    class Spy(nn.Module):
        def forward(self, x):
            where.append(current())
            return x

    net = nn.Sequential(nn.Linear(2, 2), nn.Sequential(Spy()))
    with hooks.module_stack(net) as current:
        assert current() is None
        net(torch.ones(1, 2))
        assert current() is None
    assert where == ["1.0"]
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in net.modules())
    with hooks.module_stack(lambda x: x) as current:     # a plain function: nothing to watch
        assert current() is None
