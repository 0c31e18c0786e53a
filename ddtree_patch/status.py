"""Where an install stands: pristine, patched, drifted, stale, or interrupted.

Read-only: compares the files on disk with the hashes in the manifest (or journal).

- pristine: no manifest and no journal (the patch never ran, or was reverted).
- patched: every file the patch wrote still holds exactly the bytes it wrote.
- drifted: some files still hold the patch, others changed (hand edit, partial upgrade);
  `revert` refuses until `--force`.
- stale: nothing of the patch is left (SGLang upgraded or reinstalled since: another dist-info
  than the one patched, or none of the files holds the patch); `apply` patches the new files.
- interrupted: a journal is left by a crashed apply/revert; the next apply/revert recovers first.
- damaged: backups without a manifest or journal that differ from the files on disk (someone
  moved the manifest away), or a file the patch changed whose backup is missing or wrong (no
  revert could restore it); nothing deletes them, the advice is a reinstall.
- native: no state, and SGLang defines DDTREE itself (`native.py`); `apply` refuses.

Status waits (briefly) for a running apply/revert, so it never reads a half-written install.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ddtree_patch import fsio, lockfile
from ddtree_patch.native import native_ddtree
from ddtree_patch.model import Install, Plan
from ddtree_patch.errors import CorruptState
from ddtree_patch.state import (
    Changes,
    StatePaths,
    broken_backups,
    check_no_orphans,
    checked_path,
    check_state_folder,
    load_journal,
    load_manifest,
    needed_backups,
    plan_digest,
    same_release,
)

STATUS_LOCK_TIMEOUT = 5.0  # seconds status waits for a running apply/revert before reading anyway


@dataclass(frozen=True)
class FileState:
    path: str  # relative to site-packages
    role: str  # "edited" | "added" | "record"
    state: str  # "patched" | "original" | "absent" | "changed"


@dataclass(frozen=True)
class FileDrift:
    """A file that no longer holds what the patch wrote, and how it differs."""

    path: str
    state: str  # "original" | "absent" | "changed"
    diff: str  # unified diff from the bytes the patch wrote to the bytes on disk


@dataclass(frozen=True)
class Status:
    state: str  # "pristine" | "patched" | "drifted" | "stale" | "interrupted" | "damaged" | "native"
    sglang_version: str  # installed now
    state_dir: str
    advice: str  # one line: what to run next ("" when nothing to do)
    tool_version: str | None = None  # that wrote the manifest
    applied_at: str | None = None
    patched_version: str | None = None  # SGLang version the patch was applied to
    files: tuple[FileState, ...] = ()
    journal_op: str | None = None  # the interrupted operation
    journal_started_at: str | None = None  # when it started (ISO 8601, UTC)
    journal_pid: int | None = None  # the process that ran it
    busy: bool = False  # another process holds the lock right now
    plan_current: bool | None = None  # the patch on disk is exactly current_plan (None: not asked)


def file_states(install: Install, changes: Changes) -> tuple[FileState, ...]:
    """Per file the patch touched: does it hold the patched bytes, the original, or else?

    Empty for a state written for another release (its files are gone with its dist-info).
    """
    if not same_release(install, changes):
        return ()

    def judge(current: str | None, before: str | None, after: str) -> str:
        if current == after:
            return "patched"
        if current == before:
            return "original"
        return "absent" if current is None else "changed"

    states = []
    for e in changes.edited:
        current = fsio.sha256_file(checked_path(install, e.path))
        states.append(FileState(e.path, "edited", judge(current, e.sha256_before, e.sha256_after)))
    for a in changes.added:
        current = fsio.sha256_file(checked_path(install, a.path))
        state = "original" if current is None else judge(current, None, a.sha256)
        states.append(FileState(a.path, "added", state))
    if changes.record:
        r = changes.record
        current = fsio.sha256_file(checked_path(install, r.path, record=True))
        states.append(FileState(r.path, "record", judge(current, r.sha256_before, r.sha256_after)))
    return tuple(states)


def classify(states: tuple[FileState, ...]) -> str:
    """patched when all files hold the patch, stale when none does, drifted in between."""
    patched = [s.state == "patched" for s in states]
    if not states:  # a state of another release: nothing of it is checked
        return "stale"
    if all(patched):
        return "patched"
    return "drifted" if any(patched) else "stale"


def drift_report(install: Install, states: tuple[FileState, ...]) -> tuple[FileDrift, ...]:
    """A unified diff (patched bytes -> bytes on disk) for every file that is not as written."""
    paths = StatePaths(install)
    report = []
    for s in states:
        if s.state == "patched" or s.role == "record":
            continue
        wrote = paths.patched(s.path)
        on_disk = checked_path(install, s.path)
        old = wrote.read_bytes().decode("utf-8", "replace") if wrote.is_file() else ""
        new = on_disk.read_bytes().decode("utf-8", "replace") if on_disk.is_file() else ""
        diff = "".join(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                f"{s.path} (as patched)",
                f"{s.path} (on disk)",
            )
        )
        report.append(FileDrift(s.path, s.state, diff))
    return tuple(report)


@contextmanager
def _read_lock(install: Install, timeout: float) -> Iterator[bool]:
    """Hold the install's lock (shared) while reading, if there is one; yields True when busy.

    No lock file: no transaction is running (each one takes it, and the last removes it only
    with the state), and an apply writes the manifest only after verifying, so reading without
    it is safe. A lock file this user cannot open cannot be held by a writer either.
    """
    check_state_folder(install)
    path = StatePaths(install).lock
    try:
        fd = lockfile.acquire(path, timeout, shared=True, create=False)
    except lockfile.Busy:
        yield True
        return
    except OSError:
        yield False
        return
    try:
        yield False
    finally:
        if fd is not None:
            lockfile.release(fd, path)


def status(
    install: Install,
    current_plan: Plan | None = None,
    *,
    tool_version: str | None = None,
    lock_timeout: float = STATUS_LOCK_TIMEOUT,
) -> Status:
    """Report the install's state; with `current_plan`, also whether the patch on disk is it."""
    with _read_lock(install, lock_timeout) as busy:
        return _status(install, current_plan, tool_version, busy)


