"""status: pristine / patched / drifted / stale / interrupted, from the files on disk."""

from __future__ import annotations

import errno
import shutil

import pytest
from filelock import FileLock

from ddtree_patch import fsio
from ddtree_patch.errors import WriteFailed
from ddtree_patch.state import StatePaths
from ddtree_patch.status import status
from ddtree_patch.transaction import Recovery, apply_plan, recover
from tests.tiny_install import make_tiny_install
from tests.txn_helpers import FaultAt, handmade_plan


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
    # As `pip install --force-reinstall`: remove what RECORD lists, lay the wheel down again.
    shutil.rmtree(install.package_dir)
    shutil.copytree(pristine.package_dir, install.package_dir)
    shutil.copy2(pristine.record, install.record)
    st = status(install)
    assert st.state == "stale" and "ddtree-patch apply" in st.advice


def test_crash_is_interrupted_and_a_running_transaction_is_busy(install):
    def broken_disk(op, path):
        raise OSError(errno.EIO, "injected", str(path))  # the rollback fails too: journal kept

    fsio.fault_hook = FaultAt(5, broken_disk, persistent=True)
    try:
        with pytest.raises(WriteFailed, match="journal is kept"):
            apply_plan(handmade_plan(install), "1.0")
    finally:
        fsio.fault_hook = None
    st = status(install)
    assert (st.state, st.journal_op, st.busy) == ("interrupted", "apply", False)
    assert "ddtree-patch apply" in st.advice
    with FileLock(StatePaths(install).lock):
        st = status(install)
        assert st.busy and "wait" in st.advice
    assert recover(install) == Recovery("apply", "rolled back")
    assert status(install).state == "pristine" and recover(install) is None
