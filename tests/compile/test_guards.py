"""amp_edu.compile.guards.recompile_reasons: dynamo's failed guards collected, nothing printed, logging restored."""

import logging

import torch

from amp_edu.compile.guards import recompile_reasons


def test_collects_the_failed_guard_and_restores_logging(capfd):
    torch._dynamo.reset()
    f = torch.compile(lambda t: t * 2, backend="eager")
    log = torch._logging.getArtifactLogger("torch._dynamo.guards", "recompiles")
    before = (log.propagate, list(log.handlers))
    with recompile_reasons() as reasons:
        f(torch.randn(3))
        f(torch.randn(3, dtype=torch.bfloat16))
    assert any("dtype mismatch" in r and "BFloat16" in r for r in reasons), reasons
    assert (log.propagate, list(log.handlers)) == before
    n = len(reasons)
    f(torch.randn(3, dtype=torch.float16))      # outside the block: not collected
    assert len(reasons) == n
    assert "Recompiling" not in capfd.readouterr().err
    torch._dynamo.reset()
