#!/usr/bin/env bash
# The GPU checks to run on a lent device machine, in one go (see CONTRIBUTING.md, "Benchmarks").
# For the course's GPU outputs (every lesson under nbval and stored executed, the parity tests, the bench
# and build/gpu/environment.json, within 9 minutes) run `make gpu-check` (tools/gpu_check.py) instead;
# this script adds the timing-method check and the full bench with its 300 s fallback.
# Runs from the checkout with the machine's own torch:  PYTHONPATH=. bash tools/device_check.sh
# Takes a few minutes on an H100/H200. Writes into ${OUT:-./device_out}:
#   doctor.txt       what amp_edu detects (device, capability, flags)
#   nvidia-smi.txt   the GPU, driver and clocks as the driver reports them
#   tests.log        the GPU paths of the parity/agreement tests and the bench's method tests
#   timing_check.json  the timing method on this GPU: one call per event pair (launch latency in
#                    the window) vs N back-to-back calls vs a CUDA graph, warm vs L2-flushed
#   bench_gpu.json   the full benchmark with its environment (commit it into amp_edu/reference/ as
#                    gpu_<name>.json); falls back to --quick if the full run does not finish in time
set -uo pipefail
out=${OUT:-./device_out}
mkdir -p "$out"
export PYTHONPATH=${PYTHONPATH:-.} PYTHONUNBUFFERED=1
py=${PYTHON:-python}

timeout 60 "$py" -m amp_edu doctor 2>&1 | tee "$out/doctor.txt"
(command -v nvidia-smi >/dev/null && timeout 30 nvidia-smi -q > "$out/nvidia-smi.txt") || true

# the GPU paths of the parity/agreement tests and the bench's method tests
AMP_EDU_SMOKE=1 timeout 240 "$py" -m pytest -q -x -p no:cacheprovider -o addopts="" \
  tests/scaler/test_scaler.py tests/scaler/test_torch_port.py tests/autocast/test_api.py \
  tests/autocast/test_agreement.py tests/measure/test_timing.py tests/bench/test_bench.py \
  tests/test_memory.py tests/device/test_device.py tests/fp8/test_linear_parity.py 2>&1 | tee "$out/tests.log" | tail -15

# the timing method itself, on real hardware
timeout 120 "$py" - "$out/timing_check.json" <<'EOF' 2>&1 | tail -20
import json, sys, torch
from amp_edu.bench import matmul
from amp_edu.bench.env import environment
from amp_edu.measure import timing
from amp_edu.device import info
if not torch.cuda.is_available():
    print("no CUDA: timing check skipped"); sys.exit(0)
dev = torch.device("cuda")
res = {"environment": environment(dev), "l2_bytes": timing.l2_bytes(dev), "rows": []}
dinfo = info(dev)
for shape in ([256, 256, 256], [1024, 1024, 1024], [4096, 4096, 4096], [16, 8192, 8192]):
    a, b = matmul.operands(shape, device=dev)
    for dt in ("float32", "bfloat16", "float8_e4m3fn"):
        why = matmul.unsupported(dt, shape, dinfo)
        if why:
            res["rows"].append({"shape": shape, "dtype": dt, "skipped": why}); continue
        try:
            fn = matmul.matmul_fn(a, b, dt)
            fn()
        except (RuntimeError, NotImplementedError) as exc:
            res["rows"].append({"shape": shape, "dtype": dt, "error": str(exc)[:200]}); continue
        one = timing.measure(fn, device=dev, repeats=10, min_time_s=0.05, window_s=1e-9)   # 1 call per pair
        eager = timing.measure(fn, device=dev, repeats=10, min_time_s=0.05)
        graph = timing.measure(fn, device=dev, repeats=10, min_time_s=0.05, graph=True)
        cold = timing.measure(fn, device=dev, repeats=10, min_time_s=0.05, flush_l2=True)
        row = {"shape": shape, "dtype": dt}
        for name, t in (("one_call", one), ("back_to_back", eager), ("graph", graph), ("cold", cold)):
            row[name] = {"median_s": t.median_s, "iqr_s": t.iqr_s, "calls": t.calls_per_repeat, "method": t.method}
        res["rows"].append(row)
        print(shape, dt, {k: f"{v['median_s'] * 1e6:.1f}us" for k, v in row.items() if isinstance(v, dict)})
json.dump(res, open(sys.argv[1], "w"), indent=1)
EOF

if ! timeout 300 "$py" -m amp_edu bench --json "$out/bench_gpu.json" > "$out/bench.txt" 2> "$out/bench.progress"; then
  echo "full bench did not finish in 300 s: running --quick" | tee -a "$out/bench.progress"
  timeout 150 "$py" -m amp_edu bench --quick --json "$out/bench_gpu.json" > "$out/bench.txt" 2>> "$out/bench.progress"
fi
tail -45 "$out/bench.txt"
