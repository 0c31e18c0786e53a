"""Read the disk under the lock and list every change a plan makes (the journal's content)."""

from __future__ import annotations

import dataclasses
import hashlib
import stat

from ddtree_patch.errors import PlanMismatch
from ddtree_patch.model import Install, Plan
from ddtree_patch.record import update_record
from ddtree_patch.state import (
    AddedEntry,
    BytecodeEntry,
    Changes,
    EditedEntry,
    RecordEntry,
    checked_path,
    plan_digest,
    site_path,
    state_files,
)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def list_changes(install: Install, plan: Plan) -> tuple[Changes, bytes | None]:
    """Every change the plan makes to the disk as it is now; writes nothing.

    Refuses (PlanMismatch) when a file differs from the plan's `before` bytes or became a link.
    Also returns the new RECORD bytes (None without a RECORD): the new hashes, the added files
    and the state files apply leaves, so that pip uninstall removes all of it.
    """
    edited = []
    bytecode = []
    for e in sorted(plan.edits, key=lambda e: e.path):
        rel = site_path(install, e.path)
        path = checked_path(install, rel)
        if path.is_symlink():
            raise PlanMismatch(f"{rel} is a symbolic link; the patch only rewrites plain files")
        try:
            st = path.stat()
            on_disk = path.read_bytes()
        except FileNotFoundError:
            raise PlanMismatch(
                f"{rel} is gone since the plan was built; run the command again"
            ) from None
        if on_disk != e.before:
            raise PlanMismatch(f"{rel} changed since the plan was built; run the command again")
        edited.append(
            EditedEntry(
                rel,
                _sha(e.before),
                _sha(e.after),
                len(e.before),
                len(e.after),
                stat.S_IMODE(st.st_mode),
                st.st_mtime_ns,
            )
        )
        if path.suffix == ".py":
            cache = path.parent / "__pycache__"
            for pyc in sorted(cache.glob(f"{path.stem}.*.pyc")):
                pyc_rel = f"{rel.rsplit('/', 1)[0]}/__pycache__/{pyc.name}"
                bytecode.append(BytecodeEntry(pyc_rel, _sha(pyc.read_bytes())))
    added = []
    created: list[str] = []
    for a in sorted(plan.added, key=lambda a: a.path):
        rel = site_path(install, a.path)
        path = checked_path(install, rel)
        if path.exists() or path.is_symlink():
            raise PlanMismatch(
                f"{rel} already exists; the plan would overwrite a file it did not make"
            )
        parents = []
        folder = path.parent
        while not folder.exists():
            parents.append(folder)
            folder = folder.parent
        if not folder.is_dir() or folder.is_symlink():
            raise PlanMismatch(f"{folder} is not a plain folder where the plan needs one")
        for p in reversed(parents):
            p_rel = p.relative_to(install.site_packages).as_posix()
            if p_rel not in created:
                created.append(p_rel)
        added.append(AddedEntry(rel, _sha(a.data), len(a.data)))
    changes = Changes(
        plan_digest=plan_digest(plan),
        edited=tuple(edited),
        added=tuple(added),
        created_dirs=tuple(created),
        bytecode=tuple(bytecode),
    )
    record = None
    after = None
    if install.record is not None and install.record.is_file():
        rec_path = install.record
        before = rec_path.read_bytes()
        files = {site_path(install, e.path): e.after for e in plan.edits}
        files.update({site_path(install, a.path): a.data for a in plan.added})
        after = update_record(
            before,
            files=files,
            drop={b.path for b in bytecode},
            listed=state_files(install, changes),
        )
        st = rec_path.stat()
        record = RecordEntry(
            rec_path.relative_to(install.site_packages).as_posix(),
            _sha(before),
            _sha(after),
            stat.S_IMODE(st.st_mode),
            st.st_mtime_ns,
        )
    return dataclasses.replace(changes, record=record), after
