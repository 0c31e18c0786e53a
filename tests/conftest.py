from __future__ import annotations

import os
from pathlib import Path

# Triton kernels run interpreted on CPU tensors where there is no GPU. This must be set before
# any test module imports `kernels` (the decorators read it), so it lives here, not in a helper.
if "TRITON_INTERPRET" not in os.environ and not Path("/dev/nvidia0").exists():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest

from tests.sglang_releases import install_release


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A heavy test (minutes of SGLang code or interpreted kernels) is slow too, so the fast subset
    a developer runs after every change is `-m "not slow"`."""
    for item in items:
        if item.get_closest_marker("heavy"):
            item.add_marker(pytest.mark.slow)


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


@pytest.fixture(scope="module")
def dropin(tmp_path_factory):
    """dropin(name) -> the module `sglang.srt.speculative.ddtree.<name>` imported in-process from
    the stub SGLang (tests/round_harness/stubs.py); the stub leaves sys.modules afterwards."""
    import importlib

    from tests.round_harness.stubs import make_stub_site, sglang_from

    with sglang_from(make_stub_site(tmp_path_factory.mktemp("stub_sglang"))):
        yield lambda name: importlib.import_module(f"sglang.srt.speculative.ddtree.{name}")
