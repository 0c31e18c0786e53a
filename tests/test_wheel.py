"""The tool as users install it: sdist and wheel built from the tree, the wheel in a fresh venv.

Editable installs read modules from the checkout, so a module the packaging leaves out goes
unnoticed there (the wheel once lacked `ddtree_patch.transaction` and `apply` crashed). Here the
wheel's contents are checked against the checkout, and the installed `ddtree-patch` command
patches and reverts real releases byte for byte, leaving nothing behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from ddtree_patch.data.releases import WITH_DFLASH
from tests.sglang_releases import install_release
from tests.txn_helpers import snapshot

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
# Where each folder of the checkout lands in the wheel: patches/ and kernels/ ship inside the package.
WHEEL_HOME = {"ddtree_patch": "ddtree_patch", "patches": "ddtree_patch/patches", "kernels": "ddtree_patch/kernels"}
NOT_SHIPPED = ("tests/", "docs/", "fixtures/", "scripts/")
# Every release with DFLASH (a round trip costs seconds); DDTREE_PATCH_RELEASES narrows it.
RELEASES = tuple(v for v in os.environ.get("DDTREE_PATCH_RELEASES", ",".join(WITH_DFLASH)).split(",") if v)


def _checkout_files() -> list[str]:
    """What a commit of the working tree holds: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout.decode().split("\0")
    return [name for name in listed if name and (REPO / name).is_file()]


def _expected_modules() -> set[str]:
    modules = set()
    for name in _checkout_files():
        path = PurePosixPath(name)
        if path.suffix == ".py" and path.parts[0] in WHEEL_HOME:
            modules.add(str(PurePosixPath(WHEEL_HOME[path.parts[0]], *path.parts[1:])))
    return modules


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, Path]:
    """sdist and wheel built by `python -m build` from a copy of the checkout (the wheel from the sdist)."""
    source = tmp_path_factory.mktemp("source")
    for name in _checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes((REPO / name).read_bytes())
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], check=True, capture_output=True)
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


@pytest.fixture(scope="module")
def tool(dists, tmp_path_factory) -> Path:
    """The `ddtree-patch` command of a fresh venv holding the wheel (not editable)."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(dists["wheel"])],
                   check=True)
    return env_dir / "bin" / "ddtree-patch"


def test_the_wheel_holds_every_module_and_nothing_else(dists):
    names = set(zipfile.ZipFile(dists["wheel"]).namelist())
    shipped = {n for n in names if ".dist-info/" not in n}
    assert shipped == _expected_modules()
    assert not [n for n in names if n.startswith(NOT_SHIPPED)]


def test_the_sdist_rebuilds_the_same_package(dists):
    with tarfile.open(dists["sdist"]) as sdist:
        names = {PurePosixPath(*PurePosixPath(m.name).parts[1:]).as_posix() for m in sdist.getmembers() if m.isfile()}
    assert {"pyproject.toml", "setup.py"} <= names
    expected = {n for n in _checkout_files() if n.endswith(".py") and n.split("/")[0] in WHEEL_HOME}
    assert expected <= names


def _run(tool: Path, *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    done = subprocess.run([str(tool), *args], capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode in ok, (args, done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_the_installed_command_reports_its_version(tool):
    assert _run(tool, "--version").stdout.split() == ["ddtree-patch", "0.1.0"]


@pytest.mark.parametrize("version", RELEASES)
def test_the_installed_wheel_round_trips_a_release_byte_for_byte(tool, tmp_path, version):
    site = install_release(version, tmp_path / "site")
    pristine = snapshot(site)
    target = ("--target", str(site))

    preview = json.loads(_run(tool, "audit", *target, "--json").stdout)
    _run(tool, "apply", *target)
    assert json.loads(_run(tool, "status", *target, "--json").stdout)["state"] == "patched"
    proof = json.loads(_run(tool, "audit", *target, "--json").stdout)
    assert proof["ok"] and preview["ok"]
    _run(tool, "revert", *target)

    assert snapshot(site) == pristine
    assert not (site / ".ddtree-patch").exists()
