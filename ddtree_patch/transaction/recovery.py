"""Finish or roll back what a crash left behind; clear only debris that holds nothing of value."""

from __future__ import annotations

from ddtree_patch import fsio
from ddtree_patch.errors import CorruptState, Drift
from ddtree_patch.model import Install
from ddtree_patch.state import (
    StatePaths,
    damaged_advice,
    load_journal,
    load_manifest,
    orphan_backups,
    same_release,
)
from ddtree_patch.status import classify, file_states
from ddtree_patch.transaction.restore import remove_state, restore_pristine, verify_pristine
from ddtree_patch.transaction.results import Recovery
from ddtree_patch.transaction.section import Steps


def recover_locked(install: Install, step: Steps, *, force: bool = False) -> Recovery | None:
    """Finish or roll back a transaction a crash left behind (caller holds the lock).

    A file someone changed since the crash is never overwritten unless `force` (revert --force).
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
        restore_pristine(install, journal.changes, step, force=force)
    except Drift as exc:
        raise CorruptState(
            f"cannot recover the interrupted {journal.op}: {exc.message} (journal "
            f"{StatePaths(install).journal})"
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
    orphans = orphan_backups(install)
    if orphans:
        raise CorruptState(
            f"{paths.root} holds backups but no manifest or journal, and {len(orphans)} file(s) "
            f"differ from them ({', '.join(orphans[:3])}{', ...' if len(orphans) > 3 else ''}); "
            + damaged_advice(install)
        )
    step("remove the debris of an earlier crash from the state folder")
    fsio.rmtree(paths.root)
