"""apply, revert and recover: all-or-nothing writes of a Plan into an installed SGLang.

apply: stage and compile every file in memory, check the folders are writable, take the lock,
recover a crashed transaction, then write the journal (the full list of intended changes), back
up every original, replace each file atomically, update RECORD, move stale bytecode away, verify,
write the manifest, and remove the journal. Any error rolls back to the pristine install and is
re-raised naming the step. A crash (kill, power loss) leaves the journal; the next apply or revert
finishes or rolls back from it before doing anything else.

revert: refuse when patched files changed since apply (unless forced), journal, restore every
original byte (and mtime, so the original bytecode is valid again), delete added files, restore
RECORD, verify against the pre-patch hashes, then delete the state.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock, Timeout

from ddtree_patch import fsio
from ddtree_patch.compiled import check_compiles
from ddtree_patch.errors import (
    CorruptState,
    DDTreePatchError,
    Drift,
    EngineError,
    LockHeld,
    PlanMismatch,
    ReadOnly,
    VerifyFailed,
    WriteFailed,
)
from ddtree_patch.model import Install, Plan
from ddtree_patch.record import update_record
from ddtree_patch.state import (
    AddedEntry,
    BytecodeEntry,
    Changes,
    EditedEntry,
    Journal,
    Manifest,
    RecordEntry,
    StatePaths,
    checked_path,
    load_journal,
    load_manifest,
    plan_digest,
    pristine_view,
    python_description,
    site_path,
    write_journal,
    write_manifest,
)
from ddtree_patch.status import classify, drift_report, file_states

DEFAULT_LOCK_TIMEOUT = 10.0  # seconds a second apply/revert waits before giving up

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Recovery:
    """What the recovery of an interrupted transaction did."""

    op: str  # the interrupted operation: "apply" | "revert"
    outcome: str  # "rolled back" (to pristine) | "completed"


@dataclass(frozen=True)
class ApplyResult:
    action: str  # "applied" | "unchanged" | "reapplied"
    tool_version: str
    sglang_version: str
    edited: tuple[str, ...]  # paths relative to site-packages
    added: tuple[str, ...]
    state_dir: str
    recovered: Recovery | None = None
    previous_tool_version: str | None = None  # set when an older patch was reverted first
    discarded_stale: bool = False  # an obsolete manifest (SGLang reinstalled) was dropped
    warnings: tuple[str, ...] = ()  # e.g. the DDTree worker does not fit this release (worker_fit)


@dataclass(frozen=True)
class RevertResult:
    action: str  # "reverted" | "nothing to revert" | "discarded stale state"
    restored: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    forced: tuple[str, ...] = ()  # drifted files overwritten because of force
    leftovers: tuple[str, ...] = ()  # folders the patch created that now hold others' files
    recovered: Recovery | None = None
    warnings: tuple[str, ...] = ()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- checks that write nothing ------------------------------------------------------------


def _stage(plan: Plan) -> None:
    """Refuse a plan whose Python files do not compile or whose paths repeat or escape."""
    seen: set[str] = set()
    files = [(e.path, e.after) for e in plan.edits] + [(a.path, a.data) for a in plan.added]
    for path, data in files:
        if path in seen:
            raise EngineError(f"the plan names {path} twice")
        seen.add(path)
        try:
            checked_path(plan.install, site_path(plan.install, path))
        except CorruptState as exc:
            raise EngineError(f"the plan names a path outside the package: {path!r}") from exc
        if path.endswith(".py"):
            check_compiles(path, data)


def _nearest_existing(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


def _check_writable(install: Install, dirs: set[Path]) -> None:
    """Detect a read-only install before writing anything: permission bits, then a probe file."""
    for folder in sorted({_nearest_existing(d) for d in dirs}):
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ReadOnly(f"{folder} is not writable by this user; nothing was written")
        probe = folder / f".ddtree-probe-{os.getpid()}"
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            probe.unlink()
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise ReadOnly(
                    f"{folder} is not writable ({exc.strerror}); nothing was written"
                ) from exc
            raise WriteFailed(
                f"cannot write in {folder} ({exc.strerror}); nothing was written"
            ) from exc


def _install_dirs(install: Install) -> set[Path]:
    dirs = {install.site_packages, install.package_dir}
    if install.dist_info is not None:
        dirs.add(install.dist_info)
    return dirs


@contextmanager
def _locked(install: Install, timeout: float) -> Iterator[None]:
    paths = StatePaths(install)
    try:
        paths.lock.parent.mkdir(exist_ok=True)
    except OSError as exc:
        raise ReadOnly(f"cannot create {paths.lock.parent} ({exc.strerror})") from exc
    lock = FileLock(paths.lock, timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise LockHeld(
            f"another ddtree-patch is working on {install.site_packages} (lock {paths.lock} "
            f"held for over {timeout:g}s); let it finish, then run this again"
        ) from None
    try:
        yield
    finally:
        lock.release()


# --- the steps -----------------------------------------------------------------------------


class _Steps:
    """Names each step (for progress and for the error message of a failed one)."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.current = "start"

    def __call__(self, name: str) -> None:
        self.current = name
        if self.progress is not None:
            self.progress(name)


