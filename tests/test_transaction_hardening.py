"""Upgrades, damaged state, planted links and odd files: never a lost byte, never a half patch.

Each test is a case of issue 13 that went wrong before (the comment says how).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock, Timeout

from ddtree_patch import fsio
from ddtree_patch.errors import (
    CorruptState,
    EngineError,
    Interrupted,
    NotInstalled,
    PlanMismatch,
    Unpatchable,
    WriteFailed,
)
from ddtree_patch.locate import from_folder
from ddtree_patch.plan import build_plan
from ddtree_patch.record import record_hash, verify_record
from ddtree_patch.render import result_lines
from ddtree_patch.state import StatePaths
from ddtree_patch.status import status
from ddtree_patch.transaction import apply, apply_plan, revert
from tests.tiny_install import make_tiny_install
from tests.txn_helpers import FaultAt, Recorder, failing_disk, handmade_plan, reinstall, snapshot

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def install(tmp_path):
    return make_tiny_install(tmp_path / "site")


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ddtree_patch", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DDTREE_PATCH_CACHE": "off"},
        capture_output=True,
        text=True,
        **kw,
    )


def _reinstall(install, version: str, tmp_path: Path, *, keep_old_dist_info: bool = False):
    """As `pip install -U sglang==version`: the old release's files and dist-info go (unless
    pip --target --upgrade leaves the old dist-info), the new ones are laid down."""
    fresh = make_tiny_install(tmp_path / f"wheel-{version}", version)
    version_py = fresh.package_dir / "version.py"  # a new release has its own version.py
    version_py.write_text(f'__version__ = "{version}"\n')
    rows = [r for r in csv.reader(io.StringIO(fresh.record.read_text())) if r]
    rows = [[p, record_hash(version_py.read_bytes()), str(version_py.stat().st_size)]
            if p == "sglang/version.py" else [p, h, s] for p, h, s in rows]
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    fresh.record.write_text(out.getvalue())
    shutil.rmtree(install.package_dir)
    if not keep_old_dist_info:
        shutil.rmtree(install.dist_info)
    shutil.copytree(fresh.package_dir, install.package_dir)
    shutil.copytree(fresh.dist_info, install.site_packages / fresh.dist_info.name)
    return from_folder(install.site_packages)


# 1. `pip install -U sglang` after apply: every command exited 8 ("outside the sglang package").
@pytest.mark.parametrize("keep_old_dist_info", [False, True], ids=["venv", "target-upgrade"])
def test_an_upgrade_makes_the_state_stale_and_apply_patches_the_new_release(
    install, tmp_path, keep_old_dist_info
):
    apply_plan(handmade_plan(install), "1.0")
    upgraded = _reinstall(install, "0.5.100", tmp_path, keep_old_dist_info=keep_old_dist_info)
    assert upgraded.version == "0.5.100"
    new_release = snapshot(install.site_packages)
    st = status(upgraded)
    assert (st.state, st.patched_version, st.sglang_version) == ("stale", "0.5.99", "0.5.100")
    assert "0.5.99 was patched, 0.5.100 is installed now" in st.advice
    result = apply_plan(handmade_plan(upgraded), "1.0")
    assert (result.action, result.discarded_stale, result.previous_sglang_version) == (
        "applied", True, "0.5.99"
    )
    assert status(upgraded).state == "patched" and verify_record(upgraded.record) == []
    assert revert(upgraded).action == "reverted"
    assert snapshot(install.site_packages) == new_release


def test_revert_after_an_upgrade_drops_the_stale_state_only(install, tmp_path):
    apply_plan(handmade_plan(install), "1.0")
    upgraded = _reinstall(install, "0.5.100", tmp_path)
    new_release = snapshot(install.site_packages)
    assert revert(upgraded).action == "discarded stale state"
    assert snapshot(install.site_packages) == new_release and not install.state_dir.exists()


def test_two_dist_infos_that_both_claim_the_package_are_still_refused(install, tmp_path):
    _reinstall(install, "0.5.100", tmp_path, keep_old_dist_info=True)
    shutil.copy2(install.site_packages / "sglang-0.5.100.dist-info" / "RECORD", install.record)
    with pytest.raises(NotInstalled, match="two SGLang dist-infos"):
        from_folder(install.site_packages)


# 2. A file that must be edited fails to parse: apply exited 0 with 4 of 5 edits.
def test_apply_refuses_when_an_edit_target_does_not_parse(install):
    spec_info = install.package_dir / "srt" / "speculative" / "spec_info.py"
    spec_info.write_bytes(spec_info.read_bytes() + b"\ndef broken(:\n")
    before = snapshot(install.site_packages)
    done = _cli("apply", "--target", str(install.site_packages))
    assert done.returncode == 13, done.stderr
    assert "cannot be parsed" in done.stderr and "spec_info.py" in done.stderr
    assert "Traceback" not in done.stderr
    assert snapshot(install.site_packages) == before and not install.state_dir.exists()


# 3. A symlinked edit target was skipped (apply exited 0 without the enum); a symlinked
# sglang/srt scanned a third of the files, then exit 5 "please report this bug".
@pytest.mark.parametrize("link", ["srt/speculative/spec_info.py", "srt"])
def test_a_symlinked_target_or_folder_is_one_clear_refusal(install, tmp_path, link):
    target = install.package_dir / link
    real = tmp_path / "real" / target.name
    real.parent.mkdir()
    shutil.move(target, real)
    target.symlink_to(real, target_is_directory=real.is_dir())
    before = snapshot(install.site_packages)
    with pytest.raises(Unpatchable, match=f"sglang/{link} is a symbolic link"):
        build_plan(install)
    for command in ("apply", "audit"):
        done = _cli(command, "--target", str(install.site_packages))
        assert done.returncode == 13, (command, done.stdout, done.stderr)
        assert "symbolic link" in done.stderr and "Traceback" not in done.stderr
    assert snapshot(install.site_packages) == before and not install.state_dir.exists()


# 4. The plan was built before the lock was taken, so a revert in between made half patches.
def test_apply_builds_its_plan_under_the_lock(install):
    seen = []

    def planner(locked_install):
        with pytest.raises(Timeout):  # another process (here: another descriptor) cannot lock
            FileLock(StatePaths(locked_install).lock, timeout=0).acquire()
        seen.append(True)
        return handmade_plan(locked_install)

    assert apply(install, planner, "1.0").action == "applied" and seen


def test_a_plan_from_before_a_revert_is_rechecked_under_the_lock(install):
    apply_plan(handmade_plan(install), "1.0")
    early = handmade_plan(install, marker="v2")  # built while patched, from the backups
    revert(install)
    (install.package_dir / "srt" / "server_args.py").write_text("changed meanwhile\n")
    with pytest.raises(PlanMismatch) as err:
        apply_plan(early, "1.0")
    assert err.value.exit_code == 11 and status(install).state == "pristine"


# Issue 47, 6: apply_plan took a plan built while patched after a concurrent revert, re-patching.
def test_a_plan_built_before_a_concurrent_revert_is_refused(install):
    apply_plan(handmade_plan(install), "1.0")
    early = handmade_plan(install)  # built while patched, for the patched install
    revert(install)
    pristine = snapshot(install.site_packages, with_state=True)
    with pytest.raises(PlanMismatch, match="changed since the plan was built") as err:
        apply_plan(early, "1.0")
    assert err.value.exit_code == 11 and status(install).state == "pristine"
    assert snapshot(install.site_packages, with_state=True) == pristine
    assert apply_plan(handmade_plan(install), "1.0").action == "applied"  # one built now is taken
    with pytest.raises(EngineError, match="Plan.base"):  # a plan that cannot be checked is refused
        apply_plan(dataclasses.replace(handmade_plan(install), base=None), "1.0")


# 5. One missing backup: revert restored 2 of 5 files, then exit 8, and 8 for good after.
@pytest.mark.parametrize("damage", ["missing", "damaged"])
def test_revert_checks_every_backup_before_the_first_write(install, tmp_path, damage):
    apply_plan(handmade_plan(install), "1.0")
    backup = StatePaths(install).original("sglang/srt/speculative/spec_info.py")
    if damage == "missing":
        backup.unlink()
    else:
        backup.write_bytes(b"not the original\n")
    patched = snapshot(install.site_packages)
    state_before = snapshot(install.state_dir)
    with pytest.raises(CorruptState) as err:
        revert(install)
    assert "spec_info.py" in err.value.message and "--force-reinstall" in err.value.message
    assert snapshot(install.site_packages) == patched  # not one file restored
    assert snapshot(install.state_dir) == state_before  # no journal: nothing half done
    st = status(install)  # no revert could restore it: damaged, said before anyone needs it
    assert st.state == "damaged" and "spec_info.py" in st.advice and "--force-reinstall" in st.advice
    # The advice: reinstall the release (here by hand, as pip would); then all works again.
    reinstall(install, make_tiny_install(tmp_path / "fresh"))
    reinstalled = snapshot(install.site_packages)
    assert status(install).state == "stale"
    assert apply_plan(handmade_plan(install), "1.0").action == "applied"
    revert(install)
    assert snapshot(install.site_packages) == reinstalled


# 6. The state folder itself was trusted: links in it made revert delete and apply write
# outside site-packages.
@pytest.mark.parametrize("linked", [".ddtree-patch", ".ddtree-patch/sglang",
                                    ".ddtree-patch/sglang/original", ".ddtree-patch/sglang.lock"])
def test_a_link_in_the_state_folder_is_refused(install, tmp_path, linked):
    outside = tmp_path / "outside"
    if linked.endswith("original"):
        apply_plan(handmade_plan(install), "1.0")
    path = install.site_packages / linked
    if path.exists():
        shutil.move(path, outside)
    elif linked.endswith(".lock"):
        path.parent.mkdir(parents=True, exist_ok=True)
        outside.write_text("precious\n")
    else:
        outside.mkdir()
        path.parent.mkdir(parents=True, exist_ok=True)
        (outside / "precious").write_text("precious\n")
    path.symlink_to(outside, target_is_directory=outside.is_dir())
    before, tree = snapshot(tmp_path), snapshot(install.site_packages)
    for command in (lambda: apply_plan(handmade_plan(install), "1.0"), lambda: revert(install),
                    lambda: status(install)):
        with pytest.raises(CorruptState, match="symbolic link"):
            command()
    assert snapshot(tmp_path) == before and snapshot(install.site_packages) == tree


def test_a_hard_linked_lock_file_is_refused(install, tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    StatePaths(install).lock.parent.mkdir()
    os.link(outside, StatePaths(install).lock)
    with pytest.raises(CorruptState, match="hard links"):
        apply_plan(handmade_plan(install), "1.0")
    assert outside.read_text() == "precious\n"


def test_a_manifest_naming_a_package_file_as_added_is_refused(install):
    apply_plan(handmade_plan(install), "1.0")
    victim = install.package_dir / "version.py"
    manifest = StatePaths(install).manifest
    raw = json.loads(manifest.read_text())
    raw["changes"]["added"].append({
        "path": "sglang/version.py",
        "sha256": fsio.sha256_file(victim),
        "size": victim.stat().st_size,
    })
    manifest.write_text(json.dumps(raw))
    with pytest.raises(CorruptState, match="outside the drop-in folder"):
        revert(install)
    assert victim.is_file()


# 7. "move it away to start over": status then said pristine on a patched tree and revert
# deleted the backups.
@pytest.mark.parametrize("crash", [False, True], ids=["applied", "half-applied"])
def test_a_state_without_manifest_keeps_its_backups(install, tmp_path, crash):
    if crash:  # the journal of a half-done apply, then the old advice followed
        recorder = Recorder()
        fsio.fault_hook = recorder
        apply_plan(handmade_plan(install), "1.0")
        revert(install)
        mid = next(i for i, (op, p) in enumerate(recorder.events)
                   if op == "replace" and p == install.package_dir / "srt" / "server_args.py")
        with failing_disk(mid + 1), pytest.raises(WriteFailed, match="journal is kept"):
            apply_plan(handmade_plan(install), "1.0")
        StatePaths(install).journal.unlink()
    else:
        apply_plan(handmade_plan(install), "1.0")
        StatePaths(install).manifest.unlink()
    changed = snapshot(install.site_packages)
    backups = snapshot(install.state_dir)
    st = status(install)
    assert st.state == "damaged" and "--force-reinstall" in st.advice
    for command in (lambda: revert(install), lambda: apply_plan(handmade_plan(install), "1.0")):
        with pytest.raises(CorruptState, match="backups but no manifest") as err:
            command()
        assert "move it away" not in err.value.message
    assert snapshot(install.state_dir) == backups and snapshot(install.site_packages) == changed


@pytest.mark.parametrize("content", [b"{not json", b'{"schema": 99}'])
def test_advice_for_an_unreadable_manifest_never_deletes_backups(install, content):
    apply_plan(handmade_plan(install), "1.0")
    StatePaths(install).manifest.write_bytes(content)
    with pytest.raises(CorruptState) as err:
        revert(install)
    message = err.value.message
    assert "Do not delete" in message and "delete it" not in message and "rm " not in message
    # the folder is moved aside only after the reinstall has put every original file back
    assert message.index("--force-reinstall") < message.index("move the folder aside") < message.index(".damaged")


# 8. A fixed temp name opened without O_EXCL: a planted hard link was written through.
def test_a_planted_temp_file_is_never_written_through(install, tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text("precious\n")
    srt = install.package_dir / "srt"
    os.link(outside, srt / ".server_args.py.ddtree-tmp")
    apply_plan(handmade_plan(install), "1.0")
    assert outside.read_text() == "precious\n"
    assert fsio.temp_path(srt / "x.py") != fsio.temp_path(srt / "x.py")


# 9a. .pyc backups were not checked against the journal's hash.
def test_bytecode_that_changes_during_apply_is_not_backed_up_blindly(install):
    pyc = next((install.package_dir / "srt" / "__pycache__").glob("server_args.*.pyc"))

    def python_recompiles(op, path):
        if path.name.startswith(".journal.json"):
            pyc.write_bytes(pyc.read_bytes() + b"recompiled")

    fsio.fault_hook = python_recompiles
    try:
        with pytest.raises(PlanMismatch, match="changed while the patch was being applied"):
            apply_plan(handmade_plan(install), "1.0")
    finally:
        fsio.fault_hook = None
    assert status(install).state == "pristine" and not install.state_dir.exists()


# 9b. Interrupted status printed "at None" and offered the same command twice.
@pytest.mark.parametrize("op", ["apply", "revert"])
def test_interrupted_status_names_the_operation_and_one_way_out(install, op):
    if op == "revert":
        apply_plan(handmade_plan(install), "1.0")
    with failing_disk(8), pytest.raises(WriteFailed):
        apply_plan(handmade_plan(install), "1.0") if op == "apply" else revert(install)
    st = status(install)
    assert (st.state, st.journal_op) == ("interrupted", op)
    text = "\n".join(result_lines(st, ""))
    assert "None" not in text and f"{op} by ddtree-patch 1.0 (pid {os.getpid()})" in text
    assert text.count("`ddtree-patch revert`") == 1
    assert ("`ddtree-patch apply`" in text) == (op == "apply")


# 9c. A closed pipe exited 1 (the code of an UNHANDLED audit site) with nothing on stderr; then 141
# with an error line, or 0, as the race with the reader went (issue 47): now always the command's own code.
def test_a_closed_pipe_keeps_the_commands_own_exit_code(install):
    child = subprocess.Popen(
        [sys.executable, "-m", "ddtree_patch", "apply", "--target", str(install.site_packages)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DDTREE_PATCH_CACHE": "off"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    child.stdout.close()  # the reader is gone before the child prints
    err = child.stderr.read()
    assert child.wait() == 0 and err == "", err
    assert status(install).state == "patched"


# 9d. Ctrl-C exited 130 without a word, also when it left the install interrupted.
def _ctrl_c_at(n):
    return FaultAt(n, lambda op, path: os.kill(os.getpid(), signal.SIGINT))


def test_ctrl_c_during_apply_rolls_back_at_the_next_step(install):
    pristine = snapshot(install.site_packages)
    for n in (0, 5, 15, 30):
        fsio.fault_hook = _ctrl_c_at(n)
        try:
            with pytest.raises(Interrupted) as err:
                apply_plan(handmade_plan(install), "1.0")
        finally:
            fsio.fault_hook = None
        assert err.value.exit_code == 130 and "rolled back" in err.value.message, n
        assert snapshot(install.site_packages) == pristine and not install.state_dir.exists()


def test_ctrl_c_during_revert_stops_and_says_how_to_finish(install):
    pristine = snapshot(install.site_packages)
    apply_plan(handmade_plan(install), "1.0")
    fsio.fault_hook = _ctrl_c_at(4)
    try:
        with pytest.raises(Interrupted) as err:
            revert(install)
    finally:
        fsio.fault_hook = None
    assert err.value.exit_code == 130 and "run `ddtree-patch revert` again" in err.value.message
    assert status(install).state == "interrupted"
    assert revert(install).recovered is not None
    assert snapshot(install.site_packages) == pristine


CTRL_C_CHILD = """
import os, signal, sys
from ddtree_patch import fsio
from ddtree_patch.cli import main
steps = iter(range(10**6))
fsio.fault_hook = lambda op, path: next(steps) == 12 and os.kill(os.getpid(), signal.SIGINT)
sys.argv = ["ddtree-patch", "apply", "--target", sys.argv[1]]
main()
"""


def test_ctrl_c_in_the_cli_exits_130_with_the_outcome(install):
    pristine = snapshot(install.site_packages)
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_CHILD, str(install.site_packages)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DDTREE_PATCH_CACHE": "off"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 130, done.stderr
    assert "interrupted (Ctrl-C)" in done.stderr and "rolled back" in done.stderr
    assert "Traceback" not in done.stderr
    assert snapshot(install.site_packages) == pristine
