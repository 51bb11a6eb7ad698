"""Benchmarks: measured speed, never timed tests. ``python -m amp_edu bench [--quick] [--json PATH]``.

=============== ==========================================================================
``roofline``    FLOPs, bytes, arithmetic intensity, ridge point, memory- or compute-bound
``peaks``       datasheet dense peaks of known GPUs, for "% of peak"
``env``         what a result depends on (device, driver, torch, flags, CPU, date); TF32 switch
``matmul``      one matmul in fp32 / tf32 / fp16 / bf16 / fp8, its throughput and its error
``bandwidth``   memory bandwidth of a large copy (the roofline's slope)
``train_step``  one training step in fp32, AMP fp16 and AMP bf16: time, speed-up, memory
``report``      the JSON contract, the printed table, the committed reference results
``classes``     your run beside each CPU class's reference run (what each class stands for)
``plots``       throughput vs size, the roofline, speed-ups against claims, alignment bars
=============== ==========================================================================

(``scaler_overhead`` and ``autocast_overhead`` are lessons 04 and 05's overhead benchmarks.) How
a benchmark times and when it may call one variant faster are not benchmarks but the rules under
them, in :mod:`amp_edu.measure` (``timing``, ``verdict``), which lessons import without this package.

:func:`run` does the whole benchmark for a :class:`Config` and returns the result document; the
dtypes of each shape are timed *side by side* (interleaved rounds), so their ratios survive a
noisy, shared machine.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field

import torch

from ..device import info, is_smoke, pick_device
from ..measure.load import others_busy
from ..measure.timing import compare
from ..recipes import names as recipe_names
from . import report
from .bandwidth import copy_bandwidth
from .env import cache_sizes, environment, precision_flags, tf32
from .matmul import DTYPES, fits_in, matmul_fn, operands, relative_error, result_row, slow_path, unsupported
from .train_step import run_train_step, slow_recipe
from .train_step import unsupported as train_unsupported

__all__ = ["Config", "config", "run", "main"]


@dataclass
class Config:
    """What to measure. Shapes are ``[m, k, n]`` grouped as ``square`` (the size sweep), ``align``
    (aligned vs unaligned neighbours), ``skinny`` (memory-bound) and ``wave`` (GPU tile waves).

    ``cold_groups`` are compared with the DRAM roofline: on a GPU they are timed cold, with the L2
    flushed before every call (a CPU cannot flush between the calls of a timer block; there the
    row's ``fits_in`` says whether its operands fit in a cache)."""

    groups: dict[str, list[list[int]]]
    dtypes: tuple[str, ...] = DTYPES
    slow_cap_flops: int = 2 * 256 ** 3       # largest matmul a slow-path dtype is timed at
    error_max_flops: int = 2 * 1024 ** 3     # float64 reference only up to this size
    rounds: int = 3
    repeats: int = 5
    min_time_s: float = 0.05
    train: dict = field(default_factory=dict)  # run_train_step kwargs; empty: no training step
    recipes: tuple[str, ...] = field(default_factory=lambda: recipe_names("timed"))
    bandwidth_bytes: int = 0                   # 0: no bandwidth measurement
    cold_groups: tuple[str, ...] = ("skinny",)

    def __post_init__(self):
        bad = [d for d in self.dtypes if d not in DTYPES]
        if bad:
            raise ValueError(f"unknown dtypes {bad}; accepted: {', '.join(DTYPES)}")
        if not isinstance(self.groups, dict) or not all(isinstance(v, list) for v in self.groups.values()):
            raise TypeError("groups must be a dict of {group name: list of [m, k, n]}")


def config(quick: bool = False, device: torch.device | str | None = None) -> Config:
    """The benchmark's sizes for this device and mode (smoke under ``AMP_EDU_SMOKE=1``)."""
    dev = torch.device(device) if device is not None else pick_device()
    sq = lambda sizes: [[s, s, s] for s in sizes]  # noqa: E731
    if is_smoke():
        return Config(groups={"square": sq([32, 64]), "align": sq([63, 64]), "skinny": [[4, 64, 64]]},
                      slow_cap_flops=2 * 64 ** 3, rounds=1, repeats=3, min_time_s=0.002,
                      train=dict(batch=8, in_features=16, width=16, depth=1), bandwidth_bytes=1 << 20)
    if dev.type == "cuda":
        groups = {"square": sq([1024, 4096, 8192] if quick else [256, 512, 1024, 2048, 4096, 8192, 16384]),
                  "align": sq([4095, 4096, 4097]),
                  "skinny": [[16, 8192, 8192]]}
        if not quick:
            groups["wave"] = [[m, 4096, 4096] for m in range(256, 4097, 256)]
        return Config(groups=groups, error_max_flops=2 * 4096 ** 3, rounds=3, repeats=10,
                      min_time_s=0.05 if quick else 0.1,
                      train=dict(batch=512 if quick else 2048, in_features=1024, width=4096, depth=4,
                                 n_classes=1000),
                      bandwidth_bytes=1 << 30)
    # the slow-path cap (2·256³ FLOP) keeps the small alignment triplet and skinny shape in reach
    # of every dtype; the 4096-wide skinny matmul (64 MiB of fp32) does not fit in the caches
    groups = {"square": sq([128, 256, 512, 1024] if quick else [64, 128, 256, 512, 1024, 2048]),
              "align": sq([127, 128, 129] if quick else [127, 128, 129, 1023, 1024, 1025]),
              "skinny": [[8, 1024, 1024]] if quick else [[8, 1024, 1024], [8, 4096, 4096]]}
    return Config(groups=groups, rounds=2 if quick else 3, repeats=4 if quick else 6,
                  min_time_s=0.02 if quick else 0.05,
                  train=dict(batch=64 if quick else 128, in_features=256, width=256, depth=3),
                  bandwidth_bytes=(64 if quick else 256) << 20)


def _shapes(cfg: Config):
    """``(shape, [groups])`` for every distinct shape, in first-seen order."""
    out: dict[tuple, list[str]] = {}
    for g, shapes in cfg.groups.items():
        for s in shapes:
            out.setdefault(tuple(s), []).append(g)
    return out.items()


def run(cfg: Config | None = None, *, quick: bool = False, device=None, progress=print) -> dict:
    """Run the benchmark; returns the result document (validated and annotated)."""
    dev = torch.device(device) if device is not None else pick_device()
    cfg = cfg if cfg is not None else config(quick, dev)
    if not isinstance(cfg, Config):
        raise TypeError(f"cfg must be an amp_edu.bench.Config, got {type(cfg).__name__}")
    progress = progress or (lambda *_: None)
    dinfo = info(dev)
    caches = cache_sizes(dev)
    doc = {"environment": environment(dev), "results": [], "skipped": [], "config": asdict(cfg)}
    doc["environment"]["quick"] = quick
    t0 = time.perf_counter()
    for dt in cfg.dtypes:
        why = slow_path(dt, dinfo)
        if why:
            progress(f"{dt}: {why}; timed only up to {cfg.slow_cap_flops / 1e6:.0f} MFLOP per matmul")
    for shape, groups in _shapes(cfg):
        m, k, n = shape
        a, b = operands(list(shape), device=dev)
        fns, notes = {}, {}
        for dt in cfg.dtypes:
            why = unsupported(dt, shape, dinfo)
            slow = slow_path(dt, dinfo)
            if why is None and slow and 2 * m * k * n > cfg.slow_cap_flops:
                why = f"capped ({slow})"
            if why:
                _skip(doc, "matmul", dt, why, list(shape))
                continue
            fn = matmul_fn(a, b, dt)
            if dt == "tf32":
                fn = _with_tf32(fn)
            fns[dt], notes[dt] = fn, slow
        if not fns:
            continue
        cold = dinfo.device == "cuda" and any(g in cfg.cold_groups for g in groups)
        with tf32(False):  # fp32 is IEEE fp32 unless the variant switches TF32 on itself
            timings = compare(fns, device=dev, warmup=2, rounds=cfg.rounds, repeats=cfg.repeats,
                              min_time_s=cfg.min_time_s, flush_l2=cold)
            errors = {dt: relative_error(fn(), a, b) if 2 * m * k * n <= cfg.error_max_flops else None
                      for dt, fn in fns.items()}
        flags = {}
        for dt in timings:                # the precision settings each row was timed under
            with tf32(dt == "tf32"):
                flags[dt] = precision_flags()
        for dt, t in timings.items():
            row = result_row(dt, shape, t, errors[dt], caches=caches, flags=flags[dt])
            row["group"] = groups[0]
            row["groups"] = groups
            row["note"] = notes[dt]
            doc["results"].append(row)
        progress(f"matmul {'x'.join(map(str, shape)):>16}: " + ", ".join(
            f"{dt} {result_row(dt, shape, t)['tflops'] * 1e3:.1f} GFLOP/s" for dt, t in timings.items())
            + f"  [{time.perf_counter() - t0:.0f} s]")
        del a, b, fns
    if cfg.bandwidth_bytes:
        doc["bandwidth"] = copy_bandwidth(cfg.bandwidth_bytes, device=dev, repeats=cfg.repeats)
        progress(f"memory bandwidth: {doc['bandwidth']['gb_per_s']:.1f} GB/s")
        doc["bandwidth"]["fits_in"] = fits_in(doc["bandwidth"]["bytes"], caches)   # None: a DRAM figure
        if caches and doc["bandwidth"]["fits_in"] is None:
            # a copy that stays in the last-level cache: the roof of cache-resident operands
            level, size = max(caches.items(), key=lambda kv: kv[1])
            doc["cache_bandwidth"] = dict(copy_bandwidth(max(size // 4, 4096) // 4 * 4, device=dev,
                                                         repeats=cfg.repeats), level=level, cache_bytes=size)
            progress(f"{level}-resident copy bandwidth: {doc['cache_bandwidth']['gb_per_s']:.1f} GB/s")
    if cfg.train:
        for recipe in cfg.recipes:
            why = train_unsupported(recipe, dinfo)
            if why:
                _skip(doc, "train_step", recipe, why, [])
                continue
            row = run_train_step(recipe, device=dev, repeats=cfg.repeats, min_time_s=cfg.min_time_s,
                                 **cfg.train)
            row["note"] = slow_recipe(recipe, dinfo)
            doc["results"].append(row)
            progress(f"train step {recipe:>8}: {row['median_s'] * 1e3:.1f} ms  [{time.perf_counter() - t0:.0f} s]")
    doc["environment"]["bench_seconds"] = time.perf_counter() - t0
    doc["environment"]["others_busy_at_end"] = others_busy()
    return report.validate(report.annotate(doc))


def _skip(doc, kind, what, reason, shape):
    """Record a measurement not taken; one entry per (kind, dtype or recipe, reason)."""
    for s in doc["skipped"]:
        if (s["kind"], s["what"], s["reason"]) == (kind, what, reason):
            s["shapes"].append(shape)
            return
    doc["skipped"].append({"kind": kind, "what": what, "reason": reason, "shapes": [shape] if shape else []})


def _with_tf32(fn):
    def tf32_fn():
        with tf32(True):
            return fn()
    return tf32_fn


def main(quick: bool = False, json_path: str | None = None) -> int:
    """The ``python -m amp_edu bench`` command: run, print the table, write JSON if asked."""
    doc = run(quick=quick, progress=lambda s: print(s, file=sys.stderr, flush=True))
    print(report.table(doc))
    if json_path:
        print(f"wrote {report.save(doc, json_path)}")
    return 0
