"""status: pristine / patched / drifted / stale / interrupted, from the files on disk."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from ddtree_patch.errors import WriteFailed
from ddtree_patch.state import StatePaths
from ddtree_patch.status import status
from ddtree_patch.transaction import Recovery, apply_plan, recover
from tests.sglang_releases import RELEASES
from tests.tiny_install import make_tiny_install
from tests.txn_helpers import failing_disk, handmade_plan, reinstall


@pytest.fixture
def install(tmp_path):
    return make_tiny_install(tmp_path / "site")


def test_pristine_then_patched(install):
    assert status(install).state == "pristine"
    plan = handmade_plan(install)
    apply_plan(plan, "1.0")
    st = status(install, plan, tool_version="1.0")
    assert (st.state, st.tool_version, st.patched_version, st.plan_current) == (
        "patched",
        "1.0",
        "0.5.99",
        True,
    )
    assert st.applied_at and st.advice == ""
    assert {f.state for f in st.files} == {"patched"}
    assert status(install, handmade_plan(install, marker="v2")).plan_current is False
    assert status(install, plan, tool_version="2.0").plan_current is False


def test_hand_edit_is_drifted(install):
    apply_plan(handmade_plan(install), "1.0")
    (install.package_dir / "version.py").write_text("hand edit\n")  # not ours: ignored
    target = install.package_dir / "srt" / "server_args.py"
    target.write_bytes(target.read_bytes() + b"# hand edit\n")
    st = status(install)
    assert st.state == "drifted" and "revert --force" in st.advice
    assert [f.path for f in st.files if f.state != "patched"] == ["sglang/srt/server_args.py"]


def test_reinstall_makes_it_stale(install, tmp_path):
    pristine = make_tiny_install(tmp_path / "fresh")
    apply_plan(handmade_plan(install), "1.0")
    reinstall(install, pristine)
    st = status(install)
    assert st.state == "stale" and "ddtree-patch apply" in st.advice


def test_crash_is_interrupted_and_a_running_transaction_is_busy(install):
    with failing_disk(5), pytest.raises(WriteFailed, match="journal is kept"):
        apply_plan(handmade_plan(install), "1.0")
    st = status(install)
    assert (st.state, st.journal_op, st.busy) == ("interrupted", "apply", False)
    assert "ddtree-patch apply" in st.advice
    with FileLock(StatePaths(install).lock):
        st = status(install)
        assert st.busy and "wait" in st.advice
    assert recover(install) == Recovery("apply", "rolled back")
    assert status(install).state == "pristine" and recover(install) is None


# Issue 47, 3: a state left without its manifest, or missing one backup, read as SGLang's own DDTREE.
MINI = Path(__file__).resolve().parent.parent / "fixtures" / "mini_site"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtree_patch", *args], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent,
                          env={**os.environ, "DDTREE_PATCH_CACHE": "off"}, timeout=600)


def _damage(site: Path, how: str) -> None:
    state = site / ".ddtree-patch" / "sglang"
    if how == "manifest moved away":
        (state / "manifest.json").rename(site / "manifest.json")
    else:  # the backup of the file that holds our DDTREE member
        (state / "original" / "sglang" / "srt" / "speculative" / "spec_info.py").unlink()


def _assert_damaged_not_native(site: Path, how: str) -> None:
    assert _cli("apply", "--target", str(site)).returncode == 0
    _damage(site, how)
    done = _cli("status", "--target", str(site))
    assert done.returncode == 1 and done.stdout.startswith("state: damaged"), done.stdout + done.stderr
    assert "--force-reinstall" in done.stdout and "DDTREE itself" not in done.stdout
    for verb in ("apply", "audit"):
        done = _cli(verb, "--target", str(site))
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 8 and len(lines) == 1, (verb, done.stdout, done.stderr)
        assert "--force-reinstall" in lines[0] and "ships DDTREE" not in lines[0] and "Traceback" not in lines[0]
        assert ("no manifest" if how == "manifest moved away" else "spec_info.py (missing") in lines[0]
    assert _cli("status", "--target", str(site), "--json").returncode == 1


@pytest.mark.parametrize("how", ["manifest moved away", "one backup missing"])
def test_a_damaged_state_is_damaged_not_native(tmp_path, how):
    _assert_damaged_not_native(Path(shutil.copytree(MINI, tmp_path / "site")), how)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["manifest moved away", "one backup missing"])
def test_a_damaged_state_of_a_real_release_is_damaged_not_native(fresh_release, how):
    _assert_damaged_not_native(fresh_release(RELEASES[-1]), how)


def test_a_hand_edit_of_the_file_holding_our_ddtree_is_drift_not_native(tmp_path):
    site = Path(shutil.copytree(MINI, tmp_path / "site"))
    assert _cli("apply", "--target", str(site)).returncode == 0
    spec_info = site / "sglang" / "srt" / "speculative" / "spec_info.py"
    spec_info.write_text(spec_info.read_text() + "# hand edit\n")
    assert _cli("status", "--target", str(site)).stdout.startswith("state: drifted")
    done = _cli("apply", "--target", str(site))
    assert done.returncode == 9 and "revert --force" in done.stderr and "ships DDTREE" not in done.stderr
