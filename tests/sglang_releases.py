"""Install real SGLang releases from the package index, with the wheels cached between runs.

`pip install --no-deps --target` gives exactly the files (and dist-info RECORD) a user has;
the wheel cache (DDTREE_PATCH_WHEEL_CACHE, default ~/.cache/ddtree-patch/wheels) makes a second
run offline and fast.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from filelock import FileLock

from ddtree_patch.data.releases import TESTED

# The releases the slow tests install; DDTREE_PATCH_RELEASES (comma-separated) replaces them,
# e.g. with every release from 0.5.11 on.
RELEASES = tuple(v for v in os.environ.get("DDTREE_PATCH_RELEASES", ",".join(TESTED)).split(",") if v)


def wheel_cache() -> Path:
    path = Path(os.environ.get("DDTREE_PATCH_WHEEL_CACHE", Path.home() / ".cache" / "ddtree-patch" / "wheels"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def release_wheel(version: str) -> Path:
    """The cached wheel of one release, downloaded once (a failure to get it fails the test)."""
    cache = wheel_cache()
    pattern = f"sglang-{version}-*.whl"
    with FileLock(str(cache / ".download.lock")):
        found = sorted(cache.glob(pattern))
        if not found:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--disable-pip-version-check", "-q", "-d", str(cache), f"sglang=={version}"],
                check=True,
            )
            found = sorted(cache.glob(pattern))
    if not found:
        raise RuntimeError(f"no wheel for sglang=={version} in {cache}")
    return found[-1]


def install_release(version: str, target: Path) -> Path:
    """A fresh `pip install --no-deps --target` of one release; returns the site folder."""
    if target.exists():
        shutil.rmtree(target)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--disable-pip-version-check",
         "-q", "--target", str(target), str(release_wheel(version))],
        check=True,
    )
    return target


def release_metadata(target: Path, version: str) -> str:
    """The METADATA text of the release `install_release` put into `target` (its pins)."""
    return (target / f"sglang-{version}.dist-info" / "METADATA").read_text(encoding="utf-8")


def patched_release(version: str, folder: Path) -> tuple[Path, Path]:
    """One release installed under `folder`, patched by `ddtree-patch apply`, and the python of its CPU
    venv (tests/cpu_serverargs) that runs SGLang's own code: (site, python)."""
    from tests.cpu_serverargs.venv_builder import ensure_venv

    site = install_release(version, folder / "site")
    python = ensure_venv(version, release_metadata(site, version))
    done = subprocess.run([sys.executable, "-m", "ddtree_patch", "apply", "--target", str(site)],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return site, python
