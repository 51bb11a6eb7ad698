import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Library tests run at smoke sizes, like the notebooks.
os.environ.setdefault("AMP_EDU_SMOKE", "1")


@pytest.fixture
def root() -> Path:
    return ROOT
