import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT.parent / "shared" / "fixtures" / "reference"


def fixtures_or_skip() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"reference fixtures not found at {FIXTURES} (../shared/fixtures is absent)")
    return FIXTURES


@pytest.fixture
def fixtures() -> Path:
    return fixtures_or_skip()


def pytest_collection_finish(session):
    """Start the other venvs' sub-suites now, so that they run beside this session (tests/background.py)."""
    if session.config.option.collectonly:
        return
    import background

    background.start_selected(session.items)


def pytest_sessionfinish(session, exitstatus):
    import background

    background.stop_all()