def _status(
    install: Install, current_plan: Plan | None, tool_version: str | None, busy: bool
) -> Status:
    base = dict(sglang_version=install.version, state_dir=str(install.state_dir))
    journal = load_journal(install)
    if journal is not None:
        if busy:
            advice = f"another ddtree-patch (pid {journal.pid}) is running {journal.op}; wait for it"
        elif journal.op == "apply":
            advice = (
                f"an apply (pid {journal.pid}, started {journal.started_at}) was interrupted; "
                "`ddtree-patch revert` rolls it back to pristine, `ddtree-patch apply` rolls it "
                "back and applies again"
            )
        else:
            advice = (
                f"a revert (pid {journal.pid}, started {journal.started_at}) was interrupted; "
                "run `ddtree-patch revert` to finish it"
            )
        return Status(
            state="interrupted",
            advice=advice,
            tool_version=journal.tool_version,
            files=file_states(install, journal.changes),
            journal_op=journal.op,
            journal_started_at=journal.started_at,
            journal_pid=journal.pid,
            busy=busy,
            **base,
        )
    manifest = load_manifest(install)
    if manifest is None:
        try:  # backups a moved manifest left behind: our own patch, not SGLang's DDTREE
            check_no_orphans(install)
        except CorruptState as exc:
            return Status(state="damaged", advice=exc.message, busy=busy, **base)
        native = native_ddtree(install)
        if native:
            return Status(state="native", busy=busy, advice=(
                "this SGLang ships DDTREE itself (" + "; ".join(native) + "); use it as it is: "
                "`ddtree-patch apply` refuses to patch over it"), **base)
        plan_current = None if current_plan is None else False
        return Status(state="pristine", advice="", busy=busy, plan_current=plan_current, **base)
    states = file_states(install, manifest.changes)
    state = classify(states)
    broken = needed_backups(install, manifest.changes)[1] if states else []
    if broken:  # no revert could restore these files: say so before anyone needs it
        return Status(
            state="damaged",
            advice=broken_backups(install, broken).message,
            tool_version=manifest.tool_version,
            applied_at=manifest.applied_at,
            patched_version=manifest.sglang_version,
            files=states,
            busy=busy,
            **base,
        )
    plan_current = None
    if current_plan is not None:
        plan_current = state == "patched" and manifest.changes.plan_digest == plan_digest(
            current_plan
        )
        if tool_version is not None:
            plan_current = plan_current and manifest.tool_version == tool_version
    changed = [s.path for s in states if s.state != "patched"]
    if state == "patched":
        advice = "" if plan_current is not False else "run `ddtree-patch apply` to update the patch"
    elif state == "drifted":
        advice = (
            f"{len(changed)} patched file(s) changed since apply ({', '.join(changed)}); "
            "`ddtree-patch revert --force` restores the originals"
        )
    elif manifest.sglang_version != install.version:
        advice = (
            f"SGLang was upgraded since apply (release {manifest.sglang_version} was patched, "
            f"{install.version} is installed now): the patch is gone; run `ddtree-patch apply` "
            "to patch the new release"
        )
    else:
        advice = (
            f"SGLang {install.version} was reinstalled since apply: the patch is gone; run "
            "`ddtree-patch apply` to patch it again"
        )
    return Status(
        state=state,
        advice=advice,
        tool_version=manifest.tool_version,
        applied_at=manifest.applied_at,
        patched_version=manifest.sglang_version,
        files=states,
        busy=busy,
        plan_current=plan_current,
        **base,
    )
