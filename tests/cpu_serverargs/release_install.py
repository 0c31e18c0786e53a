"""Real SGLang releases installed alone with `pip install --no-deps --target`, wheels cached.

Kept small so it can be swapped for the shared `tests/sglang_releases.py` (same cache folder,
same `install_release(version, target)` shape). The cache is $DDTREE_PATCH_WHEEL_CACHE
(default ~/.cache/ddtree-patch/wheels); a missing wheel is fetched once with `pip download`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def wheel_cache() -> Path:
    default = Path.home() / ".cache" / "ddtree-patch" / "wheels"
    return Path(os.environ.get("DDTREE_PATCH_WHEEL_CACHE", default)).expanduser()


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
    )


def install_release(version: str, target: Path) -> Path:
    """Install `sglang==version` without dependencies into `target`; return `target`."""
    cache = wheel_cache()
    cache.mkdir(parents=True, exist_ok=True)
    spec = f"sglang=={version}"
    from_cache = ("install", "--no-deps", "--no-compile", "--no-index", "--find-links", str(cache), "--target", str(target), spec)
    if _pip(*from_cache).returncode != 0:
        fetched = _pip("download", "--no-deps", "--dest", str(cache), spec)
        if fetched.returncode != 0:
            raise RuntimeError(f"cannot download {spec}: {fetched.stderr.strip()[-800:]}")
        done = _pip(*from_cache)
        if done.returncode != 0:
            raise RuntimeError(f"cannot install {spec}: {done.stderr.strip()[-800:]}")
    return target


def release_metadata(target: Path, version: str) -> str:
    """The METADATA text of the sglang release that `install_release` put into `target`."""
    return (target / f"sglang-{version}.dist-info" / "METADATA").read_text(encoding="utf-8")
