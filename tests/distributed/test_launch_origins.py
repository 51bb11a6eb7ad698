"""launch() from the three places a rank function can be written: an importable module (see
test_launch.py), a script run as ``python train.py`` (its ``__main__``) and a notebook
cell (a Jupyter kernel's ``__main__``). From each: results, a failing rank named with its own
traceback line, a hang stopped by ``TimeoutError``, Ctrl-C (a real SIGINT) -- and after each, no
rank alive and no child process left (psutil).

Nothing here waits on the clock: Ctrl-C is sent once both ranks have reported that they sleep, and
the time limits (``HANG_S``) are bounds against a real hang, not estimates of how fast ranks start."""

import json
import os
import subprocess
import sys
import textwrap
import time

import psutil

HANG_S = 300        # seconds: each launch's bound; the whole script's is a few of them

# The learner's code: rank functions at the top level of the script or the cell, and a driver that
# runs the four scenarios and reports what it saw as JSON.
RANK_FUNCTIONS = '''
import json, os, signal, threading, time
import psutil, torch, torch.distributed as dist
from amp_edu.distributed import launch, progress
from amp_edu.distributed.launch import LAST_RUN

OFFSET = 100.0                                   # a global of the script / notebook

def my_sum(rank, world_size):
    t = torch.tensor([rank + OFFSET])
    dist.all_reduce(t)
    return t.item()

def my_failing(rank, world_size):
    if rank == 1:
        raise ValueError("my rank 1 broke")      # LEARNER_LINE
    dist.barrier()

def my_stall(rank, world_size):
    progress("sleeping")
    time.sleep(3600)
'''

DRIVER = f"HANG_S = {HANG_S}   # the test's bound against a hang, per launch\n" + '''
# Ctrl-C raises KeyboardInterrupt through Python's SIGINT handler, which Python installs at start-up
# only if SIGINT is not ignored -- and a process started from a background job of a non-interactive
# shell (`make test &`, some CI runners) inherits it ignored. A terminal's Ctrl-C finds the handler.
signal.signal(signal.SIGINT, signal.default_int_handler)

def children():
    from multiprocessing import resource_tracker
    tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
    return sorted(p.pid for p in psutil.Process().children(recursive=True)
                  if p.pid != tracker and p.status() != psutil.STATUS_ZOMBIE)

def alive(pids):
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]

def ctrl_c_when_both_sleep():
    said = set()
    def on_progress(rank, message):
        said.add(rank)
        if len(said) == 2:                                   # a real SIGINT, as Ctrl-C sends
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    return on_progress

report = {"pid": os.getpid()}
for name, call in (("ok", lambda: launch(my_sum, world_size=2, timeout_s=HANG_S, progress=False)),
                   ("fail", lambda: launch(my_failing, world_size=2, timeout_s=HANG_S, progress=False)),
                   ("hang", lambda: launch(my_stall, world_size=2, timeout_s=8, progress=False)),
                   ("ctrl_c", lambda: launch(my_stall, world_size=2, timeout_s=HANG_S,
                                             progress=ctrl_c_when_both_sleep()))):
    t = time.monotonic()
    try:
        out = {"result": call()}
    except BaseException as e:
        out = {"error": type(e).__name__, "message": str(e)}
    time.sleep(0.5)
    out.update(seconds=time.monotonic() - t, ranks=list(LAST_RUN["pids"]), alive=alive(LAST_RUN["pids"]),
               children=children())
    report[name] = out
print("REPORT " + json.dumps(report))
'''


def _check(report):
    ok, fail, hang, ctrl_c = (report[k] for k in ("ok", "fail", "hang", "ctrl_c"))
    assert ok.get("result") == [201.0, 201.0], ok                       # 100 + 101, on both ranks
    assert fail.get("error") == "RuntimeError", fail
    assert fail["message"].startswith("rank 1 failed: ValueError: my rank 1 broke"), fail
    assert "# LEARNER_LINE" in fail["message"], fail["message"]        # the learner's own line, in the traceback
    assert hang.get("error") == "TimeoutError" and "timeout_s=8" in hang["message"], hang
    assert ctrl_c.get("error") == "KeyboardInterrupt", ctrl_c
    for name in ("ok", "fail", "hang", "ctrl_c"):
        assert len(report[name]["ranks"]) == 2
        assert report[name]["alive"] == [] and report[name]["children"] == [], (name, report[name])
    every_rank = [p for k in ("ok", "fail", "hang", "ctrl_c") for p in report[k]["ranks"]]
    assert not [p for p in every_rank if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def _report(text):
    line = next(ln for ln in text.splitlines() if ln.startswith("REPORT "))
    return json.loads(line[len("REPORT "):])


def test_from_a_script_main(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(RANK_FUNCTIONS + '\nif __name__ == "__main__":\n' + textwrap.indent(DRIVER, "    "))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=4 * HANG_S, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    _check(_report(out.stdout))


def test_a_script_without_the_main_guard_is_explained(tmp_path):
    """Spawned ranks re-import the script; without the guard each would launch again. The rank
    dies in its start-up and the parent says why."""
    script = tmp_path / "unguarded.py"
    script.write_text(RANK_FUNCTIONS + f"\nprint(launch(my_sum, world_size=1, timeout_s={HANG_S}))\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=2 * HANG_S, env=env,
                         cwd=tmp_path)
    assert out.returncode != 0
    assert "if __name__ == '__main__':" in out.stderr, out.stderr[-3000:]


def test_from_a_notebook_cell(tmp_path):
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.v4.new_notebook()
    refused = ("class Local:\n    pass\n\ndef uses_local(rank, world_size):\n    return Local()\n\n"
               "try:\n    launch(uses_local, world_size=2)\nexcept TypeError as e:\n    print('REFUSED', e)\n")
    nb.cells = [nbformat.v4.new_code_cell(RANK_FUNCTIONS), nbformat.v4.new_code_cell(DRIVER),
                nbformat.v4.new_code_cell(refused)]
    client = NotebookClient(nb, timeout=4 * HANG_S, kernel_name="python3",
                            resources={"metadata": {"path": os.getcwd()}})
    client.execute()
    text = "".join(o.get("text", "") for o in nb.cells[1].outputs if o.get("output_type") == "stream")
    report = _report(text)
    _check(report)
    said = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    assert "REFUSED class 'Local' is defined in the notebook" in said, said     # before any rank started
    deadline = time.monotonic() + 60                     # and the kernel itself ended with the run
    while psutil.pid_exists(report["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not psutil.pid_exists(report["pid"])
