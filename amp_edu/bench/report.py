"""Benchmark results as data: the JSON contract, its checks, the printed table, the references.

A result document is ``{"environment": {...}, "results": [...], ...}``; each result has ``kind``
(``matmul`` or ``train_step``), ``dtype`` (``float32``, ``tf32``, ``float16``, ``bfloat16``,
``float8_e4m3fn``), ``shape`` (``[m, k, n]`` for a matmul: A is m×k, B is k×n), ``median_s``,
``iqr_s`` and, for a matmul, ``tflops``. :func:`annotate` adds ``% of peak`` against the GPU's
datasheet figure *for that dtype* -- and nothing on a CPU or an unknown GPU, which have no
datasheet peak here (a CPU's best measured fp32 rate is no peak for bf16, which may run on other
units: it would read e.g. 374%) -- and speed-ups against fp32 *at the same shape*.

Reference results from real machines live in ``amp_edu/reference/*.json``; :func:`references`
loads every one, so a lesson can plot a learner's run next to them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .. import formats
from ..measure.load import Load
from ..measure.timing import Timing
from ..measure.verdict import Verdict, speed_verdict
from .peaks import lookup, peak_tflops

__all__ = ["REFERENCE_DIR", "validate", "annotate", "table", "save", "load", "references",
           "rows", "speedups", "best_rate", "same_shape_ratio", "throughput_ratio", "train_speedups", "describe", "busy_warning",
           "shape_label", "doc_load", "per_flop", "rate_verdict", "ratio_range", "ratio_text", "claim_verdict"]

REFERENCE_DIR = Path(__file__).resolve().parents[1] / "reference"
ROW_KINDS = ("matmul", "train_step")
# The dtypes the bench measures, by the names its results use (amp_edu.formats names them).
DTYPE_NAMES = tuple(formats.get(n).torch_name for n in ("fp32", "tf32", "fp16", "bf16", "fp8_e4m3"))
_ENV_KEYS = ("device", "device_name", "torch_version", "precision_flags", "threads", "date")


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def validate(doc) -> dict:
    """Raise ``ValueError`` naming every way ``doc`` breaks the bench contract; return ``doc``."""
    if not isinstance(doc, dict):
        raise ValueError(f"a bench result must be a dict with 'environment' and 'results', got {type(doc).__name__}")
    problems = []
    env = doc.get("environment")
    if not isinstance(env, dict):
        problems.append("'environment' must be a dict")
    else:
        problems += [f"environment lacks {k!r}" for k in _ENV_KEYS if k not in env]
    results = doc.get("results")
    if not isinstance(results, list):
        problems.append("'results' must be a list")
        results = []
    for i, r in enumerate(results):
        where = f"results[{i}]"
        if not isinstance(r, dict):
            problems.append(f"{where} must be a dict")
            continue
        if r.get("kind") not in ROW_KINDS:
            problems.append(f"{where}: kind must be one of {ROW_KINDS}, got {r.get('kind')!r}")
        if r.get("dtype") not in DTYPE_NAMES:
            problems.append(f"{where}: dtype must be one of {DTYPE_NAMES}, got {r.get('dtype')!r}")
        shape = r.get("shape")
        if not (isinstance(shape, list) and shape and all(isinstance(d, int) and d > 0 for d in shape)):
            problems.append(f"{where}: shape must be a list of positive ints, got {shape!r}")
        elif r.get("kind") == "matmul" and len(shape) != 3:
            problems.append(f"{where}: a matmul shape is [m, k, n], got {shape!r}")
        for key in ("median_s", "iqr_s"):
            if not (_num(r.get(key)) and r[key] >= 0):
                problems.append(f"{where}: {key} must be a finite number >= 0, got {r.get(key)!r}")
        if r.get("kind") == "matmul" and not (_num(r.get("tflops")) and r["tflops"] > 0):
            problems.append(f"{where}: a matmul needs tflops > 0, got {r.get('tflops')!r}")
    if problems:
        raise ValueError("not a valid bench result: " + "; ".join(problems))
    return doc


def rows(doc: dict, kind: str = "matmul", *, dtype: str | None = None, group: str | None = None) -> list[dict]:
    """The results of ``kind`` (optionally one ``dtype`` / sweep ``group``), in run order.

    ``kind`` and ``dtype`` are checked against the contract's names, so that a slip such as
    ``dtype="fp16"`` raises instead of quietly matching nothing ("not measured").
    """
    if kind not in ROW_KINDS:
        raise ValueError(f"kind must be one of {', '.join(ROW_KINDS)}; got {kind!r}")
    if dtype is not None and dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype must be None or one of {', '.join(DTYPE_NAMES)} (the names the bench "
                         f"records, e.g. 'float16' for fp16); got {dtype!r}")
    if group is not None and not isinstance(group, str):
        raise TypeError(f"group must be None or a sweep name such as 'square', got {type(group).__name__}")
    return [r for r in doc["results"] if r["kind"] == kind and (dtype is None or r["dtype"] == dtype)
            and (group is None or r.get("group") == group)]


def annotate(doc: dict) -> dict:
    """Add ``peak_tflops``, ``pct_of_peak``, ``peak_source`` and ``speedup_vs_fp32`` (in place).

    The peak is the datasheet's dense figure for the row's dtype on a known GPU; on a CPU or an
    unknown GPU all three peak fields are ``None`` (no invented yardstick), and
    ``pct_of_best_same_dtype`` (the row's rate against the best rate of the *same* dtype in this
    run) says how far a size is from that dtype's own best. ``speedup_vs_fp32`` divides the fp32
    time by the row's time *at the same shape*.
    """
    env = doc["environment"]
    mm = rows(doc, "matmul")
    entry = lookup(env["device_name"]) if env["device"] == "cuda" else None
    source = f"datasheet ({entry.name}): {entry.source}" if entry else None
    peak_of = (lambda dt: peak_tflops(env["device_name"], dt)) if entry else (lambda dt: None)  # noqa: E731
    best = {dt: best_rate(doc, dt) for dt in {r["dtype"] for r in mm}}
    for r in mm:
        r["pct_of_best_same_dtype"] = 100.0 * r["tflops"] / best[r["dtype"]]
    base = {tuple(r["shape"]): r for r in mm if r["dtype"] == "float32"}
    for r in mm:
        peak = peak_of(r["dtype"])
        r["peak_tflops"] = peak
        r["pct_of_peak"] = 100.0 * r["tflops"] / peak if peak else None
        r["peak_source"] = source if peak else None
        b = base.get(tuple(r["shape"]))
        r["speedup_vs_fp32"] = b["median_s"] / r["median_s"] if b else None
    train = {r["recipe"]: r for r in rows(doc, "train_step")}
    for r in train.values():
        r["speedup_vs_fp32"] = train["fp32"]["median_s"] / r["median_s"] if "fp32" in train else None
    return doc


def speedups(doc: dict, dtype: str) -> dict[tuple, float]:
    """``{shape: fp32 time / dtype time}`` for every shape measured in both ``dtype`` and fp32."""
    base = {tuple(r["shape"]): r["median_s"] for r in rows(doc, "matmul", dtype="float32")}
    return {tuple(r["shape"]): base[tuple(r["shape"])] / r["median_s"]
            for r in rows(doc, "matmul", dtype=dtype) if tuple(r["shape"]) in base}


def best_rate(doc: dict, dtype: str) -> float | None:
    """The highest TFLOP/s measured for ``dtype`` over all shapes (``None`` if never measured)."""
    rates = [r["tflops"] for r in rows(doc, "matmul", dtype=dtype)]
    return max(rates) if rates else None


def same_shape_ratio(doc: dict, dtype: str, baseline: str = "float32", *,
                     group: str | None = "square") -> tuple[float, tuple] | None:
    """``(baseline time / dtype time, shape)`` at the *largest* shape of ``group`` measured in both
    dtypes, or ``None``. One shape for both: each dtype's best rate may come from a different
    size (fp32 peaking at 1024³, fp16 at 4096³), and dividing those compares two sizes."""
    base = {tuple(r["shape"]): r for r in rows(doc, "matmul", dtype=baseline, group=group)}
    both = [r for r in rows(doc, "matmul", dtype=dtype, group=group) if tuple(r["shape"]) in base]
    if not both:
        return None
    r = max(both, key=lambda r: r["flops"])
    return base[tuple(r["shape"])]["median_s"] / r["median_s"], tuple(r["shape"])


def throughput_ratio(doc: dict, dtype: str, baseline: str = "float32") -> float | None:
    """The ratio in "fp16 throughput is N× fp32's", from :func:`same_shape_ratio` (one shape: the
    largest of the size sweep both were measured at, or of any group if the sweep has none)."""
    got = same_shape_ratio(doc, dtype, baseline) or same_shape_ratio(doc, dtype, baseline, group=None)
    return got[0] if got else None


def train_speedups(doc: dict) -> dict[str, float]:
    """``{recipe: fp32 step time / recipe step time}`` of the training-step benchmark."""
    train = {r["recipe"]: r["median_s"] for r in rows(doc, "train_step")}
    if "fp32" not in train:
        return {}
    return {k: train["fp32"] / v for k, v in train.items()}


def busy_warning(doc: dict) -> str | None:
    """A sentence when other processes kept the machine's cores busy while the run went on."""
    env = doc["environment"]
    shares = [v for v in (env.get("others_busy_at_start"), env.get("others_busy_at_end")) if v is not None]
    if not shares or max(shares) <= 0.25:
        return None
    return (f"other processes kept {max(shares):.0%} of this machine's {env.get('cpu_count')} cores busy "
            f"during the run: timings — multi-threaded ones most — are unreliable")