def _ensure_dir(path: Path) -> None:
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        fsio.mkdir(folder)


def _write_state_file(path: Path, data: bytes) -> None:
    _ensure_dir(path.parent)
    fsio.write_atomic(path, data)


def _plan_changes(install: Install, plan: Plan) -> tuple[Changes, bytes | None]:
    """Read the disk (under the lock) and list every change the plan makes; writes nothing.

    Also returns the new RECORD bytes (None without a RECORD).
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
        if not folder.is_dir():
            raise PlanMismatch(f"{folder} is a file where the plan needs a folder")
        for p in reversed(parents):
            p_rel = p.relative_to(install.site_packages).as_posix()
            if p_rel not in created:
                created.append(p_rel)
        added.append(AddedEntry(rel, _sha(a.data), len(a.data)))
    record = None
    after = None
    if install.record is not None and install.record.is_file():
        rec_path = install.record
        before = rec_path.read_bytes()
        files = {site_path(install, e.path): e.after for e in plan.edits}
        files.update({site_path(install, a.path): a.data for a in plan.added})
        after = update_record(before, files=files, drop={b.path for b in bytecode})
        st = rec_path.stat()
        record = RecordEntry(
            rec_path.relative_to(install.site_packages).as_posix(),
            _sha(before),
            _sha(after),
            stat.S_IMODE(st.st_mode),
            st.st_mtime_ns,
        )
    changes = Changes(
        plan_digest=plan_digest(plan),
        edited=tuple(edited),
        added=tuple(added),
        created_dirs=tuple(created),
        bytecode=tuple(bytecode),
        record=record,
    )
    return changes, after


def _write_patch(
    install: Install,
    plan: Plan,
    changes: Changes,
    record_data: bytes | None,
    tool_version: str,
    python: str,
    step: _Steps,
) -> None:
    """The writes of apply, in the order recovery relies on (backups before any replace)."""
    paths = StatePaths(install)
    step("create the state folder")
    _ensure_dir(paths.root)
    step("write the journal")
    write_journal(install, Journal("apply", tool_version, _now(), os.getpid(), changes))
    before = {site_path(install, e.path): e.before for e in plan.edits}
    after = {site_path(install, e.path): e.after for e in plan.edits}
    after.update({site_path(install, a.path): a.data for a in plan.added})
    for e in changes.edited:
        step(f"back up {e.path}")
        _write_state_file(paths.original(e.path), before[e.path])
    for b in changes.bytecode:
        step(f"back up {b.path}")
        _write_state_file(paths.original(b.path), checked_path(install, b.path).read_bytes())
    if changes.record is not None:
        step(f"back up {changes.record.path}")
        _write_state_file(paths.original(changes.record.path), install.record.read_bytes())
    for rel, data in after.items():
        step(f"keep a copy of the patched {rel}")
        _write_state_file(paths.patched(rel), data)
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
    _verify_patched(install, changes)
    step("write the manifest")
    write_manifest(
        install,
        Manifest(tool_version, install.version, python, _now(), changes),
    )
    step("remove the journal")
    fsio.unlink(paths.journal)


def _verify_patched(install: Install, changes: Changes) -> None:
    wrong = [s.path for s in file_states(install, changes) if s.state != "patched"]
    if wrong:
        raise VerifyFailed(f"after writing, these files do not hold the patch: {', '.join(wrong)}")


def _restore_pristine(
    install: Install, changes: Changes, step: _Steps, *, force: bool
) -> tuple[list[str], list[str], list[str], list[str]]:
    """Bring every file the changes touched back to its original bytes; idempotent.

    Files already original are left alone, so this finishes a half-done apply or revert alike.
    A file holding neither the original nor the patched bytes is overwritten only with `force`.
    Returns (restored, removed, forced, leftovers).
    """
    paths = StatePaths(install)
    restored: list[str] = []
    removed: list[str] = []
    forced: list[str] = []
    leftovers: list[str] = []

    def unexpected(rel: str) -> DDTreePatchError:
        return Drift(
            f"{rel} holds neither the original nor the patched bytes; "
            "`ddtree-patch revert --force` restores the original"
        )

    targets = [checked_path(install, e.path) for e in changes.edited]
    targets += [checked_path(install, a.path) for a in changes.added]
    targets += [checked_path(install, b.path) for b in changes.bytecode]
    if changes.record:
        targets.append(checked_path(install, changes.record.path, record=True))
    for target in targets:
        tmp = fsio.temp_path(target)
        if tmp.exists():
            step(f"remove the leftover {tmp.name}")
            fsio.unlink(tmp)

    def backup_bytes(rel: str, sha: str) -> bytes:
        backup = paths.original(rel)
        data = backup.read_bytes() if backup.is_file() else None
        if data is None or _sha(data) != sha:
            raise CorruptState(
                f"the backup of {rel} ({backup}) is missing or damaged; cannot restore it"
            )
        return data

    originals = [
        (e.path, e.sha256_before, e.sha256_after, e.mode, e.mtime_ns, False) for e in changes.edited
    ]
    if changes.record:
        r = changes.record
        originals.append((r.path, r.sha256_before, r.sha256_after, r.mode, r.mtime_ns, True))
    for rel, before, after, mode, mtime_ns, is_record in originals:
        path = checked_path(install, rel, record=is_record)
        current = fsio.sha256_file(path)
        if current == before:
            if path.stat().st_mtime_ns != mtime_ns:
                step(f"restore the time stamp of {rel}")
                fsio.set_mtime(path, mtime_ns)
            continue
        if current != after:
            if not force:
                raise unexpected(rel)
            forced.append(rel)
        data = backup_bytes(rel, before)
        step(f"restore {rel}")
        _ensure_dir(path.parent)
        fsio.write_atomic(path, data, mode=mode, mtime_ns=mtime_ns)
        restored.append(rel)
    for b in changes.bytecode:
        path = checked_path(install, b.path)
        backup = paths.original(b.path)
        if fsio.sha256_file(path) != b.sha256 and fsio.sha256_file(backup) == b.sha256:
            step(f"restore {b.path}")
            _ensure_dir(path.parent)
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
        current = fsio.sha256_file(path)
        if current is not None:
            if current != a.sha256:
                if not force:
                    raise unexpected(a.path)
                forced.append(a.path)
            step(f"remove {a.path}")
            fsio.unlink(path)
            removed.append(a.path)
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
                leftovers.append(d)
            else:
                step(f"remove {d}")
                fsio.rmdir(folder)
    return restored, removed, forced, leftovers


def _verify_pristine(install: Install, changes: Changes) -> None:
    wrong = [s.path for s in file_states(install, changes) if s.state != "original"]
    if wrong:
        raise VerifyFailed(
            f"after restoring, these files differ from the originals: {', '.join(wrong)}"
        )


def _remove_state(install: Install, step: _Steps) -> None:
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


def _clear_leftovers(install: Install, step: _Steps) -> None:
    """A state folder with neither manifest nor journal is debris of a crash: drop it."""
    paths = StatePaths(install)
    if paths.root.exists() and not paths.manifest.exists() and not paths.journal.exists():
        step("remove the debris of an earlier crash from the state folder")
        fsio.rmtree(paths.root)


def _recover(install: Install, step: _Steps) -> Recovery | None:
    """Finish or roll back a transaction a crash left behind (caller holds the lock)."""
    journal = load_journal(install)
    if journal is None:
        return None
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
        _restore_pristine(install, journal.changes, step, force=False)
    except Drift as exc:
        raise CorruptState(
            f"cannot recover the interrupted {journal.op}: {exc.message} (journal "
            f"{StatePaths(install).journal})"
        ) from exc
    _verify_pristine(install, journal.changes)
    _remove_state(install, step)
    return Recovery(journal.op, "rolled back" if journal.op == "apply" else "completed")


def _failure(exc: BaseException, step: str, outcome: str) -> BaseException:
    """The user-facing error for an exception raised at `step`."""
    if isinstance(exc, DDTreePatchError):
        return type(exc)(f"{step}: {exc.message}; {outcome}", exc.exit_code)
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        why = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        return WriteFailed(f"{step} failed: {why}{where}; {outcome}")
    return exc


# --- public entry points -----------------------------------------------------------------


def recover(
    install: Install,
    *,
    progress: Progress | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> Recovery | None:
    """Finish or roll back an interrupted transaction, if any (apply and revert do this first)."""
    _check_writable(install, _install_dirs(install))
    with _locked(install, lock_timeout):
        return _recover(install, _Steps(progress))


def _revert_locked(
    install: Install, manifest: Manifest, step: _Steps, *, force: bool
) -> RevertResult:
    step("write the journal")
    try:
        write_journal(
            install, Journal("revert", manifest.tool_version, _now(), os.getpid(), manifest.changes)
        )
    except OSError as exc:
        raise _failure(
            exc, step.current, "nothing was changed: the install is still patched"
        ) from exc
    warnings: tuple[str, ...] = ()
    try:
        restored, removed, forced, leftovers = _restore_pristine(
            install, manifest.changes, step, force=force
        )
        step("verify the restored files")
        _verify_pristine(install, manifest.changes)
        _remove_state(install, step)
    except Exception as first:  # finish from the journal, as the next command would
        failed_at = step.current
        try:
            restored, removed, forced, leftovers = _restore_pristine(
                install, manifest.changes, step, force=force
            )
            _verify_pristine(install, manifest.changes)
            _remove_state(install, step)
        except Exception:
            raise _failure(
                first,
                failed_at,
                "the revert is half done and its journal is kept: run `ddtree-patch revert` again",
            ) from first
        warnings = (f"{failed_at} failed once ({first}); retried and finished",)
    return RevertResult(
        "reverted",
        tuple(restored),
        tuple(removed),
        tuple(forced),
        tuple(leftovers),
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
    `force`. A stale state (SGLang reinstalled since) is dropped without touching the package.
    """
    step = _Steps(progress)
    dirs = _install_dirs(install)
    if install.state_dir.exists():
        dirs.add(install.state_dir)
    _check_writable(install, dirs)
    with _locked(install, lock_timeout):
        recovered = _recover(install, step)
        manifest = load_manifest(install)
        if manifest is None:
            _clear_leftovers(install, step)
            return RevertResult("nothing to revert", recovered=recovered)
        states = file_states(install, manifest.changes)
        state = classify(states)
        if state == "stale":
            _remove_state(install, step)
            return RevertResult("discarded stale state", recovered=recovered)
        if state == "drifted" and not force:
            drift = drift_report(install, states)
            names = ", ".join(d.path for d in drift)
            raise Drift(
                f"{len(drift)} patched file(s) changed since apply: {names}; nothing was written "
                "(`ddtree-patch revert --force` restores the originals anyway)",
                drift=drift,
            )
        _check_writable(
            install, {checked_path(install, e.path).parent for e in manifest.changes.edited}
        )
        result = _revert_locked(install, manifest, step, force=force)
        return RevertResult(
            result.action,
            result.restored,
            result.removed,
            result.forced,
            result.leftovers,
            recovered,
            result.warnings,
        )


