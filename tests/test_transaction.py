"""apply / revert on the tiny install: exact round trip, no-ops, refusals, clean errors."""

from __future__ import annotations

import dataclasses
import errno
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from filelock import FileLock

from ddtree_patch import fsio
from ddtree_patch.errors import Drift, EngineError, LockHeld, NotInstalled, PlanMismatch, ReadOnly, WriteFailed
from ddtree_patch.model import AddedFile, FileEdit, Plan
from ddtree_patch.record import verify_record
from ddtree_patch.render import result_lines
from ddtree_patch.state import StatePaths, install_state
from ddtree_patch.status import status
from ddtree_patch.transaction import Recovery, apply, apply_plan, revert
from tests.read_only_mount import read_only_mount
from tests.tiny_install import make_tiny_install
from tests.txn_helpers import TINY_EDITS, failing_disk, handmade_plan, reinstall, snapshot

WRITE_BYTECODE = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


@pytest.fixture
def install(tmp_path):
    return make_tiny_install(tmp_path / "site")


def test_apply_then_revert_is_byte_identical_and_record_stays_valid(install):
    pristine = snapshot(install.site_packages)
    plan = handmade_plan(install)
    result = apply_plan(plan, "1.0")
    assert result.action == "applied"
    assert result.added == (
        "sglang/srt/speculative/ddtree/__init__.py",
        "sglang/srt/speculative/ddtree/kernels/__init__.py",
    )
    for edit in plan.edits:
        assert (install.package_dir / edit.path).read_bytes() == edit.after
    for added in plan.added:
        assert (install.package_dir / added.path).read_bytes() == added.data
    assert verify_record(install.record) == []
    record = install.record.read_text()
    assert "sglang/srt/speculative/ddtree/kernels/__init__.py,sha256=" in record
    assert not list((install.package_dir / "srt" / "__pycache__").glob("server_args.*.pyc"))
    rows = [line.split(",")[0] for line in record.splitlines()]
    assert not [r for r in rows if r.startswith("sglang/srt/__pycache__/server_args.")]  # moved away
    # the state apply leaves is listed, so pip uninstall removes it with the package
    assert ".ddtree-patch/sglang/manifest.json" in rows and ".ddtree-patch/sglang.lock" in rows

    reverted = revert(install)
    assert reverted.action == "reverted" and not reverted.forced
    assert snapshot(install.site_packages) == pristine
    assert verify_record(install.record) == []
    assert not install.state_dir.exists()


def test_revert_restores_mtimes_so_the_original_bytecode_is_valid_again(install):
    source = install.package_dir / "srt" / "server_args.py"
    mtime = source.stat().st_mtime_ns
    apply_plan(handmade_plan(install), "1.0")
    revert(install)
    assert source.stat().st_mtime_ns == mtime
    pyc = importlib.util.cache_from_source(str(source))
    flags, pyc_mtime, size = struct.unpack("<III", open(pyc, "rb").read(16)[4:16])
    assert (
        flags == 0 and pyc_mtime == int(mtime / 1e9) & 0xFFFFFFFF and size == source.stat().st_size
    )


def test_bytecode_compiled_while_patched_is_gone_after_revert(install):
    pristine = snapshot(install.site_packages)
    apply_plan(handmade_plan(install), "1.0")
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sglang.srt.server_args, sglang.srt.speculative.ddtree.kernels",
        ],
        cwd=install.site_packages,
        env=WRITE_BYTECODE,
        check=True,
    )
    cache = install.package_dir / "srt" / "__pycache__"
    assert list(cache.glob("server_args.*.pyc"))
    (cache / "server_args.cpython-311.opt-1.pyc").write_bytes(b"compiled by python -O")
    revert(install)
    assert snapshot(install.site_packages) == pristine


def test_a_symlinked_file_is_not_replaced(install):
    target = install.package_dir / "srt" / "server_args.py"
    real = install.package_dir / "srt" / "real_server_args.py"
    real.write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(real)
    with pytest.raises(PlanMismatch, match="symbolic link"):
        apply_plan(handmade_plan(install), "1.0")
    assert target.is_symlink() and not install.state_dir.exists()


