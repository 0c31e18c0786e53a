"""The state folder beside the package: manifest, journal and backups, readable by a person.

Layout (all under `site-packages/.ddtree-patch/`):

    sglang.lock                     the lock file (zero bytes; removed with the last of the state)
    sglang/manifest.json            what the applied patch changed (written last by apply)
    sglang/journal.json             present only while a transaction runs, or after a crash
    sglang/original/<path>          pristine copy of every file the patch rewrote or moved away
    sglang/patched/<path>           the bytes the patch wrote (so drift can be shown as a diff)

`<path>` is the file's path relative to site-packages (`sglang/srt/...`,
`sglang-X.dist-info/RECORD`), so `diff -r .ddtree-patch/sglang/original/sglang sglang` works.
Manifest and journal name files the same way. Every path read back from them is checked to
stay inside the sglang package (or to be its RECORD) before the tool touches it, files it
added must lie in the drop-in folder, and the state folder itself (and everything in it, the
lock included) must be plain folders and files, no links: so a tampered state cannot make the
tool read, write or delete anywhere else.

The state belongs to one release, named by its dist-info: a manifest or journal whose RECORD is
another `sglang-*.dist-info` (`pip install -U sglang` since) describes files that are gone, so it
is stale (`same_release`), never "outside the package".

While patched, the dist-info RECORD lists every state file apply leaves (`state_files`), so
`pip uninstall sglang` (and the uninstall inside `pip install -U`) removes them with the package;
revert puts the original RECORD back byte for byte. A `pip install --target DIR --upgrade`
replaces folders without reading RECORD: its state survives and `status` says stale.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import shlex
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar, get_type_hints

from ddtree_patch import fsio
from ddtree_patch.dropins import DROPIN_ROOT
from ddtree_patch.errors import CorruptState
from ddtree_patch.model import Install, Plan

SCHEMA = 1
_Loaded = TypeVar("_Loaded")  # what a state file is loaded as: a Manifest or a Journal


@dataclass(frozen=True)
class EditedEntry:
    """A package file the patch rewrote."""

    path: str
    sha256_before: str
    sha256_after: str
    size_before: int
    size_after: int
    mode: int  # permission bits of the original, restored on revert
    mtime_ns: int  # mtime of the original, restored so its old bytecode is valid again


@dataclass(frozen=True)
class AddedEntry:
    """A file the patch dropped into the package."""

    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class BytecodeEntry:
    """A `__pycache__/*.pyc` of a rewritten module, moved into the backups by apply."""

    path: str
    sha256: str


@dataclass(frozen=True)
class RecordEntry:
    """The dist-info RECORD, rewritten with the new hashes."""

    path: str
    sha256_before: str
    sha256_after: str
    mode: int
    mtime_ns: int


@dataclass(frozen=True)
class Changes:
    """Everything one apply changes; the journal lists it before the first write."""

    plan_digest: str
    edited: tuple[EditedEntry, ...] = ()
    added: tuple[AddedEntry, ...] = ()
    created_dirs: tuple[str, ...] = ()  # parents first
    bytecode: tuple[BytecodeEntry, ...] = ()
    record: RecordEntry | None = None


@dataclass(frozen=True)
class Manifest:
    tool_version: str
    sglang_version: str
    python: str  # the interpreter that ran the tool
    applied_at: str  # ISO 8601, UTC
    changes: Changes
    schema: int = SCHEMA


@dataclass(frozen=True)
class Journal:
    op: str  # "apply" | "revert"
    tool_version: str
    started_at: str
    pid: int
    changes: Changes
    schema: int = SCHEMA


def plan_digest(plan: Plan) -> str:
    """Identity of a plan's content: same digest, same bytes written."""
    digest = hashlib.sha256()
    for e in sorted(plan.edits, key=lambda e: e.path):
        digest.update(f"edit {e.path} {_sha(e.before)} {_sha(e.after)}\n".encode())
    for a in sorted(plan.added, key=lambda a: a.path):
        digest.update(f"add {a.path} {_sha(a.data)}\n".encode())
    return digest.hexdigest()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def python_description() -> str:
    return f"{platform.python_implementation()} {platform.python_version()}"


