"""One JupyterLab server for the tests that need one (``test_lab``, ``test_browser``).

``make lab`` is started the way the README runs it (``JUPYTER_PORT``/``JUPYTER_TOKEN``, no browser),
with isolated config/runtime/settings folders and smoke sizes, once per test session (the
``lab`` fixture in ``conftest.py``). The server refuses every save, so the stored lessons are never
overwritten. :func:`stop` shuts its process group down and kills any kernel that outlived it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120          # make lab answering

# Refuse every save: the lessons are stored executed at full size and must not be overwritten.
_NO_SAVE = '''from tornado.web import HTTPError


def refuse(model, path, contents_manager, **kwargs):
    raise HTTPError(403, f"the test server: saving {path} is disabled")
'''
_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},   # every cell in the DOM
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kernels_of(runtime_dir: Path) -> list:
    import psutil
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(str(runtime_dir) in part for part in (p.info["cmdline"] or [])):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def stop(proc: subprocess.Popen, runtime_dir: Path) -> list[int]:
    """SIGTERM the server's process group (it shuts its kernels down), then SIGKILL what is left;
    returns the pids of kernels that outlived the server (killed here)."""
    def group_alive() -> bool:
        try:
            os.killpg(proc.pid, 0)
            return True
        except ProcessLookupError:
            return False
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        if group_alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        deadline = time.monotonic() + wait_s
        while group_alive() and time.monotonic() < deadline:
            proc.poll()                        # reap make, so its group can empty
            time.sleep(0.2)
    proc.wait(timeout=10)
    orphans = kernels_of(runtime_dir)
    for p in orphans:
        p.kill()
    return [p.pid for p in orphans]


@contextlib.contextmanager
def serve(tmp: Path):
    """Run ``make lab`` in the folder ``tmp`` (config, runtime, settings, log); yields
    ``(base_url, token)``; raises ``RuntimeError`` with the log's tail if it does not answer."""
    (tmp / "hooks").mkdir()
    (tmp / "hooks" / "_test_lab_no_save.py").write_text(_NO_SAVE)
    settings = tmp / "settings"
    for plugin, values in _SETTINGS.items():
        path = settings / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    runtime = tmp / "runtime"
    port, token = free_port(), secrets.token_hex(16)
    venv = Path(sys.prefix)
    env = dict(os.environ, JUPYTER_PORT=str(port), JUPYTER_TOKEN=token, AMP_EDU_SMOKE="1", BROWSER="",
               DISPLAY="", JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_RUNTIME_DIR=str(runtime),
               # the hook for the server; this checkout's amp_edu first for the kernels
               PYTHONPATH=os.pathsep.join([str(tmp / "hooks"), str(ROOT)]
                                          + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    lab_args = " ".join([
        "--no-browser", "--LabApp.expose_app_in_browser=True",
        f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
        "--FileContentsManager.pre_save_hook=_test_lab_no_save.refuse",
        "--ServerApp.ip=127.0.0.1"])
    stamp = venv / ".installed"
    cmd = ["make", "-s", f"VENV={venv}", f"LAB_ARGS={lab_args}", "lab"]
    if stamp.exists():
        cmd[2:2] = ["-o", str(stamp)]          # serve; never reinstall from inside a test
    log_path = tmp / "lab.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2).read()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"make lab did not answer within {START_TIMEOUT_S} s "
                                           f"(exit {proc.poll()}):\n" + log_path.read_text()[-3000:])
                    time.sleep(0.5)
            yield base, token
        finally:
            orphans = stop(proc, runtime)
        if orphans:
            raise AssertionError(f"kernels outlived the server (killed): {orphans}")
