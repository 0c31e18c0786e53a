"""Every change the transaction makes to the disk goes through this module.

One place for the durable-write recipe (a fresh temp file in the same folder, opened with
O_EXCL|O_NOFOLLOW under a unique name; mode and mtime set through the descriptor; fsync;
`os.replace`; fsync the folder), and two hooks for the tests:

- `fault_hook(op, path)`, called right before each change: tests raise or kill the process at
  any chosen step and prove recovery.
- `sync_hook(op, path)`, called by each fsync ("fsync" for a file, "fsync-dir" for a folder):
  tests check every replace is preceded by the file's fsync and followed by its folder's, so
  dropping either fails a test (durability cannot be seen by reading files back).
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

TEMP_SUFFIX = ".ddtree-tmp"

# Called as fault_hook(op, path) before each change; None in normal runs.
fault_hook: Callable[[str, Path], None] | None = None
# Called as sync_hook(op, path) by each fsync; None in normal runs.
sync_hook: Callable[[str, Path], None] | None = None


def checkpoint(op: str, path: Path) -> None:
    if fault_hook is not None:
        fault_hook(op, path)


def sha256_file(path: Path) -> str | None:
    """Hex sha256 of a file, or None when it does not exist."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def temp_path(path: Path) -> Path:
    """A fresh temp name for writing `path`: unique, so nobody can plant it in advance."""
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}{TEMP_SUFFIX}")


def leftover_temps(path: Path) -> list[Path]:
    """Temp files a crash left while writing `path` (recovery removes them)."""
    return sorted(path.parent.glob(f".{path.name}.*{TEMP_SUFFIX}"))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync(fd: int, path: Path) -> None:
    if sync_hook is not None:
        sync_hook("fsync", path)
    os.fsync(fd)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        if sync_hook is not None:
            sync_hook("fsync-dir", path)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    path: Path, data: bytes, *, mode: int | None = None, mtime_ns: int | None = None
) -> None:
    """Replace `path` with `data` so that a reader (or a crash) sees old bytes or new, never half.

    `mode` and `mtime_ns` are set on the temp file before its fsync, so the new file appears
    with them, durably. The temp file is created exclusively and never through a link.
    """
    tmp = temp_path(path)
    checkpoint("write", tmp)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o644)
    try:
        try:
            _write_all(fd, data)
            if mode is not None:
                os.fchmod(fd, mode)
            if mtime_ns is not None:
                os.utime(fd, ns=(mtime_ns, mtime_ns))
            _fsync(fd, tmp)
        finally:
            os.close(fd)
        checkpoint("replace", path)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _sync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        _fsync(fd, path)
    finally:
        os.close(fd)


def set_mtime(path: Path, mtime_ns: int) -> None:
    """Set a file's mtime durably (revert relies on it to make the old bytecode valid)."""
    checkpoint("utime", path)
    os.utime(path, ns=(mtime_ns, mtime_ns), follow_symlinks=False)
    _sync_file(path)


def unlink(path: Path) -> None:
    checkpoint("unlink", path)
    path.unlink()
    fsync_dir(path.parent)


def mkdir(path: Path) -> None:
    checkpoint("mkdir", path)
    path.mkdir()
    fsync_dir(path.parent)


def rmdir(path: Path) -> None:
    checkpoint("rmdir", path)
    path.rmdir()
    fsync_dir(path.parent)


def rmtree(path: Path) -> None:
    checkpoint("rmtree", path)
    if path.is_symlink():  # shutil refuses too, but say it plainly: never follow a planted link
        raise OSError(errno.ELOOP, "refusing to remove a folder through a symbolic link", str(path))
    shutil.rmtree(path)
    fsync_dir(path.parent)


def probe_writable(folder: Path) -> None:
    """Create and remove a file in `folder`: raises OSError (EROFS, EACCES...) when it cannot."""
    probe = folder / f".ddtree-probe-{os.getpid()}-{secrets.token_hex(4)}"
    checkpoint("probe", probe)
    os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600))
    probe.unlink()