@dataclass(frozen=True)
class StatePaths:
    """Where the state of one install lives."""

    install: Install
    root: Path = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", self.install.state_dir)

    @property
    def lock(self) -> Path:
        return self.root.parent / f"{self.root.name}.lock"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def journal(self) -> Path:
        return self.root / "journal.json"

    def original(self, rel: str) -> Path:
        return self.root / "original" / rel

    def patched(self, rel: str) -> Path:
        return self.root / "patched" / rel


def package_prefix(install: Install) -> str:
    """The package folder relative to site-packages, as a posix path (normally `sglang`)."""
    return install.package_dir.relative_to(install.site_packages).as_posix()


def site_path(install: Install, package_rel: str) -> str:
    """A plan path (relative to the package) as a state path (relative to site-packages)."""
    return f"{package_prefix(install)}/{package_rel}"


def record_rel(install: Install) -> str | None:
    if install.record is None:
        return None
    return install.record.relative_to(install.site_packages).as_posix()


# The RECORD of some sglang release beside the package: what a manifest may name as its RECORD.
_RECORD_NAME = re.compile(r"sglang-[A-Za-z0-9_.+!-]+\.dist-info/RECORD", re.IGNORECASE)


def same_release(install: Install, changes: Changes) -> bool:
    """Was this state written for the release installed now (same dist-info RECORD, or both without one)?"""
    current = record_rel(install) if install.record is not None and install.record.is_file() else None
    return (changes.record.path if changes.record else None) == current


def reinstall_command(install: Install) -> str:
    """The pip command that puts this release back into exactly this install (the wheel is whole).

    Found through an interpreter: its own `-m pip`. A folder (`--target`): pip's `--target` mode,
    which replaces folders only with `--upgrade`.
    """
    release = f"sglang=={install.version}"
    if install.python:
        return f"{shlex.quote(install.python)} -m pip install --force-reinstall --no-deps {release}"
    site = shlex.quote(str(install.site_packages))
    return f"pip install --force-reinstall --no-deps --upgrade --target {site} {release}"


def check_state_folder(install: Install) -> None:
    """Refuse a state folder that is, or holds, a link (or a hard-linked lock file).

    Checked before the lock file is opened and before any state is read, so a planted link can
    never make the tool write, truncate or delete outside site-packages.
    """
    top = install.site_packages / ".ddtree-patch"
    lock = StatePaths(install).lock
    for path in (top, install.state_dir, lock):
        if path.is_symlink():
            raise CorruptState(
                f"{path} is a symbolic link; the state folder must be a plain folder. Nothing was "
                f"changed: remove the link (and check who planted it), then run this again",
                next=_remove(path),
            )
    if top.exists() and not top.is_dir():
        raise CorruptState(f"{top} is not a folder; remove it, then run this again", next=_remove(top))
    if lock.exists() and lock.stat().st_nlink > 1:
        raise CorruptState(
            f"{lock} has other hard links; remove it, then run this again", next=_remove(lock)
        )
    if not install.state_dir.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(install.state_dir):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                raise CorruptState(
                    f"{path} is a symbolic link; the state folder holds only plain files. "
                    "Nothing was changed: remove the link, then run this again",
                    next=_remove(path),
                )


def _remove(path: Path) -> str:
    """`rm` of a planted link or file (never of a folder's content: rm without -r)."""
    return f"rm {shlex.quote(str(path))}"


@functools.lru_cache(maxsize=32)
def _resolved(root: Path) -> Path:
    return root.resolve()


def checked_path(install: Install, rel: str, *, record: bool = False) -> Path:
    """The absolute path of `rel` (relative to site-packages) after proving it stays inside.

    Accepts only a plain relative posix path under the package folder (or, with `record`, exactly
    the install's RECORD); symlinks that lead elsewhere are refused too.
    """
    pure = PurePosixPath(rel)
    bad = (
        not rel
        or "\\" in rel
        or "\x00" in rel
        or pure.is_absolute()
        or any(part in ("", ".", "..") for part in rel.split("/"))
    )
    if record:
        inside = rel == record_rel(install)
    else:
        root_parts = PurePosixPath(package_prefix(install)).parts
        inside = pure.parts[: len(root_parts)] == root_parts and len(pure.parts) > len(root_parts)
    if bad or not inside:
        raise CorruptState(f"state names a path outside the sglang package: {rel!r}")
    path = install.site_packages / rel
    root = install.record.parent if record else install.package_dir
    if not path.resolve().is_relative_to(_resolved(root)):
        raise CorruptState(f"state path {rel!r} leads outside the sglang package through a link")
    return path


