"""Before/after figures for the two from-scratch overheads, with several versions in one process.

    .venv/bin/python tools/overhead_versions.py 5fc61d1 373ee46 [--rounds 5]

Each named git revision's ``amp_edu`` is extracted into a temporary folder under another package
name (``amp_rev0``, ``amp_rev1``, ...: the package imports itself relatively, so the copies do not
mix), next to the working tree's ``amp_edu`` ("now"). Then, in one process, so that a busy machine
slows every version alike:

* **autocast**: the existing benchmark, ``amp_edu.bench.autocast_overhead.run`` on the tiny model,
  once per round with each version's ``autocast`` as ``ours=`` (ours / torch, medians);
* **GradScaler**: the scaler ops of lesson 04's benchmark (``scale``, ``unscale_``, ``step`` with
  an optimizer that does nothing, ``update``; its own setup) on its 120-tensor MLP, each version and
  ``torch.amp.GradScaler`` interleaved in short batches; the figure is the median of the paired
  ratios ours / torch.

Run it on a quiet machine; it prints the load average it saw. It is a maintainer's tool (it needs a
git checkout), not part of the course.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from amp_edu.bench import autocast_overhead  # noqa: E402
from amp_edu.bench.scaler_overhead import _NoStep, _scaler_ops, tall_mlp  # noqa: E402


def extract(rev: str, name: str, into: Path) -> None:
    """``git archive rev amp_edu`` unpacked as package ``name`` under ``into``."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "amp_edu"], check=True,
                          capture_output=True).stdout
    with tempfile.TemporaryDirectory(dir=into) as unpacked:
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            t.extractall(unpacked, filter="data")
        os.replace(Path(unpacked) / "amp_edu", into / name)


def autocast_rounds(versions: dict, rounds: int) -> dict:
    out = {k: [] for k in versions}
    for r in range(rounds):
        for k, mod in versions.items():
            res = autocast_overhead.run(models=("overhead-bound",), ours=mod.autocast.autocast)[0]
            out[k].append(res.ratio)
        print(f"  autocast round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:.2f}x" for k, v in out.items()),
              flush=True)
    return out


def scaler_rounds(versions: dict, rounds: int) -> dict:
    """Lesson 04's benchmark setup (``bench.scaler_overhead.run`` on the CPU: its MLP, gradients,
    no-op optimizer and scaler settings), each version and torch's class interleaved."""
    torch.set_num_threads(1)
    model = tall_mlp(64, 60, seed=0)
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(0))
    model(x).square().mean().backward()
    params, loss = list(model.parameters()), torch.ones(())
    classes = {"torch": torch.amp.GradScaler, **{k: m.scaler.GradScaler for k, m in versions.items()}}
    steps = {k: _scaler_ops(cls("cpu", init_scale=1.0, growth_interval=10 ** 9), _NoStep(params), loss)
             for k, cls in classes.items()}
    times = {k: [] for k in steps}
    for _ in range(rounds * 8):
        for k, it in steps.items():
            for _ in range(3):
                it()
            t0 = time.perf_counter()
            for _ in range(30):
                it()
            times[k].append((time.perf_counter() - t0) / 30)
    return {k: [a / b for a, b in zip(times[k], times["torch"])] for k in versions}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("revisions", nargs="*", help="git revisions to compare with the working tree")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sys.path.insert(0, str(tmp))
        versions = {}
        for i, rev in enumerate(args.revisions):
            name = f"amp_rev{i}"
            extract(rev, name, tmp)
            versions[rev] = importlib.import_module(name)
            importlib.import_module(f"{name}.autocast")
            importlib.import_module(f"{name}.scaler")
        versions["now"] = importlib.import_module("amp_edu")
        importlib.import_module("amp_edu.scaler")
        print(f"autocast, tiny model, ours / torch (median of each round), {args.rounds} rounds:")
        ac = autocast_rounds(versions, args.rounds)
        print("GradScaler ops, 120 tensors, ours / torch (paired):")
        sc = scaler_rounds(versions, args.rounds)
    print(f"\n{'version':10s} {'autocast (median of rounds)':>28s} {'GradScaler (median paired)':>28s}")
    for k in versions:
        print(f"{k:10s} {statistics.median(ac[k]):27.2f}x {statistics.median(sc[k]):27.2f}x")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
