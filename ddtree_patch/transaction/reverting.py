"""revert: refuse on drift (unless forced), journal, restore every original, verify, drop state."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ddtree_patch.errors import DDTreePatchError, Drift, Interrupted
from ddtree_patch.model import Install
from ddtree_patch.state import (
    Journal,
    Manifest,
    StatePaths,
    check_state_folder,
    checked_path,
    load_manifest,
    overwritten_folder,
    write_journal,
)
from ddtree_patch.status import classify, drift_report, file_states
from ddtree_patch.transaction.plan_check import check_writable, install_dirs
from ddtree_patch.transaction.recovery import clear_leftovers, recover_locked
from ddtree_patch.transaction.restore import (
    check_restorable,
    remove_state,
    restore_pristine,
    verify_pristine,
)
from ddtree_patch.transaction.results import RevertResult
from ddtree_patch.transaction.section import (
    DEFAULT_LOCK_TIMEOUT,
    Progress,
    Steps,
    failure,
    locked,
)
from ddtree_patch.transaction.write import now

HALF_DONE = "the revert is half done and its journal is kept: run `ddtree-patch revert` again"


def _restore_all(install: Install, manifest: Manifest, step: Steps, *, force: bool, keep: Path | None):
    done = restore_pristine(install, manifest.changes, step, force=force, keep=keep)
    step("verify the restored files")
    verify_pristine(install, manifest.changes)
    remove_state(install, step)
    return done


def revert_locked(
    install: Install, manifest: Manifest, step: Steps, *, force: bool, keep: Path | None = None
) -> RevertResult:
    step.writing = True
    step("write the journal")
    try:
        write_journal(
            install, Journal("revert", manifest.tool_version, now(), os.getpid(), manifest.changes)
        )
    except (OSError, DDTreePatchError) as exc:
        raise failure(
            exc, step.current, "nothing was changed: the install is still patched"
        ) from exc
    warnings: tuple[str, ...] = ()
    try:
        done = _restore_all(install, manifest, step, force=force, keep=keep)
    except Interrupted as exc:  # Ctrl-C: stop between two whole changes, say how to finish
        raise failure(exc, step.current, HALF_DONE) from exc
    except Exception as first:  # finish from the journal, as the next command would
        failed_at = step.current
        try:
            done = _restore_all(install, manifest, step, force=force, keep=keep)
        except Exception:
            raise failure(first, failed_at, HALF_DONE) from first
        warnings = (f"{failed_at} failed once ({first}); retried and finished",)
    return RevertResult(
        "reverted",
        tuple(done.restored),
        tuple(done.removed),
        tuple(done.forced),
        tuple(done.leftovers),
        warnings=warnings,
    )


def revert(
    install: Install,
    *,
    force: bool = False,
    progress: Progress | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> RevertResult:
    """Restore the pristine install.

    Refuses (Drift, carrying a diff per file) when patched files changed since apply, unless
    `force`. A stale state (SGLang reinstalled or upgraded since) is dropped without touching
    the package.
    """
    check_state_folder(install)  # a planted link is refused even where there is nothing to revert
    if not any(os.path.lexists(p) for p in (install.state_dir, StatePaths(install).lock)):
        return RevertResult("nothing to revert")  # never applied here: nothing to lock, read or write
    step = Steps(progress)
    dirs = install_dirs(install)
    if install.state_dir.is_dir() and not install.state_dir.is_symlink():
        dirs.add(install.state_dir)
    check_writable(dirs)
    with locked(install, lock_timeout, step):
        keep = overwritten_folder(install)  # made only if --force overwrites a hand edit
        recovered = recover_locked(install, step, force=force, keep=keep)
        kept = str(keep) if keep.exists() else None
        manifest = load_manifest(install)
        if manifest is None:
            clear_leftovers(install, step)
            if recovered is None:
                return RevertResult("nothing to revert")
            # the interrupted transaction was rolled back or finished: that was the revert
            action = "discarded stale state" if recovered.outcome == "discarded" else "reverted"
            return RevertResult(action, recovered=recovered, kept_edits=kept)
        states = file_states(install, manifest.changes)
        state = classify(states)
        if state == "stale":
            step.writing = True
            remove_state(install, step)
            return RevertResult("discarded stale state", recovered=recovered, kept_edits=kept)
        if state == "drifted" and not force:
            drift = drift_report(install, states)
            names = ", ".join(d.path for d in drift)
            raise Drift(
                f"{len(drift)} patched file(s) changed since apply: {names}; nothing was written "
                "(`ddtree-patch revert --force` restores the originals anyway)",
                drift=drift,
            )
        check_writable({checked_path(install, e.path).parent for e in manifest.changes.edited})
        check_restorable(install, manifest.changes, force=force)
        result = revert_locked(install, manifest, step, force=force, keep=keep)
        return dataclasses.replace(
            result, recovered=recovered, kept_edits=str(keep) if keep.exists() else None
        )
