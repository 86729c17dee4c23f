import shutil
import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "utils"))

from forktool.common import fetch_sdist, read_upstream  # noqa: E402


@pytest.fixture(scope="session")
def sdist() -> Path:
    """The verified pinned sdist (fetched once into the user cache, as `make fork` does)."""
    return fetch_sdist(read_upstream(REPO))


@pytest.fixture
def fork_root(tmp_path, sdist) -> Path:
    """A scratch copy of the fork's tracked inputs (UPSTREAM, an empty series, pyproject.toml) to run the tools on."""
    root = tmp_path / "repo"
    (root / "patches").mkdir(parents=True)
    shutil.copy(REPO / "patches" / "UPSTREAM", root / "patches" / "UPSTREAM")
    (root / "patches" / "series").write_text("", encoding="utf-8")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root