def test_apply_twice_is_a_no_op(install):
    apply_plan(handmade_plan(install), "1.0")
    tree = snapshot(install.site_packages)
    manifest = StatePaths(install).manifest.read_bytes()
    result = apply_plan(handmade_plan(install), "1.0")
    assert result.action == "unchanged"
    assert snapshot(install.site_packages) == tree
    assert StatePaths(install).manifest.read_bytes() == manifest


@pytest.mark.parametrize("tool_version, marker", [("2.0", "v1"), ("1.0", "v2")])
def test_other_tool_version_or_plan_reverts_then_applies(install, tool_version, marker):
    pristine = snapshot(install.site_packages)
    apply_plan(handmade_plan(install), "1.0")
    plan = handmade_plan(install, marker=marker)
    result = apply_plan(plan, tool_version)
    assert (result.action, result.previous_tool_version) == ("reapplied", "1.0")
    assert (install.package_dir / plan.edits[0].path).read_bytes() == plan.edits[0].after
    assert status(install, plan, tool_version=tool_version).plan_current
    revert(install)
    assert snapshot(install.site_packages) == pristine


def test_a_plan_built_on_patched_files_is_refused(install):
    plan = handmade_plan(install)
    apply_plan(plan, "1.0")
    on_patched = Plan(
        install,
        [FileEdit(e.path, e.after, e.after + b"\n") for e in plan.edits],
        plan.added,
        install_state(install),
    )
    with pytest.raises(PlanMismatch, match="pristine"):
        apply_plan(on_patched, "2.0")
    assert status(install).state == "patched"


def _nothing_written(install, before, lock_dir_may_exist=False):
    after = snapshot(install.site_packages)
    if lock_dir_may_exist:
        after = {k: v for k, v in after.items() if not k.startswith(".ddtree-patch")}
    return after == before and not install.state_dir.exists()


def test_a_plan_that_does_not_compile_writes_nothing(install):
    before = snapshot(install.site_packages)
    plan = handmade_plan(install)
    plan.added.append(AddedFile("srt/speculative/ddtree/broken.py", b"def f(:\n"))
    with pytest.raises(EngineError, match="broken.py would not compile") as err:
        apply_plan(plan, "1.0")
    assert err.value.exit_code == 5
    assert (
        _nothing_written(install, before) and not (install.site_packages / ".ddtree-patch").exists()
    )


def test_stale_plan_and_overwriting_someone_elses_file_are_refused(install):
    plan = handmade_plan(install)
    (install.package_dir / "srt" / "server_args.py").write_text("changed after planning\n")
    with pytest.raises(PlanMismatch):
        apply_plan(plan, "1.0")
    install2 = make_tiny_install(install.site_packages.parent / "other")
    (install2.package_dir / "srt" / "speculative" / "ddtree").mkdir()
    (install2.package_dir / "srt" / "speculative" / "ddtree" / "__init__.py").write_text("mine\n")
    with pytest.raises(NotInstalled, match="exists but ddtree-patch did not write it"):
        apply_plan(handmade_plan(install2), "1.0")


def test_plan_paths_must_stay_inside_the_package(install):
    plan = Plan(install, [], [AddedFile("../escape.py", b"x = 1\n")])
    with pytest.raises(EngineError, match="outside"):
        apply_plan(plan, "1.0")
    assert not (install.site_packages / "escape.py").exists()


def test_drifted_revert_refuses_with_a_diff_then_force_restores(install):
    pristine = snapshot(install.site_packages)
    apply_plan(handmade_plan(install), "1.0")
    target = install.package_dir / "srt" / "server_args.py"
    target.write_bytes(target.read_bytes() + b"HAND_EDIT = 1\n")
    (install.package_dir / "srt" / "speculative" / "ddtree" / "__init__.py").unlink()
    patched = snapshot(install.site_packages)
    with pytest.raises(Drift) as err:
        revert(install)
    assert err.value.exit_code == 9 and "revert --force" in err.value.message
    diffs = {d.path: d for d in err.value.drift}
    assert "+HAND_EDIT = 1" in diffs["sglang/srt/server_args.py"].diff
    assert diffs["sglang/srt/speculative/ddtree/__init__.py"].state == "original"
    assert snapshot(install.site_packages) == patched
    with pytest.raises(Drift):
        apply_plan(handmade_plan(install), "1.0")
    result = revert(install, force=True)
    assert result.forced == ("sglang/srt/server_args.py",)
    assert snapshot(install.site_packages) == pristine