# --- JSON (de)serialisation: plain dicts a person can read, checked field by field on load ---


def _mode_out(d: dict[str, Any]) -> dict[str, Any]:
    if "mode" in d:
        d["mode"] = oct(d["mode"])
    return d


def changes_to_json(changes: Changes) -> dict[str, Any]:
    return {
        "plan_digest": changes.plan_digest,
        "edited": [_mode_out(asdict(e)) for e in changes.edited],
        "added": [asdict(a) for a in changes.added],
        "created_dirs": list(changes.created_dirs),
        "bytecode": [asdict(b) for b in changes.bytecode],
        "record": _mode_out(asdict(changes.record)) if changes.record else None,
    }


def _entry(cls: type, raw: Any, what: str) -> Any:
    try:
        values = dict(raw)
        if "mode" in values:
            values["mode"] = int(values["mode"], 8)
        entry = cls(**values)
    except (TypeError, ValueError) as exc:
        raise CorruptState(f"{what}: bad entry {raw!r} ({exc})") from exc
    for name, kind in cls.__annotations__.items():
        value = getattr(entry, name)
        if (kind == "str" and not isinstance(value, str)) or (
            kind == "int" and (not isinstance(value, int) or isinstance(value, bool))
        ):
            raise CorruptState(f"{what}: field {name!r} of {raw!r} has the wrong type")
    return entry


def changes_from_json(install: Install, raw: Any, what: str) -> Changes:
    """Parse and check a `changes` object: types, and every path stays inside the package."""
    try:
        changes = Changes(
            plan_digest=str(raw["plan_digest"]),
            edited=tuple(_entry(EditedEntry, e, what) for e in raw["edited"]),
            added=tuple(_entry(AddedEntry, a, what) for a in raw["added"]),
            created_dirs=tuple(str(d) for d in raw["created_dirs"]),
            bytecode=tuple(_entry(BytecodeEntry, b, what) for b in raw["bytecode"]),
            record=_entry(RecordEntry, raw["record"], what) if raw["record"] else None,
        )
    except (KeyError, TypeError) as exc:
        raise CorruptState(f"{what}: missing or malformed field ({exc})") from exc
    for rel in (
        [e.path for e in changes.edited]
        + [a.path for a in changes.added]
        + [b.path for b in changes.bytecode]
        + list(changes.created_dirs)
    ):
        checked_path(install, rel)
    dropins = f"{package_prefix(install)}/{DROPIN_ROOT}/"
    for rel in [a.path for a in changes.added] + list(changes.created_dirs):
        if not (rel + "/").startswith(dropins):
            raise CorruptState(f"{what}: names {rel!r} as added, outside the drop-in folder {dropins}")
    if changes.record:
        if not _RECORD_NAME.fullmatch(changes.record.path):
            raise CorruptState(f"{what}: {changes.record.path!r} is not an sglang RECORD")
        if same_release(install, changes):
            checked_path(install, changes.record.path, record=True)
    return changes


def damaged_advice(install: Install) -> str:
    """What to do about a state the tool cannot trust: never "delete it" while files are patched."""
    folder = shlex.quote(str(install.state_dir))
    return (
        f"nothing was changed. Do not delete {install.state_dir}: its backups may be the only copy of "
        f"the original files. Get a pristine SGLang back with `{reinstall_command(install)}`, then "
        f"move the folder aside if pip left it (`mv {folder} {folder}.damaged`), then run "
        "`ddtree-patch apply`"
    )


def damaged(what: str, install: Install) -> CorruptState:
    """A state the tool cannot trust: what is wrong, the advice, and the reinstall as `next`."""
    return CorruptState(f"{what}; {damaged_advice(install)}", next=reinstall_command(install))