def apply_plan(
    plan: Plan,
    tool_version: str,
    *,
    progress: Progress | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    python: str | None = None,
) -> ApplyResult:
    """Write `plan` into its install as one transaction; a no-op when exactly this is applied.

    The plan must be built from the pristine files (`state.pristine_view`), also when the install
    is already patched: then an older patch (other tool version or other content) is reverted and
    the plan applied in its place. `python` describes the target interpreter for the manifest
    (default: the one running the tool).
    """
    install = plan.install
    step = _Steps(progress)
    _stage(plan)
    dirs = _install_dirs(install)
    dirs.update(
        checked_path(install, site_path(install, f.path)).parent for f in [*plan.edits, *plan.added]
    )
    _check_writable(install, dirs)
    with _locked(install, lock_timeout):
        recovered = _recover(install, step)
        manifest = load_manifest(install)
        state = classify(file_states(install, manifest.changes)) if manifest else "pristine"
        if manifest is not None and state == "drifted":
            states = file_states(install, manifest.changes)
            names = ", ".join(s.path for s in states if s.state != "patched")
            raise Drift(
                f"patched files changed since apply ({names}); nothing was written "
                "(run `ddtree-patch revert --force`, then apply)",
                drift=drift_report(install, states),
            )
        _check_plan_base(plan)
        if manifest is not None and state == "patched":
            _check_plan_covers_patch(plan, manifest, tool_version)
        previous = None
        if manifest is not None and state == "patched":
            if (
                manifest.tool_version == tool_version
                and manifest.changes.plan_digest == plan_digest(plan)
            ):
                return ApplyResult(
                    "unchanged",
                    tool_version,
                    install.version,
                    tuple(e.path for e in manifest.changes.edited),
                    tuple(a.path for a in manifest.changes.added),
                    str(install.state_dir),
                    recovered,
                )
            _revert_locked(install, manifest, step, force=False)
            previous = manifest.tool_version
        elif manifest is not None:  # stale: nothing of that patch is left
            _remove_state(install, step)
        _clear_leftovers(install, step)
        changes, record_data = _plan_changes(install, plan)
        try:
            _write_patch(
                install,
                plan,
                changes,
                record_data,
                tool_version,
                python or python_description(),
                step,
            )
        except BaseException as exc:
            failed_at = step.current
            try:
                _restore_pristine(install, changes, step, force=False)
                _verify_pristine(install, changes)
                _remove_state(install, step)
            except BaseException as rollback_exc:
                raise WriteFailed(
                    f"{failed_at} failed ({exc}); rolling back failed too ({rollback_exc}); the "
                    "journal is kept: run `ddtree-patch apply` or `ddtree-patch revert` to recover"
                ) from exc
            outcome = (
                f"rolled back to the pristine install (the patch of {previous} was reverted first)"
                if previous
                else "rolled back: the install is unchanged"
            )
            error = _failure(exc, failed_at, outcome)
            if error is exc:
                raise
            raise error from exc
        return ApplyResult(
            "reapplied" if previous else "applied",
            tool_version,
            install.version,
            tuple(e.path for e in changes.edited),
            tuple(a.path for a in changes.added),
            str(install.state_dir),
            recovered,
            previous,
            manifest is not None and state == "stale",
        )


