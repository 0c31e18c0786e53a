"""Real SGLang releases installed with pip (`--no-deps --target`), wheels cached between runs.

The cache folder is $DDTREE_PATCH_WHEEL_CACHE (default ~/.cache/ddtree-patch/wheels). A wheel
missing from it is fetched once with `pip download --no-deps` for this interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ddtree_patch.model import Install

RELEASES = ("0.5.11", "0.5.12", "0.5.15", "0.5.23")


def wheel_cache() -> Path:
    default = Path.home() / ".cache" / "ddtree-patch" / "wheels"
    return Path(os.environ.get("DDTREE_PATCH_WHEEL_CACHE", default)).expanduser()


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
    )


def install_release(version: str, target: Path) -> Install:
    """`pip install --no-deps --target target sglang==version`, from the cache when possible."""
    cache = wheel_cache()
    cache.mkdir(parents=True, exist_ok=True)
    spec = f"sglang=={version}"
    local = (
        "install",
        "--no-deps",
        "--no-index",
        "--find-links",
        str(cache),
        "--target",
        str(target),
        spec,
    )
    done = _pip(*local)
    if done.returncode != 0:
        fetched = _pip("download", "--no-deps", "--dest", str(cache), spec)
        if fetched.returncode != 0:
            raise RuntimeError(f"cannot download {spec}: {fetched.stderr.strip()[-500:]}")
        shutil.rmtree(target, ignore_errors=True)
        done = _pip(*local)
        if done.returncode != 0:
            raise RuntimeError(f"cannot install {spec}: {done.stderr.strip()[-500:]}")
    return install_at(target)


def install_at(site_packages: Path) -> Install:
    """The Install of an sglang that pip put into `site_packages` (version from METADATA)."""
    (dist_info,) = site_packages.glob("sglang-*.dist-info")
    version = next(
        line.split(":", 1)[1].strip()
        for line in (dist_info / "METADATA").read_text().splitlines()
        if line.startswith("Version:")
    )
    return Install(site_packages, site_packages / "sglang", dist_info, version)


_installed: dict[str, Install] = {}


@pytest.fixture(scope="session")
def sglang_release(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Install]:
    """`get(version)`: a pristine install of that release, made once per session.

    Shared by every test: treat it as read-only and copy it before changing anything.
    """
    root = tmp_path_factory.getbasetemp() / "sglang-releases"

    def get(version: str) -> Install:
        if version not in _installed:
            _installed[version] = install_release(version, root / version)
        return _installed[version]

    return get
