"""The test tiers are decided in one place: ``COURSE_TIER`` in tests/tiers.py.

A ``pytest.mark.slow`` written in a test file would be a second place (and one a reader of the
table does not see); an entry of the table that no longer selects a test (renamed, moved) would
silently let that test fall into the fast tier."""

import re
from pathlib import Path

from tiers import COURSE_TIER, UNMATCHED_TIERS

TESTS = Path(__file__).resolve().parent


def test_no_test_file_marks_its_own_tier():
    marked = [f"{p.relative_to(TESTS)}:{n}: {line.strip()}" for p in sorted(TESTS.rglob("*.py")) if p.name not in ("conftest.py", "tiers.py")
              for n, line in enumerate(p.read_text().splitlines(), 1)
              if re.search(r"mark\.slow\b", line) and p.name != Path(__file__).name]
    assert not marked, "the tier is decided in tests/tiers.py (COURSE_TIER), not in the file:\n" + "\n".join(marked)


def test_every_entry_of_the_table_selects_a_collected_test(request):
    """Checked for the files this run collected (all of them in ``make test``)."""
    assert request.config.stash[UNMATCHED_TIERS] == [], "entries of COURSE_TIER that select no test"


def test_every_entry_says_why_and_names_an_existing_file():
    for tier in COURSE_TIER:
        assert tier.why, tier
        assert tier.file.startswith("*") or (TESTS.parent / tier.file).exists(), tier
