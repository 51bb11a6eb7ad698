"""`make lab` serves the course: JupyterLab answers on localhost, as root and with no browser."""

import sys
import urllib.error
import urllib.request

import pytest

pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="make lab is a POSIX Makefile target")]


def test_make_lab_serves_the_lessons(lab):
    base, token = lab          # the session's one server, started as the README says (conftest.py)
    body = urllib.request.urlopen(f"{base}/api/contents/notebooks?token={token}", timeout=10).read().decode()
    assert "00_setup.ipynb" in body
    # the token is enforced: without it the API refuses
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(f"{base}/api/contents/notebooks", timeout=5)
    # As root, JupyterLab only starts with --allow-root: that it answered above proves the flag.
