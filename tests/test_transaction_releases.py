"""Real SGLang releases (pip --no-deps --target): exact round trip, RECORD valid, crash-safe.

Until the engine's plan is wired in, a hand-made plan edits three real files and adds two.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from ddtree_patch import fsio
from ddtree_patch.locate import from_folder
from ddtree_patch.plan import build_plan
from ddtree_patch.record import verify_record
from ddtree_patch.status import status
from ddtree_patch.transaction import apply_plan, revert
from tests.sglang_releases import RELEASES, release_wheel
from tests.txn_helpers import (
    RELEASE_EDITS,
    FaultAt,
    Recorder,
    copy_install,
    handmade_plan,
    scratch_dir,
    snapshot,
)

pytestmark = pytest.mark.slow



def _distlib_problems(install):
    database = pytest.importorskip("pip._vendor.distlib.database")
    dist = database.InstalledDistribution(str(install.dist_info))
    return sorted(
        (os.path.relpath(p, install.site_packages), kind)
        for p, kind, _, _ in dist.check_installed_files()
    )


def _record_problems(install):
    return sorted((p.path, p.kind) for p in verify_record(install.record))


@pytest.fixture
def scratch(tmp_path):
    with scratch_dir(tmp_path) as root:
        yield root


@pytest.mark.parametrize("planner", ["engine", "handmade"])
@pytest.mark.parametrize("version", RELEASES)
def test_apply_revert_round_trip_is_byte_identical(release_site, scratch, version, planner):
    install = copy_install(from_folder(release_site(version)), scratch / "site")
    pristine = snapshot(install.site_packages, with_state=True)
    ours, pips = _record_problems(install), _distlib_problems(install)
    # pip --target records its console scripts as ../../bin/*: broken before we touch anything.
    assert all(path.startswith("../") for path, _ in ours), ours

    plan = build_plan(install) if planner == "engine" else handmade_plan(install, RELEASE_EDITS)
    assert plan.edits and plan.added
    assert apply_plan(plan, "1.0").action == "applied"
    assert status(install, plan, tool_version="1.0").plan_current
    assert _record_problems(install) == ours and _distlib_problems(install) == pips
    record = install.record.read_text()
    assert all(f"sglang/{a.path}," in record for a in plan.added)

    assert revert(install).action == "reverted"
    assert snapshot(install.site_packages, with_state=True) == pristine  # nothing of ours is left
    assert _record_problems(install) == ours and _distlib_problems(install) == pips


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_kill_at_every_step_on_a_real_release(release_site, scratch, op):
    install = copy_install(from_folder(release_site(RELEASES[-1])), scratch / "site")
    pristine = snapshot(install.site_packages)

    def do(name):
        if name == "apply":
            return apply_plan(handmade_plan(install, RELEASE_EDITS), "1.0")
        return revert(install)

    do("apply")
    patched = snapshot(install.site_packages)
    if op == "apply":
        do("revert")
    recorder = Recorder()
    fsio.fault_hook = recorder
    try:
        do(op)
    finally:
        fsio.fault_hook = None
    do("revert" if op == "apply" else "apply")  # back to the start
    for n in range(len(recorder.events)):
        pid = os.fork()
        if pid == 0:
            fsio.fault_hook = FaultAt(n, lambda o, p: os._exit(137))
            try:
                do(op)
            finally:
                os._exit(1)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 137
        next_op = ("apply", "revert")[n % 2]
        result = do(next_op)
        expect = patched if next_op == "apply" else pristine
        assert snapshot(install.site_packages) == expect, f"{op} killed at step {n}, then {next_op}"
        assert result.recovered is not None or status(install).state in ("pristine", "patched")
        now = "patched" if next_op == "apply" else "pristine"
        if now != ("pristine" if op == "apply" else "patched"):  # back to where `op` starts
            do("revert" if now == "patched" else "apply")


def test_pip_uninstall_after_apply_leaves_nothing(tmp_path):
    env = tmp_path / "venv"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python)]
    done = subprocess.run(
        [*pip, "install", "--no-deps", "--no-compile", str(release_wheel("0.5.15"))],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    install = from_folder(site)
    apply_plan(handmade_plan(install, RELEASE_EDITS), "1.0")
    done = subprocess.run([*pip, "uninstall", "-y", "sglang"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    left = sorted(p.relative_to(site).as_posix() for p in site.rglob("*"))
    assert not [p for p in left if p.startswith(("sglang", ".ddtree-patch"))], left[:20]


def _cli(*args: str) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parent.parent
    return subprocess.run(
        [sys.executable, "-m", "ddtree_patch", *args],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    "layout, new", [("venv", "0.5.16"), ("venv", "0.5.23"), ("target", "0.5.16")]
)
def test_pip_upgrade_after_apply_is_stale_then_the_new_release_patches(tmp_path, layout, new):
    """`pip install -U sglang` over a patched 0.5.15: in a venv pip's uninstall of the old release
    removes the state with it (RECORD lists it), so status says pristine; `--target --upgrade`
    replaces folders and leaves the state, so status says stale (naming both releases). Either
    way apply patches the new one, and revert gives back the new release byte for byte."""
    wheels = [release_wheel(v) for v in ("0.5.15", new)]
    find = ["--no-deps", "--no-index", "--find-links", str(wheels[0].parent)]
    if layout == "venv":
        env = tmp_path / "venv"
        venv.create(env, with_pip=False)
        python = env / "bin" / "python"
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python)]
        site = Path(subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip())
        where = ["--python", str(python)]
        install_cmd, upgrade_cmd = [*pip, "install", *find], [*pip, "install", "-U", *find]
    else:
        site = tmp_path / "site"
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
        where = ["--target", str(site)]
        install_cmd = [*pip, "install", "--target", str(site), *find]
        upgrade_cmd = [*pip, "install", "--target", str(site), "--upgrade", *find]
    done = subprocess.run([*install_cmd, "sglang==0.5.15"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    done = _cli("apply", *where)
    assert done.returncode == 0, done.stderr

    done = subprocess.run([*upgrade_cmd, f"sglang=={new}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    upgraded = snapshot(site)

    done = _cli("status", *where, "--json")
    st = json.loads(done.stdout)
    if layout == "venv":
        assert done.returncode == 0 and st["state"] == "pristine", done.stdout + done.stderr
        assert not (site / ".ddtree-patch").exists()
    else:
        assert done.returncode == 1, done.stderr  # stale: a state that needs a command (JSON contract)
        assert (st["state"], st["patched_version"], st["sglang"]["version"]) == ("stale", "0.5.15", new)
        assert f"0.5.15 was patched, {new} is installed now" in st["advice"]

    done = _cli("apply", *where, "--json")
    assert done.returncode == 0, done.stderr
    applied = json.loads(done.stdout)
    assert (applied["action"], applied["sglang"]["version"], applied["discarded_stale"]) == (
        "applied", new, layout == "target"
    )
    install = from_folder(site)
    assert install.version == new and status(install).state == "patched"
    assert all(path.startswith("../") for path, _ in _record_problems(install))  # --target bin/

    done = _cli("revert", *where)
    assert done.returncode == 0, done.stderr
    assert snapshot(site) == upgraded
