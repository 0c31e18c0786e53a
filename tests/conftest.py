from __future__ import annotations

from pathlib import Path

import pytest

from tests.sglang_releases import install_release


@pytest.fixture(scope="session")
def release_site(tmp_path_factory):
    """install(version) -> a pristine site folder shared by the session's tests (do not modify)."""
    sites: dict[str, Path] = {}

    def install(version: str) -> Path:
        if version not in sites:
            sites[version] = install_release(version, tmp_path_factory.mktemp(f"sglang-{version}") / "site")
        return sites[version]

    return install


@pytest.fixture
def fresh_release(tmp_path):
    """install(version) -> a private site folder the test may modify."""
    return lambda version: install_release(version, tmp_path / f"site-{version}")
