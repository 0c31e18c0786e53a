"""Durability, which reading files back cannot show: the fsyncs and their order, observed.

fsio reports every fsync through `sync_hook`; together with `fault_hook` (called before each
change) that gives the order of events of a whole apply and revert. Each replace must follow
the fsync of its temp file (data, mode and mtime already set) and be followed by the fsync of
its folder; each mtime change must be followed by the file's fsync. Dropping any of them fails
here. Also: recovery never overwrites a file someone changed after the crash.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ddtree_patch import fsio
from ddtree_patch.errors import CorruptState, WriteFailed
from ddtree_patch.state import load_manifest
from ddtree_patch.status import status
from ddtree_patch.transaction import apply_plan, revert
from ddtree_patch.transaction.restore import restore_pristine
from ddtree_patch.transaction.section import Steps
from tests.tiny_install import make_tiny_install
from tests.txn_helpers import failing_disk, handmade_plan, snapshot


@pytest.fixture
def install(tmp_path):
    return make_tiny_install(tmp_path / "site")


class Events:
    """Both hooks into one ordered list; on each file fsync, also the file's mode and mtime."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Path, tuple[int, int] | None]] = []

    def change(self, op: str, path: Path) -> None:
        self.events.append((op, path, None))

    def sync(self, op: str, path: Path) -> None:
        st = path.stat() if op == "fsync" else None
        self.events.append((op, path, (stat.S_IMODE(st.st_mode), st.st_mtime_ns) if st else None))


@pytest.fixture
def events(monkeypatch):
    recorded = Events()
    monkeypatch.setattr(fsio, "fault_hook", recorded.change)
    monkeypatch.setattr(fsio, "sync_hook", recorded.sync)
    return recorded


def _check_order(events: list) -> int:
    """Every replace: its temp fsynced before, its folder fsynced right after. Returns count."""
    replaces = 0
    for i, (op, path, _) in enumerate(events):
        if op == "replace":
            replaces += 1
            synced = [p for o, p, _ in events[:i] if o == "fsync"]
            assert synced and synced[-1].parent == path.parent, f"{path}: no fsync of its temp"
            assert synced[-1].name.startswith(f".{path.name}."), f"{path}: fsync of another file"
            later = [(o, p) for o, p, _ in events[i + 1 :] if o != "fsync"]
            assert later and later[0] == ("fsync-dir", path.parent), f"{path}: folder not synced"
        if op in ("unlink", "mkdir", "rmdir"):
            later = [(o, p) for o, p, _ in events[i + 1 :] if o.startswith("fsync")]
            assert later and later[0] == ("fsync-dir", path.parent), f"{op} {path}: not synced"
        if op == "utime":
            later = [(o, p) for o, p, _ in events[i + 1 :] if o.startswith("fsync")]
            assert later and later[0] == ("fsync", path), f"utime {path}: not synced"
    return replaces


def test_every_replace_is_fsynced_before_and_its_folder_after(install, events):
    apply_plan(handmade_plan(install), "1.0")
    assert _check_order(events.events) >= 15
    events.events.clear()
    revert(install)
    assert _check_order(events.events) > 3


def test_mode_and_mtime_are_set_before_the_fsync(install, events):
    source = install.package_dir / "srt" / "server_args.py"
    source.chmod(0o640)
    original = (0o640, source.stat().st_mtime_ns)
    apply_plan(handmade_plan(install), "1.0")
    events.events.clear()
    revert(install)
    synced = [meta for op, path, meta in events.events
              if op == "fsync" and path.name.startswith(".server_args.py.")]
    assert synced == [original]  # the restored file was durable with its mode and mtime


def test_a_restored_time_stamp_is_fsynced(install, events):
    apply_plan(handmade_plan(install), "1.0")
    changes = load_manifest(install).changes
    revert(install)
    edited = install.package_dir / "srt" / "speculative" / "spec_info.py"
    os.utime(edited, ns=(1, 1))  # the original bytes, a wrong time stamp: only utime is needed
    events.events.clear()
    restore_pristine(install, changes, Steps(None), force=False)
    assert [op for op, path, _ in events.events if path == edited] == ["utime", "fsync"]
    _check_order(events.events)


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_recovery_never_overwrites_a_file_changed_after_the_crash(install, op):
    if op == "revert":
        apply_plan(handmade_plan(install), "1.0")
    steps = 20 if op == "apply" else 6  # past the first replace of a package file
    with failing_disk(steps), pytest.raises(WriteFailed, match="journal is kept"):
        apply_plan(handmade_plan(install), "1.0") if op == "apply" else revert(install)
    assert status(install).state == "interrupted"
    edited = install.package_dir / "srt" / "server_args.py"
    edited.write_text("# the user's own edit after the crash\n")
    tree = snapshot(install.site_packages)
    for command in (lambda: revert(install), lambda: apply_plan(handmade_plan(install), "1.0")):
        with pytest.raises(CorruptState, match="server_args.py holds neither") as err:
            command()
        assert "revert --force" in err.value.message
    assert snapshot(install.site_packages) == tree
    result = revert(install, force=True)  # the advice: restores the original over the edit
    assert result.recovered is not None and status(install).state == "pristine"
    assert edited.read_bytes() == handmade_plan(install).edits[1].before
