"""Bring an install back to its original bytes (revert, rollback and recovery all use this).

Decide first, write second: every file is judged and every backup it needs is read and checked
against its hash before the first write, so a missing or damaged backup, or a file someone
changed, stops the command with nothing written instead of halfway.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from ddtree_patch import fsio
from ddtree_patch.errors import Drift, VerifyFailed
from ddtree_patch.model import Install
from ddtree_patch.state import (
    Changes,
    StatePaths,
    broken_backups,
    checked_path,
    overwritten_folder,
)
from ddtree_patch.status import file_states
from ddtree_patch.transaction.section import Steps
from ddtree_patch.transaction.write import ensure_dir, write_state_file


@dataclass
class Restored:
    restored: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    forced: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    kept: Path | None = None  # where the bytes force overwrote or removed were copied


@dataclass(frozen=True)
class _Original:
    rel: str
    before: str
    after: str
    mode: int
    mtime_ns: int
    is_record: bool


def _drifted(rel: str) -> Drift:
    return Drift(
        f"{rel} holds neither the original nor the patched bytes; nothing was written "
        "(`ddtree-patch revert --force` restores the original over it)"
    )


def _originals(changes: Changes) -> list[_Original]:
    found = [
        _Original(e.path, e.sha256_before, e.sha256_after, e.mode, e.mtime_ns, False)
        for e in changes.edited
    ]
    if changes.record:
        r = changes.record
        found.append(_Original(r.path, r.sha256_before, r.sha256_after, r.mode, r.mtime_ns, True))
    return found


def _plan_restore(
    install: Install, changes: Changes, *, force: bool
) -> tuple[list[tuple[_Original, bytes | None]], dict[str, bytes | None]]:
    """Judge every file and read every backup needed; raises before anything is written.

    Returns the originals with the backup bytes to write (None: the file is original already)
    and the files to overwrite (or remove) because of force, with the bytes they hold now
    (None: the file is gone), so that those bytes can be kept.
    """
    paths = StatePaths(install)
    todo: list[tuple[_Original, bytes | None]] = []
    forced: dict[str, bytes | None] = {}
    bad: list[str] = []
    for o in _originals(changes):
        path = checked_path(install, o.rel, record=o.is_record)
        current = fsio.sha256_file(path)
        if current == o.before:
            todo.append((o, None))
            continue
        if current != o.after:
            if not force:
                raise _drifted(o.rel)
            forced[o.rel] = None if current is None else path.read_bytes()
        backup = paths.original(o.rel)
        data = backup.read_bytes() if backup.is_file() else None
        if data is None or hashlib.sha256(data).hexdigest() != o.before:
            bad.append(f"{o.rel} ({'damaged' if data is not None else 'missing'}: {backup})")
            continue
        todo.append((o, data))
    for a in changes.added:
        path = checked_path(install, a.path)
        current = fsio.sha256_file(path)
        if current is not None and current != a.sha256:
            if not force:
                raise _drifted(a.path)
            forced[a.path] = path.read_bytes()
    if bad:
        raise broken_backups(install, bad)
    return todo, forced


def restore_pristine(
    install: Install, changes: Changes, step: Steps, *, force: bool, keep: Path | None = None
) -> Restored:
    """Bring every file the changes touched back to its original bytes; idempotent.

    Files already original are left alone, so this finishes a half-done apply or revert alike.
    A file holding neither the original nor the patched bytes is overwritten only with `force`,
    and only after its bytes were copied (durably) into `keep` (default: a new
    `state.overwritten_folder`), as quilt and git keep what a forced command throws away.
    """
    todo, forced = _plan_restore(install, changes, force=force)
    paths = StatePaths(install)
    done = Restored(forced=list(forced))
    for rel, data in forced.items():
        if data is not None:
            done.kept = done.kept or keep or overwritten_folder(install)
            step(f"keep the bytes of {rel} that --force overwrites in {done.kept}")
            write_state_file(done.kept / rel, data)
    targets = [checked_path(install, e.path) for e in changes.edited]
    targets += [checked_path(install, a.path) for a in changes.added]
    targets += [checked_path(install, b.path) for b in changes.bytecode]
    if changes.record:
        targets.append(checked_path(install, changes.record.path, record=True))
    for target in targets:
        if target.parent.is_dir():
            for tmp in fsio.leftover_temps(target):
                step(f"remove the leftover {tmp.name}")
                fsio.unlink(tmp)
    for o, data in todo:
        path = checked_path(install, o.rel, record=o.is_record)
        if data is None:
            if path.stat().st_mtime_ns != o.mtime_ns:
                step(f"restore the time stamp of {o.rel}")
                fsio.set_mtime(path, o.mtime_ns)
            continue
        step(f"restore {o.rel}")
        ensure_dir(path.parent)
        fsio.write_atomic(path, data, mode=o.mode, mtime_ns=o.mtime_ns)
        done.restored.append(o.rel)
    for b in changes.bytecode:
        path = checked_path(install, b.path)
        backup = paths.original(b.path)
        if fsio.sha256_file(path) != b.sha256 and fsio.sha256_file(backup) == b.sha256:
            step(f"restore {b.path}")
            ensure_dir(path.parent)
            fsio.write_atomic(path, backup.read_bytes())
    kept = {b.path for b in changes.bytecode}
    for e in changes.edited:  # bytecode Python wrote for the patched source since apply
        path = checked_path(install, e.path)
        if path.suffix != ".py":
            continue
        for pyc in sorted((path.parent / "__pycache__").glob(f"{path.stem}.*.pyc")):
            if f"{e.path.rsplit('/', 1)[0]}/__pycache__/{pyc.name}" not in kept:
                step(f"remove {pyc.name}, compiled from the patched source")
                fsio.unlink(pyc)
    for a in changes.added:
        path = checked_path(install, a.path)
        if fsio.sha256_file(path) is not None:
            step(f"remove {a.path}")
            fsio.unlink(path)
            done.removed.append(a.path)
        if path.suffix == ".py":
            for pyc in sorted((path.parent / "__pycache__").glob(f"{path.stem}.*.pyc")):
                step(f"remove {pyc.name}")
                fsio.unlink(pyc)
    for d in reversed(changes.created_dirs):
        folder = checked_path(install, d)
        cache = folder / "__pycache__"
        if cache.is_dir() and not any(cache.iterdir()):
            step(f"remove {d}/__pycache__")
            fsio.rmdir(cache)
        if folder.is_dir():
            if any(folder.iterdir()):
                done.leftovers.append(d)
            else:
                step(f"remove {d}")
                fsio.rmdir(folder)
    return done


def verify_pristine(install: Install, changes: Changes) -> None:
    wrong = [s.path for s in file_states(install, changes) if s.state != "original"]
    if wrong:
        raise VerifyFailed(
            f"after restoring, these files differ from the originals: {', '.join(wrong)}"
        )


def remove_state(install: Install, step: Steps) -> None:
    """Delete the state folder: manifest first, journal last (recovery needs it to the end)."""
    paths = StatePaths(install)
    if paths.manifest.exists():
        step("remove the manifest")
        fsio.unlink(paths.manifest)
    for folder in (paths.root / "original", paths.root / "patched"):
        if folder.exists():
            step(f"remove {folder.name} copies")
            fsio.rmtree(folder)
    if paths.journal.exists():
        step("remove the journal")
        fsio.unlink(paths.journal)
    if paths.root.exists():
        step("remove the state folder")
        fsio.rmtree(paths.root)


def check_restorable(install: Install, changes: Changes, *, force: bool) -> None:
    """Raise (Drift, CorruptState) now if restoring would stop halfway; reads only.

    Called before revert writes its journal, so a missing backup leaves the install patched
    and the state as it was, instead of a half revert that no command can finish.
    """
    _plan_restore(install, changes, force=force)