def describe(doc: dict) -> str:
    """One line naming the machine a result document comes from."""
    env = doc["environment"]
    if env["device"] == "cuda":
        cc = env.get("compute_capability")
        where = f"{env['device_name']} (sm_{''.join(map(str, cc)) if cc else '?'}, CUDA {env.get('cuda_version')})"
    else:
        where = f"{env['device_name']} ({env['threads']} threads, {env.get('cpu_capability', '')})"
    return f"{where}, torch {env['torch_version']}, {env['date'][:10]}"


def shape_label(shape) -> str:
    """``"4096³"`` for a cube, else ``"16×8192×8192"``."""
    return f"{shape[0]}³" if len(set(shape)) == 1 and len(shape) == 3 else "×".join(map(str, shape))


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def table(doc: dict) -> str:
    """The printed table: one line per result, then the skipped measurements with their reasons."""
    lines = [describe(doc), ""]
    if busy_warning(doc):
        lines[1:1] = ["warning: " + busy_warning(doc)]
    head = f"{'kind':<10} {'dtype':<13} {'shape':<22} {'median ms':>10} {'IQR ms':>8} {'TFLOP/s':>9} " \
           f"{'% peak':>7} {'vs fp32':>8} {'rel err':>9}  note"
    lines += [head, "-" * len(head)]
    for r in doc["results"]:
        note = r.get("note") or r.get("recipe") or ""
        lines.append(
            f"{r['kind']:<10} {r['dtype']:<13} {'x'.join(map(str, r['shape'])):<22} "
            f"{r['median_s'] * 1e3:>10.3f} {r['iqr_s'] * 1e3:>8.3f} {_fmt(r.get('tflops'), '.4f'):>9} "
            f"{_fmt(r.get('pct_of_peak'), '.1f'):>7} {_fmt(r.get('speedup_vs_fp32'), '.2f'):>8} "
            f"{_fmt(r.get('rel_error'), '.1e'):>9}  {note}")
    bw = doc.get("bandwidth")
    if bw:
        lines.append(f"\nmemory bandwidth (copy of {bw['bytes'] / 2 / 2**20:.0f} MiB): {bw['gb_per_s']:.1f} GB/s")
    cbw = doc.get("cache_bandwidth")
    if cbw:
        lines.append(f"{cbw['level']}-resident copy bandwidth (copy of {cbw['bytes'] / 2 / 2**20:.1f} MiB, "
                     f"{cbw['level']} {cbw['cache_bytes'] / 2**20:.1f} MiB): {cbw['gb_per_s']:.1f} GB/s")
    for s in doc.get("skipped", []):
        shapes = ", ".join("x".join(map(str, sh)) for sh in s.get("shapes", []))
        lines.append(f"skipped {s['kind']} {s['what']}{' at ' + shapes if shapes else ''}: {s['reason']}")
    return "\n".join(lines)