def _check_plan_covers_patch(plan: Plan, manifest: Manifest, tool_version: str) -> None:
    """Refuse a plan that would silently drop edits of the applied patch.

    An engine that scans the patched files (instead of `pristine_view`) finds nothing left to
    edit, and applying its plan would revert the edits. Same tool version: the plan must edit
    the same files from the same originals. Other version: it must share at least one edit.
    """
    applied = {e.path: e.sha256_before for e in manifest.changes.edited}
    planned = {site_path(plan.install, e.path): _sha(e.before) for e in plan.edits}
    if not applied:
        return
    if (tool_version == manifest.tool_version and planned != applied) or not (
        planned.keys() & applied.keys()
    ):
        missing = sorted(applied.keys() - planned.keys()) or sorted(applied)
        raise PlanMismatch(
            f"the plan leaves out edits of the applied patch ({', '.join(missing)}): it was built "
            "from the patched files, not the pristine ones; nothing was written"
        )


def _check_plan_base(plan: Plan) -> None:
    """The plan must describe the pristine files, not an already patched install."""
    view = pristine_view(plan.install)
    for e in plan.edits:
        try:
            base = view.read(e.path)
        except FileNotFoundError:
            raise PlanMismatch(f"{e.path} is not in the package; run the command again") from None
        if base != e.before:
            raise PlanMismatch(
                f"the plan's original of {e.path} differs from the pristine file (built from a "
                "patched or changed install?); run the command again"
            )
    for a in plan.added:
        if (plan.install.package_dir / a.path).exists() and a.path not in view.added:
            raise PlanMismatch(
                f"{a.path} already exists; the plan would overwrite a file it did not make"
            )
