"""`make lab` serves the course: JupyterLab answers on localhost, as root and with no browser."""

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(sys.platform == "win32", reason="make lab is a POSIX Makefile target")
def test_make_lab_serves_the_lessons():
    port, token = _free_port(), secrets.token_hex(8)
    venv = Path(sys.prefix)  # the venv running the tests (make test's .venv)
    env = dict(os.environ, JUPYTER_PORT=str(port), JUPYTER_TOKEN=token, BROWSER="",
               DISPLAY="")  # no browser, like a container
    proc = subprocess.Popen(["make", "-s", "lab", f"VENV={venv}" if (venv / ".installed").exists() else "VENV=.venv"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True)
    url = f"http://127.0.0.1:{port}/api/contents/notebooks?token={token}"
    try:
        deadline, body = time.time() + 90, None
        while time.time() < deadline and proc.poll() is None:
            try:
                body = urllib.request.urlopen(url, timeout=2).read().decode()
                break
            except OSError:
                time.sleep(0.5)
        assert body is not None, f"JupyterLab did not answer on port {port}; make lab exited {proc.poll()}"
        assert "00_setup.ipynb" in body
        # the token is enforced: without it the API refuses
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/notebooks", timeout=5)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    # As root, JupyterLab only starts with --allow-root: that it answered above proves the flag.