@functools.cache
def state_scalars(cls: type) -> dict[str, type]:
    """The fields of a state record other than its change list, each with its type: str or int.
    Another type is refused here, so a new field cannot be read back unconverted."""
    hints = get_type_hints(cls)
    out = {f.name: hints[f.name] for f in fields(cls) if f.name != "changes"}
    odd = {name: kind for name, kind in out.items() if kind not in (str, int)}
    if odd:
        raise TypeError(f"{cls.__name__}: state fields must be str or int, not {odd}")
    return out


def _load_state_file(install: Install, path: Path, name: str, cls: type[_Loaded]) -> _Loaded | None:
    """The manifest or journal at `path` as a `cls`, None where there is none: each field from the JSON
    as its annotated type (str, int), the changes checked.

    Unreadable JSON, another schema, a missing field, a malformed value or a bad change list:
    damaged state.
    """
    check_state_folder(install)
    what = f"{name} {path}"
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise damaged(f"{what} is unreadable ({exc})", install) from exc
    if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
        raise damaged(f"{what} has an unknown schema", install)
    try:
        values = {name: kind(raw[name]) for name, kind in state_scalars(cls).items()}
        return cls(**values, changes=changes_from_json(install, raw["changes"], what))
    except KeyError as exc:
        raise damaged(f"{what} lacks field {exc}", install) from exc
    except (TypeError, ValueError) as exc:
        raise damaged(f"{what} is malformed ({exc})", install) from exc
    except CorruptState as exc:
        raise damaged(exc.message, install) from exc


def load_manifest(install: Install) -> Manifest | None:
    return _load_state_file(install, StatePaths(install).manifest, "manifest", Manifest)


def load_journal(install: Install) -> Journal | None:
    path = StatePaths(install).journal
    journal = _load_state_file(install, path, "journal", Journal)
    if journal is not None and journal.op not in ("apply", "revert"):
        raise damaged(f"journal {path} names an unknown operation {journal.op!r}", install)
    return journal


def _write_state_file(path: Path, record: Manifest | Journal) -> None:
    """`record` as the JSON `_load_state_file` reads: the schema, its fields in order, the changes."""
    fields = {f: getattr(record, f) for f in record.__annotations__ if f not in ("schema", "changes")}
    body = {"schema": record.schema, **fields, "changes": changes_to_json(record.changes)}
    fsio.write_atomic(path, (json.dumps(body, indent=2, sort_keys=False) + "\n").encode("utf-8"))


def write_manifest(install: Install, manifest: Manifest) -> None:
    _write_state_file(StatePaths(install).manifest, manifest)


def write_journal(install: Install, journal: Journal) -> None:
    _write_state_file(StatePaths(install).journal, journal)


# --- Reading the pristine package while it is patched (for the engine) ---


@dataclass(frozen=True)
class PristineView:
    """The package as it was before any patch, read without changing the disk.

    The engine plans from this view: while the install is patched (or a transaction was
    interrupted), rewritten files are read from their backups and files the patch added are
    reported as `added`, so a plan built on a patched install equals the plan of the pristine one.
    """

    install: Install
    originals: dict[str, Path]  # package-relative path -> backup file
    added: frozenset[str]  # package-relative paths of files the patch put there

    def read(self, package_rel: str) -> bytes:
        backup = self.originals.get(package_rel)
        return (backup or self.install.package_dir / package_rel).read_bytes()


def pristine_view(install: Install) -> PristineView:
    """Raises CorruptState (damaged) where the pristine bytes cannot be had: a file the patch
    changed (patched, or edited since) whose backup is missing or wrong, or backups left without
    a manifest or journal. Reading such a file from the disk would plan from patched bytes (and
    take our own DDTREE member for SGLang's)."""
    journal = load_journal(install)
    manifest = load_manifest(install)
    changes = journal.changes if journal else manifest.changes if manifest else None
    if changes is None:
        check_no_orphans(install)
        return PristineView(install, {}, frozenset())
    if not same_release(install, changes):  # stale after an upgrade: nothing of it is left
        return PristineView(install, {}, frozenset())
    backups, broken = needed_backups(install, changes)
    if broken:
        raise broken_backups(install, broken)
    prefix = package_prefix(install) + "/"
    originals = {rel.removeprefix(prefix): path for rel, path in backups.items() if rel.startswith(prefix)}
    added = frozenset(
        a.path.removeprefix(prefix)
        for a in changes.added
        if fsio.sha256_file(checked_path(install, a.path)) == a.sha256
    )
    return PristineView(install, originals, added)


