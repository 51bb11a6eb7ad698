"""amp_edu.distributed.launch: results in rank order, progress, errors named by rank, timeouts,
and no process or port left behind -- in every case, including Ctrl-C in the parent.

No test here depends on the machine being idle: a test that must act while the ranks run waits for
an event the ranks report (their pids recorded, a progress line), never for a fixed time, and every
time limit is a bound against a real hang, far above what two ranks need to start on a busy
machine (``HANG_S``)."""

import os
import signal
import socket
import threading
import time

import psutil
import pytest

from amp_edu.distributed import backend_sentence, basics, launch, leftovers, pick_backend
from amp_edu.distributed.launch import LAST_RUN

HANG_S = 300          # seconds: a bound that only a hang reaches, not a busy machine


def children() -> set[int]:
    """This process's living descendants (psutil), except multiprocessing's resource tracker,
    which the first spawn starts once per parent process and which ends with it."""
    from multiprocessing import resource_tracker
    tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
    return {p.pid for p in psutil.Process().children(recursive=True)
            if p.pid != tracker and p.status() != psutil.STATUS_ZOMBIE}


def _assert_clean():
    """No rank of the last launch is alive, and its rendezvous port can be bound again (launch has
    killed and joined the ranks; the store's port may close a moment later)."""
    assert LAST_RUN["pids"], "launch recorded no processes"
    deadline = time.monotonic() + 60
    while (leftovers()["alive"] or not leftovers()["port_free"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = leftovers()
    assert left["alive"] == [] and left["port_free"], left


@pytest.fixture
def clean():
    """Whatever the test does, the launch it made leaves nothing behind (checked even on failure):
    no rank alive, the port free, no new child process of ours (psutil)."""
    LAST_RUN.clear()
    before = children()
    try:
        yield
    finally:
        if LAST_RUN.get("pids"):
            _assert_clean()
        deadline = time.monotonic() + 60
        while children() - before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert children() - before == set()


def test_results_in_rank_order_with_progress_printed(clean, capsys):
    out = launch(basics.hello, 2, world_size=2, timeout_s=HANG_S)
    assert [o["rank"] for o in out] == [0, 1]
    assert all(o["sum"] == 3.0 and o["world_size"] == 2 and o["backend"] == "gloo" for o in out)
    assert len({o["pid"] for o in out} | {os.getpid()}) == 3            # two new processes
    lines = capsys.readouterr().out.splitlines()
    for r in (0, 1):
        assert [ln for ln in lines if ln.startswith(f"[rank {r}]")] == [f"[rank {r}] step 1/2", f"[rank {r}] step 2/2"]


def test_a_failing_rank_is_named_with_its_traceback(clean):
    with pytest.raises(RuntimeError) as e:
        launch(basics.fail_on, 1, world_size=2, timeout_s=HANG_S, progress=False)
    msg = str(e.value)
    assert msg.startswith("rank 1 failed: ValueError: rank 1 was told to fail"), msg
    assert "--- traceback of rank 1 ---" in msg and "basics.py" in msg


def test_a_rank_that_dies_silently(clean):
    with pytest.raises(RuntimeError, match="rank 0 exited with code 3 without a result"):
        launch(basics.exit_on, 0, world_size=1, timeout_s=HANG_S, progress=False)


def test_timeout_kills_every_rank(clean):
    """The TimeoutError comes at timeout_s, whether the ranks have started yet or not, and ends them."""
    t = time.monotonic()
    with pytest.raises(TimeoutError, match=r"ranks \[0, 1\] did not finish within timeout_s=3"):
        launch(basics.hang, world_size=2, timeout_s=3, progress=False)
    assert time.monotonic() - t < HANG_S


def _living(pids) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_timeout_kills_what_the_ranks_started(clean):
    """Each rank starts a `sleep` of its own and reports its pid, then hangs: the timeout kills both
    generations. The timeout has to come after both reports; two ranks report within seconds on an
    idle machine and may take much longer on a busy one, so a run whose timeout came first is
    repeated with a timeout four times as long (15, 60, 240 s), each run checked clean."""
    for timeout_s in (15, 60, 240):
        lines = []
        with pytest.raises(TimeoutError, match=rf"ranks \[0, 1\] did not finish within timeout_s={timeout_s}"):
            launch(basics.hang, 3600, True, world_size=2, timeout_s=timeout_s,
                   progress=lambda r, m: lines.append(m))
        _assert_clean()
        grandchildren = [int(m.split()[1]) for m in lines if m.startswith("child ")]
        if len(grandchildren) == 2:
            break
    assert len(grandchildren) == 2, lines                # each rank started a `sleep` before hanging
    deadline = time.monotonic() + 60                     # SIGKILLed with their rank's process group
    while _living(grandchildren) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _living(grandchildren)


@pytest.fixture
def ctrl_c():
    """``ctrl_c()`` does what Ctrl-C in a terminal does: a SIGINT that raises KeyboardInterrupt in the
    main thread. Python raises it only through its own SIGINT handler, which it installs only if
    SIGINT was not ignored when it started -- and a test run started in the background of a
    non-interactive shell (``make test &``, some CI runners) inherits SIGINT ignored, so the signal
    would be dropped. The fixture installs Python's handler for the test and restores the old one."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield lambda: os.kill(os.getpid(), signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, old)


def test_ctrl_c_while_the_ranks_start_kills_every_rank(clean, ctrl_c):
    """Ctrl-C as soon as both rank processes exist (they are still importing torch, or joining the
    group): a watcher thread waits for launch to record both pids, then sends the SIGINT."""
    stop = threading.Event()

    def interrupt_once_both_started():
        deadline = time.monotonic() + HANG_S
        while len(LAST_RUN.get("pids", ())) < 2 and not stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not stop.is_set():
            ctrl_c()

    watcher = threading.Thread(target=interrupt_once_both_started, daemon=True)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            launch(basics.hang, world_size=2, timeout_s=HANG_S, progress=False)
    finally:
        stop.set()
        watcher.join()
    assert len(LAST_RUN["pids"]) == 2


def test_ctrl_c_while_the_ranks_run_kills_every_rank(clean, ctrl_c):
    """Ctrl-C once both ranks have said they are sleeping (the event is their progress line)."""
    said = set()

    def on_progress(rank, message):
        said.add(rank)
        if said == {0, 1}:
            ctrl_c()

    with pytest.raises(KeyboardInterrupt):
        launch(basics.hang, world_size=2, timeout_s=HANG_S, progress=on_progress)
    assert said == {0, 1} and len(LAST_RUN["pids"]) == 2


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(world_size=0), ValueError, "world_size must be an int in 1..64"),
    (dict(world_size=2.0), TypeError, "world_size must be an int"),
    (dict(world_size=True), TypeError, "world_size must be an int"),
    (dict(backend="mpi"), ValueError, "backend must be one of 'gloo', 'nccl'"),
    (dict(backend=None), TypeError, "backend must be one of"),
    (dict(timeout_s=0), ValueError, r"timeout_s \(seconds\) must be > 0"),
    (dict(timeout_s=float("inf")), ValueError, "must be a finite number"),
    (dict(timeout_s="10"), TypeError, r"timeout_s \(seconds\) must be a number"),
    (dict(progress="yes"), TypeError, "progress must be True, False or a callable"),
])
def test_bad_arguments(kwargs, exc, match):
    LAST_RUN.clear()
    with pytest.raises(exc, match=match):
        launch(basics.hello, **kwargs)
    assert not LAST_RUN                  # refused before anything started


def test_what_is_not_a_function_is_refused_before_anything_starts():
    LAST_RUN.clear()
    with pytest.raises(TypeError, match="fn must be a Python function"):
        launch(print)
    with pytest.raises(TypeError, match="fn must be a Python function"):
        launch(basics)
    assert not LAST_RUN


def test_a_closure_and_a_lambda_run_by_value(clean):
    offset = 10

    def closure(rank, world_size):
        return rank + offset
    assert launch(closure, world_size=2, timeout_s=HANG_S, progress=False) == [10, 11]
    assert launch(lambda rank, world_size, k: rank * k, 3, world_size=2, timeout_s=HANG_S, progress=False) == [0, 3]


def test_nccl_needs_a_gpu_per_rank():
    import torch
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs")
    with pytest.raises(ValueError, match="needs one GPU per rank"):
        launch(basics.hello, world_size=2, backend="nccl")


def test_backend_choice_is_said():
    b = pick_backend(2)
    assert b in ("gloo", "nccl")
    assert backend_sentence(b, 2).startswith(f"2 ranks on {'NCCL' if b == 'nccl' else 'gloo'}")
    with pytest.raises(ValueError):
        backend_sentence("mpi")


def test_leftovers_sees_a_living_process_and_a_held_port():
    import subprocess
    import sys
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        left = leftovers({"pids": [child.pid], "port": holder.getsockname()[1]})
        assert left["alive"] == [child.pid] and not left["port_free"]
    finally:
        child.kill()
        child.wait()
        holder.close()
    assert _pid_gone(child.pid)


def _pid_gone(pid):
    from amp_edu.distributed.launch import _pid_alive
    return not _pid_alive(pid)
