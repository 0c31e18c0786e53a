"""Where an install stands: pristine, patched, drifted, stale, or interrupted.

Read-only: compares the files on disk with the hashes in the manifest (or journal).

- pristine: no manifest and no journal (the patch never ran, or was reverted).
- patched: every file the patch wrote still holds exactly the bytes it wrote.
- drifted: some files still hold the patch, others changed (hand edit, partial upgrade);
  `revert` refuses until `--force`.
- stale: nothing of the patch is left (SGLang upgraded or reinstalled since); the state is
  obsolete and `apply` patches the new files afresh.
- interrupted: a journal is left by a crashed apply/revert; the next apply/revert recovers first.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from filelock import FileLock, Timeout

from ddtree_patch import fsio
from ddtree_patch.native import native_ddtree
from ddtree_patch.model import Install, Plan
from ddtree_patch.state import (
    Changes,
    StatePaths,
    checked_path,
    load_journal,
    load_manifest,
    plan_digest,
)


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
    state: str  # "pristine" | "patched" | "drifted" | "stale" | "interrupted" | "native"
    sglang_version: str  # installed now
    state_dir: str
    advice: str  # one line: what to run next ("" when nothing to do)
    tool_version: str | None = None  # that wrote the manifest
    applied_at: str | None = None
    patched_version: str | None = None  # SGLang version the patch was applied to
    files: tuple[FileState, ...] = ()
    journal_op: str | None = None  # the interrupted operation
    busy: bool = False  # another process holds the lock right now
    plan_current: bool | None = None  # the patch on disk is exactly current_plan (None: not asked)


def file_states(install: Install, changes: Changes) -> tuple[FileState, ...]:
    """Per file the patch touched: does it hold the patched bytes, the original, or else?"""

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


def lock_is_held(install: Install) -> bool:
    """True while another apply/revert runs on this install (never creates the lock file)."""
    path = StatePaths(install).lock
    if not path.exists():
        return False
    lock = FileLock(path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return True
    except OSError:  # cannot even open it (read-only install): nobody can be writing
        return False
    lock.release()
    return False


def status(
    install: Install, current_plan: Plan | None = None, *, tool_version: str | None = None
) -> Status:
    """Report the install's state; with `current_plan`, also whether the patch on disk is it."""
    base = dict(sglang_version=install.version, state_dir=str(install.state_dir))
    busy = lock_is_held(install)
    journal = load_journal(install)
    if journal is not None:
        advice = (
            f"another ddtree-patch (pid {journal.pid}) is running {journal.op}; wait for it"
            if busy
            else f"an interrupted {journal.op} left a journal; run `ddtree-patch {journal.op}` "
            "to recover and finish (or `ddtree-patch revert` to go back to pristine)"
        )
        return Status(
            state="interrupted",
            advice=advice,
            tool_version=journal.tool_version,
            files=file_states(install, journal.changes),
            journal_op=journal.op,
            busy=busy,
            **base,
        )
    manifest = load_manifest(install)
    native = native_ddtree(install) if manifest is None else []
    if native:
        return Status(state="native", busy=busy, advice=(
            "this SGLang ships DDTREE itself (" + "; ".join(native) + "); use it as it is: "
            "`ddtree-patch apply` refuses to patch over it"), **base)
    if manifest is None:
        plan_current = None if current_plan is None else False
        return Status(state="pristine", advice="", busy=busy, plan_current=plan_current, **base)
    states = file_states(install, manifest.changes)
    state = classify(states)
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
    else:
        advice = (
            f"SGLang was reinstalled or upgraded since apply (patched {manifest.sglang_version}, "
            f"installed {install.version}); run `ddtree-patch apply` to patch it again"
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