def test_stale_state_is_dropped_and_the_new_files_patched(install, tmp_path):
    apply_plan(handmade_plan(install), "1.0")
    fresh = make_tiny_install(tmp_path / "fresh")
    reinstall(install, fresh)
    reinstalled = snapshot(install.site_packages)
    assert revert(install).action == "discarded stale state"
    assert snapshot(install.site_packages) == reinstalled and not install.state_dir.exists()
    apply_plan(handmade_plan(install), "1.0")
    reinstall(install, fresh)
    result = apply_plan(handmade_plan(install), "1.0")
    assert result.action == "applied" and result.discarded_stale
    assert status(install).state == "patched"


def test_read_only_site_packages_is_detected_before_writing(install, monkeypatch):
    before = snapshot(install.site_packages)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(ReadOnly) as err:
        apply_plan(handmade_plan(install), "1.0")
    assert err.value.exit_code == 7
    assert (
        _nothing_written(install, before) and not (install.site_packages / ".ddtree-patch").exists()
    )


def test_read_only_file_system_probe(install, monkeypatch):
    before = snapshot(install.site_packages)
    real_open = os.open

    def open_(path, flags, mode=0o777, **kw):
        if ".ddtree-probe" in str(path):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, mode, **kw)

    monkeypatch.setattr(os, "open", open_)
    with pytest.raises(ReadOnly, match="Read-only file system"):
        apply_plan(handmade_plan(install), "1.0")
    monkeypatch.undo()
    assert _nothing_written(install, before)


def _permission_bits_for_root(op, path):
    """What the kernel does to others, done to root too: a folder without write bits refuses."""
    if op == "probe" and not path.parent.stat().st_mode & 0o222:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


def test_really_read_only_folder(install, monkeypatch):
    """Runs as root too (CI): root passes permission bits, so the probe gets root's EACCES."""
    before = snapshot(install.site_packages)
    if os.geteuid() == 0:
        monkeypatch.setattr(fsio, "fault_hook", _permission_bits_for_root)
    install.package_dir.chmod(0o555)
    try:
        with pytest.raises(ReadOnly) as err:
            apply_plan(handmade_plan(install), "1.0")
    finally:
        install.package_dir.chmod(0o755)
    assert err.value.exit_code == 7 and str(install.package_dir) in err.value.message
    assert _nothing_written(install, before, lock_dir_may_exist=True)