def save(doc: dict, path) -> Path:
    """Validate ``doc`` and write it as JSON to ``path``."""
    validate(doc)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    return path


def load(path) -> dict:
    """Read and validate a result document."""
    return validate(json.loads(Path(path).read_text()))


def references(directory=None) -> dict[str, dict]:
    """``{file stem: result document}`` for every ``*.json`` in ``amp_edu/reference`` (sorted)."""
    directory = Path(directory) if directory is not None else REFERENCE_DIR
    return {p.stem: load(p) for p in sorted(directory.glob("*.json"))}


# --- noise-aware comparisons of result rows (lesson 06) ----------------------------------------------

def doc_load(doc: dict) -> Load:
    """The machine load a result document recorded, as a :class:`~amp_edu.measure.load.Load`:
    its 1-minute load average against its core count (``None`` caveat on a quiet machine)."""
    env = doc["environment"]
    cores = env.get("cpu_count") or 1
    return Load(env.get("load_average_1min"), int(cores), int(env.get("threads") or 1))


def per_flop(row: dict):
    """A matmul row's time per FLOP (median and IQR divided by its FLOPs), so that rows of
    different shapes compare by throughput: a lower time per FLOP is a higher rate."""
    return Timing(row["median_s"] / row["flops"], row["iqr_s"] / row["flops"], [], cpu_share=row.get("cpu_share"))


