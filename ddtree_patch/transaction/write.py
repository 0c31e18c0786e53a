"""The writes of apply, in the order recovery relies on: journal, backups, then replacements."""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timezone
from pathlib import Path

from ddtree_patch import fsio
from ddtree_patch.errors import PlanMismatch, VerifyFailed
from ddtree_patch.model import Install, Plan
from ddtree_patch.state import (
    Changes,
    Journal,
    Manifest,
    StatePaths,
    checked_path,
    site_path,
    write_journal,
    write_manifest,
)
from ddtree_patch.status import file_states
from ddtree_patch.transaction.section import Steps


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def ensure_dir(path: Path) -> None:
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        fsio.mkdir(folder)


def write_state_file(path: Path, data: bytes) -> None:
    ensure_dir(path.parent)
    fsio.write_atomic(path, data)


def _backup_bytes(path: Path, rel: str, sha256: str) -> bytes:
    """The bytes to back up, proven to be the ones the journal lists (nothing changed since)."""
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise PlanMismatch(f"{rel} changed while the patch was being applied; run it again")
    return data


def write_patch(
    install: Install,
    plan: Plan,
    changes: Changes,
    record_data: bytes | None,
    tool_version: str,
    python: str,
    step: Steps,
) -> None:
    paths = StatePaths(install)
    step.writing = True
    step("create the state folder")
    ensure_dir(paths.root)
    step("write the journal")
    write_journal(install, Journal("apply", tool_version, now(), os.getpid(), changes))
    before = {site_path(install, e.path): e.before for e in plan.edits}
    after = {site_path(install, e.path): e.after for e in plan.edits}
    after.update({site_path(install, a.path): a.data for a in plan.added})
    for e in changes.edited:
        step(f"back up {e.path}")
        write_state_file(paths.original(e.path), before[e.path])
    for b in changes.bytecode:
        step(f"back up {b.path}")
        data = _backup_bytes(checked_path(install, b.path), b.path, b.sha256)
        write_state_file(paths.original(b.path), data)
    if changes.record is not None:
        step(f"back up {changes.record.path}")
        data = _backup_bytes(install.record, changes.record.path, changes.record.sha256_before)
        write_state_file(paths.original(changes.record.path), data)
    for rel, data in after.items():
        step(f"keep a copy of the patched {rel}")
        write_state_file(paths.patched(rel), data)
    for d in changes.created_dirs:
        step(f"create {d}")
        fsio.mkdir(checked_path(install, d))
    for e in changes.edited:
        step(f"write {e.path}")
        fsio.write_atomic(checked_path(install, e.path), after[e.path], mode=e.mode)
    for a in changes.added:
        step(f"add {a.path}")
        fsio.write_atomic(checked_path(install, a.path), after[a.path])
    for b in changes.bytecode:
        step(f"remove stale bytecode {b.path}")
        fsio.unlink(checked_path(install, b.path))
    if changes.record is not None and record_data is not None:
        step(f"update {changes.record.path}")
        fsio.write_atomic(
            checked_path(install, changes.record.path, record=True),
            record_data,
            mode=changes.record.mode,
        )
    step("verify the patched files")
    verify_patched(install, changes)
    step("write the manifest")
    write_manifest(install, Manifest(tool_version, install.version, python, now(), changes))
    step("remove the journal")
    fsio.unlink(paths.journal)


def verify_patched(install: Install, changes: Changes) -> None:
    wrong = [s.path for s in file_states(install, changes) if s.state != "patched"]
    if wrong:
        raise VerifyFailed(f"after writing, these files do not hold the patch: {', '.join(wrong)}")