def test_disk_full_at_every_write_rolls_back(install, monkeypatch):
    pristine = snapshot(install.site_packages)
    calls = {"n": 0, "fail_at": 0}
    real_write = fsio._write_all

    def write_all(fd, data):
        calls["n"] += 1
        if calls["n"] == calls["fail_at"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(fd, data)

    monkeypatch.setattr(fsio, "_write_all", write_all)
    apply_plan(handmade_plan(install), "1.0")
    writes = calls["n"]
    revert(install)
    assert writes > 10
    for fail_at in range(1, writes + 1):
        calls.update(n=0, fail_at=fail_at)
        with pytest.raises(WriteFailed) as err:
            apply_plan(handmade_plan(install), "1.0")
        assert err.value.exit_code == 10 and "disk full" in err.value.message
        assert "rolled back" in err.value.message
        assert snapshot(install.site_packages) == pristine, err.value.message
        assert status(install).state == "pristine"


def test_lock_held_fails_cleanly_after_the_timeout(install):
    before = snapshot(install.site_packages)
    StatePaths(install).lock.parent.mkdir()
    with FileLock(StatePaths(install).lock):
        with pytest.raises(LockHeld) as err:
            apply_plan(handmade_plan(install), "1.0", lock_timeout=0.2)
        with pytest.raises(LockHeld):
            revert(install, lock_timeout=0.2)
    assert err.value.exit_code == 6 and "another ddtree-patch" in err.value.message
    assert _nothing_written(install, before, lock_dir_may_exist=True)


def test_results_serialize_to_json(install):
    """The CLI's --json is dataclasses.asdict + json: every field must survive the round trip."""
    plan = handmade_plan(install)
    applied = apply_plan(plan, "1.0", progress=lambda step: None)
    patched = status(install)
    reverted = revert(install)
    for result in (applied, patched, reverted):
        data = dataclasses.asdict(result)
        assert json.loads(json.dumps(data)) == json.loads(json.dumps(data, default=repr)), data
    data = json.loads(json.dumps(dataclasses.asdict(applied)))
    assert data["action"] == "applied" and data["state_dir"] == str(install.state_dir)
    assert data["edited"] == [f"sglang/{e.path}" for e in sorted(plan.edits, key=lambda e: e.path)]
    data = json.loads(json.dumps(dataclasses.asdict(patched)))
    assert data["state"] == "patched" and {f["state"] for f in data["files"]} == {"patched"}
    data = json.loads(json.dumps(dataclasses.asdict(reverted)))
    assert data["action"] == "reverted" and len(data["removed"]) == len(plan.added)


def test_pip_uninstall_removes_every_file_the_patch_added(tmp_path):
    env = tmp_path / "venv"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    install = make_tiny_install(Path(site))
    apply_plan(handmade_plan(install), "1.0")
    subprocess.run(
        [python, "-c", "import sglang.srt.speculative.ddtree.kernels, sglang.srt.server_args"],
        env=WRITE_BYTECODE,
        check=True,
    )
    assert list(Path(site).glob("sglang/srt/speculative/ddtree/kernels/__pycache__/*.pyc"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "uninstall", "-y", "sglang"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    left = sorted(p.relative_to(site).as_posix() for p in Path(site).rglob("*"))
    assert left == [], left  # the state folder and lock too: RECORD lists them while patched


def test_a_plan_that_drops_the_applied_edits_is_refused(install):
    """What an engine scanning the patched files produces: nothing left to edit, only drop-ins."""
    apply_plan(handmade_plan(install), "1.0")
    tree = snapshot(install.site_packages)
    only_dropins = Plan(install, [], handmade_plan(install).added, install_state(install))
    for tool_version in ("1.0", "2.0"):
        with pytest.raises(PlanMismatch, match="built from the patched files"):
            apply_plan(only_dropins, tool_version)
    fewer = handmade_plan(install, edits=TINY_EDITS[:2])
    with pytest.raises(PlanMismatch, match="dflash_worker.py"):
        apply_plan(fewer, "1.0")
    assert snapshot(install.site_packages) == tree
    assert apply_plan(fewer, "2.0").action == "reapplied"  # a new version may edit fewer files


def test_a_bare_package_without_dist_info_round_trips(install):
    bare = dataclasses.replace(install, dist_info=None)
    pristine = snapshot(install.site_packages)
    record = install.record.read_bytes()
    result = apply_plan(handmade_plan(bare), "1.0")
    assert result.action == "applied" and status(bare).state == "patched"
    assert install.record.read_bytes() == record  # without a dist-info, RECORD is not ours
    revert(bare)
    assert snapshot(install.site_packages) == pristine


# Issue 47, 6: what a revert and a refused apply leave behind, and what pip uninstall removes.
def test_a_revert_or_a_refused_apply_leaves_nothing_of_ours(install):
    pristine = snapshot(install.site_packages, with_state=True)
    apply_plan(handmade_plan(install), "1.0")
    assert revert(install).action == "reverted"
    assert snapshot(install.site_packages, with_state=True) == pristine  # no empty lock file either
    plan = handmade_plan(install)
    (install.package_dir / "srt" / "server_args.py").write_bytes(b"changed after planning\n")
    with pytest.raises(PlanMismatch):  # refused under the lock
        apply_plan(plan, "1.0")
    assert not (install.site_packages / ".ddtree-patch").exists()


def test_a_revert_that_recovers_an_interrupted_apply_says_so(install):
    pristine = snapshot(install.site_packages, with_state=True)
    with failing_disk(12), pytest.raises(WriteFailed, match="journal is kept"):
        apply_plan(handmade_plan(install), "1.0")
    result = revert(install)
    assert (result.action, result.recovered) == ("reverted", Recovery("apply", "rolled back"))
    lines = result_lines(result, "")
    assert lines[0] == "reverted" and "recovered an interrupted apply: rolled back" in lines
    assert not any("nothing to revert" in line for line in lines)
    assert snapshot(install.site_packages, with_state=True) == pristine


def test_revert_force_keeps_the_bytes_it_overwrites_and_says_where(install):
    pristine = snapshot(install.site_packages)
    apply_plan(handmade_plan(install), "1.0")
    edited = install.package_dir / "srt" / "server_args.py"
    edited.write_bytes(edited.read_bytes() + b"HAND_EDIT = 1\n")
    dropin = install.package_dir / "srt" / "speculative" / "ddtree" / "__init__.py"
    dropin.write_bytes(b"# my own notes\n")
    hand = {"sglang/srt/server_args.py": edited.read_bytes(),
            "sglang/srt/speculative/ddtree/__init__.py": dropin.read_bytes()}
    result = revert(install, force=True)
    assert snapshot(install.site_packages) == pristine
    kept = Path(result.kept_edits)
    assert kept.parent == install.site_packages / ".ddtree-patch"
    assert {p.relative_to(kept).as_posix(): p.read_bytes() for p in kept.rglob("*") if p.is_file()} == hand
    assert f"kept what --force overwrote (your edits) in {kept}" in result_lines(result, "")
    assert json.loads(json.dumps(dataclasses.asdict(result)))["kept_edits"] == str(kept)
    assert sorted(p.name for p in kept.parent.iterdir()) == [kept.name]  # the state and lock are gone
    assert revert(install).action == "nothing to revert" and kept.is_dir()  # the copies are the user's
    apply_plan(handmade_plan(install), "1.0")
    assert revert(install, force=True).kept_edits is None  # nothing overwritten: nothing kept


def test_apply_on_a_read_only_install_that_holds_the_plan_is_the_no_op(install):
    with read_only_mount(install.site_packages):  # not patched: apply needs to write
        with pytest.raises(ReadOnly):
            apply(install, handmade_plan, "1.0")
    apply_plan(handmade_plan(install), "1.0")
    patched = snapshot(install.site_packages, with_state=True)
    with read_only_mount(install.site_packages):
        assert apply(install, handmade_plan, "1.0").action == "unchanged"
        assert apply_plan(handmade_plan(install), "1.0").action == "unchanged"
        with pytest.raises(ReadOnly) as err:  # another plan or tool version would write
            apply(install, lambda i: handmade_plan(i, marker="v2"), "1.0")
        assert err.value.exit_code == 7
        with pytest.raises(ReadOnly):
            apply(install, handmade_plan, "2.0")
    assert snapshot(install.site_packages, with_state=True) == patched


def test_the_cli_apply_on_a_patched_read_only_mount_exits_0(tmp_path):
    root = Path(__file__).resolve().parent.parent
    site = Path(shutil.copytree(root / "fixtures" / "mini_site", tmp_path / "site"))
    env = {**os.environ, "DDTREE_PATCH_CACHE": "off"}
    read_only_apply = [sys.executable, "-m", "tests.read_only_mount", str(site), "apply", "--target", str(site)]
    first = subprocess.run(read_only_apply, capture_output=True, text=True, env=env, cwd=root)
    assert first.returncode == 7 and "nothing was written" in first.stderr, first.stderr
    done = subprocess.run([sys.executable, "-m", "ddtree_patch", "apply", "--target", str(site)],
                          capture_output=True, text=True, env=env, cwd=root)
    assert done.returncode == 0, done.stderr
    again = subprocess.run(read_only_apply, capture_output=True, text=True, env=env, cwd=root)
    assert again.returncode == 0 and again.stdout.startswith("unchanged"), again.stdout + again.stderr