def rate_verdict(row: dict, baseline: dict) -> Verdict:
    """Is ``row``'s throughput really higher or lower than ``baseline``'s? A
    :class:`~amp_edu.measure.verdict.Verdict` on time per FLOP: "faster"/"slower" only when the
    difference exceeds the two rows' spread, "within noise" otherwise, and no verdict at all when
    either row's repeats spread so much that the machine was busy (:mod:`amp_edu.measure.verdict`)."""
    return speed_verdict(per_flop(row), per_flop(baseline))


def ratio_range(slow: dict, fast: dict) -> tuple[float, float, float]:
    """``(low, ratio, high)`` of ``slow``'s time over ``fast``'s time, the ends taken from the
    edges of their interquartile boxes (median ± IQR/2): the spread of a measured speed-up.
    ``high`` is ``inf`` when ``fast``'s box reaches down to zero (a spread as wide as the time)."""
    lo = max(slow["median_s"] - slow["iqr_s"] / 2, 0.0) / (fast["median_s"] + fast["iqr_s"] / 2)
    fast_lo = fast["median_s"] - fast["iqr_s"] / 2
    hi = (slow["median_s"] + slow["iqr_s"] / 2) / fast_lo if fast_lo > 0 else math.inf
    return lo, slow["median_s"] / fast["median_s"], hi


def ratio_text(low: float, ratio: float, high: float) -> str:
    """``"1.23× (1.10–1.40×)"``, with ``∞`` for an unbounded end."""
    end = "∞" if math.isinf(high) else f"{high:.2f}"
    return f"{ratio:.2f}× ({low:.2f}–{end}×)"


def claim_verdict(low: float, value: float, high: float, claim_lo: float, claim_hi: float) -> str:
    """Where a measured ratio with its spread ``[low, high]`` sits against a claimed range:
    "inside", "below" or "above" only when the whole spread is; else "at the edge of"."""
    if claim_lo <= low and high <= claim_hi:
        return "inside"
    if high < claim_lo:
        return "below"
    if low > claim_hi:
        return "above"
    return "at the edge of"