def needed_backups(install: Install, changes: Changes) -> tuple[dict[str, Path], list[str]]:
    """The backup of every file (RECORD too) that no longer holds its original bytes, and those
    of them whose backup is missing or differs from the manifest's hash (no revert can restore
    them: the state is damaged)."""
    paths = StatePaths(install)
    entries = [(e.path, e.sha256_before, False) for e in changes.edited]
    if changes.record and same_release(install, changes):
        entries.append((changes.record.path, changes.record.sha256_before, True))
    backups, broken = {}, []
    for rel, before, is_record in entries:
        if fsio.sha256_file(checked_path(install, rel, record=is_record)) == before:
            continue
        backup = paths.original(rel)
        found = fsio.sha256_file(backup)
        if found == before:
            backups[rel] = backup
        else:
            broken.append(f"{rel} ({'missing' if found is None else 'damaged'}: {backup})")
    return backups, broken


def broken_backups(install: Install, broken: list[str]) -> CorruptState:
    return damaged(
        f"the backup of {len(broken)} file(s) is missing or damaged, so they cannot be restored: "
        f"{', '.join(broken)}",
        install,
    )


def install_state(install: Install) -> str:
    """The state an apply or revert moves on (manifest and journal), as one digest.

    Taken before planning (`Plan.base`): a plan built while the install was patched describes
    that install, and is stale once a revert (or another apply) ran.
    """
    paths = StatePaths(install)
    check_state_folder(install)
    digest = hashlib.sha256()
    for path in (paths.manifest, paths.journal):
        digest.update(f"{path.name} {fsio.sha256_file(path) or '-'}\n".encode())
    return digest.hexdigest()


def state_files(install: Install, changes: Changes) -> list[str]:
    """The files an apply leaves in the state folder (and the lock), relative to site-packages.

    RECORD lists them, so `pip uninstall sglang` removes them with the package. The journal is
    not listed: it is gone when apply ends.
    """
    paths = StatePaths(install)
    files = [paths.lock, paths.manifest]
    files += [paths.original(e.path) for e in changes.edited]
    files += [paths.original(b.path) for b in changes.bytecode]
    current_record = record_rel(install)
    if current_record is not None and install.record.is_file():
        files.append(paths.original(current_record))
    files += [paths.patched(e.path) for e in changes.edited]
    files += [paths.patched(a.path) for a in changes.added]
    return sorted(f.relative_to(install.site_packages).as_posix() for f in files)


def overwritten_folder(install: Install) -> Path:
    """A new folder beside the state for the bytes `revert --force` overwrites (hand edits).

    Named for the time, files under their site-packages path (`diff -r` against site-packages
    works); never read back, never removed by the tool: the user's to keep or delete.
    """
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = install.state_dir.with_name(f"{install.state_dir.name}.overwritten-{stamp}")
    folder, n = base, 1
    while os.path.lexists(folder):
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    return folder


def check_no_orphans(install: Install) -> None:
    """Refuse (damaged) backups left without a manifest or journal that differ from the disk."""
    orphans = orphan_backups(install)
    if orphans:
        raise damaged(
            f"{StatePaths(install).root} holds backups but no manifest or journal, and "
            f"{len(orphans)} file(s) differ from them ({', '.join(orphans[:3])}"
            f"{', ...' if len(orphans) > 3 else ''})",
            install,
        )


def orphan_backups(install: Install) -> list[str]:
    """Backups left without a manifest or journal that differ from the file on disk now.

    Such a backup may be the only copy of an original (a state folder someone half deleted, or
    moved the manifest away from): the tool must never delete it as debris.
    """
    root = StatePaths(install).root / "original"
    if not root.is_dir():
        return []
    orphans = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if "/__pycache__/" in rel:  # bytecode is rebuilt from the source: never the only copy
            continue
        on_disk = install.site_packages / rel
        if fsio.sha256_file(path) != (fsio.sha256_file(on_disk) if on_disk.is_file() else None):
            orphans.append(rel)
    return orphans
