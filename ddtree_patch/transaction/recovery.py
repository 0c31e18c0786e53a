"""Finish or roll back what a crash left behind; clear only debris that holds nothing of value."""

from __future__ import annotations

from pathlib import Path

from ddtree_patch import fsio
from ddtree_patch.errors import CorruptState, Drift
from ddtree_patch.model import Install
from ddtree_patch.state import (
    StatePaths,
    check_no_orphans,
    load_journal,
    load_manifest,
    same_release,
)
from ddtree_patch.status import classify, file_states
from ddtree_patch.transaction.restore import remove_state, restore_pristine, verify_pristine
from ddtree_patch.transaction.results import Recovery
from ddtree_patch.transaction.section import Steps


def recover_locked(
    install: Install, step: Steps, *, force: bool = False, keep: Path | None = None
) -> Recovery | None:
    """Finish or roll back a transaction a crash left behind (caller holds the lock).

    A file someone changed since the crash is never overwritten unless `force` (revert --force),
    and then its bytes are kept first (in `keep`, see `restore_pristine`).
    A journal of another release (SGLang upgraded since the crash) describes files that are
    gone: its state is dropped without touching the package.
    """
    journal = load_journal(install)
    if journal is None:
        return None
    step.writing = True
    if not same_release(install, journal.changes):
        remove_state(install, step)
        return Recovery(journal.op, "discarded")
    if journal.op == "apply":
        manifest = load_manifest(install)
        if (
            manifest is not None
            and manifest.changes == journal.changes
            and classify(file_states(install, journal.changes)) == "patched"
        ):
            step("complete the interrupted apply: remove the journal")
            fsio.unlink(StatePaths(install).journal)
            return Recovery("apply", "completed")
    try:
        restore_pristine(install, journal.changes, step, force=force, keep=keep)
    except Drift as exc:
        raise CorruptState(
            f"cannot recover the interrupted {journal.op}: {exc.message} (journal "
            f"{StatePaths(install).journal})",
            next="ddtree-patch revert --force",
        ) from exc
    verify_pristine(install, journal.changes)
    remove_state(install, step)
    return Recovery(journal.op, "rolled back" if journal.op == "apply" else "completed")


def clear_leftovers(install: Install, step: Steps) -> None:
    """Drop a state folder with neither manifest nor journal, unless it still holds a backup.

    Our own crashes leave no backup without a journal (the journal goes last), so a backup that
    differs from its file means someone moved the manifest away while the files are patched:
    deleting it could lose the only copy of an original, so refuse instead.
    """
    paths = StatePaths(install)
    if not paths.root.exists() or paths.manifest.exists() or paths.journal.exists():
        return
    check_no_orphans(install)
    step("remove the debris of an earlier crash from the state folder")
    fsio.rmtree(paths.root)
