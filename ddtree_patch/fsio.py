"""Every change the transaction makes to the disk goes through this module.

One place for the durable-write recipe (temp file in the same folder, fsync, `os.replace`, fsync
the folder), and one hook, `checkpoint`, called right before each change: tests set
`fault_hook` to raise or to kill the process at any chosen step and prove recovery.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

TEMP_SUFFIX = ".ddtree-tmp"

# Called as fault_hook(op, path) before each change; None in normal runs.
fault_hook: Callable[[str, Path], None] | None = None


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
    """The temp file used to write `path`: fixed name, so recovery can find and remove it."""
    return path.with_name(f".{path.name}{TEMP_SUFFIX}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    path: Path, data: bytes, *, mode: int | None = None, mtime_ns: int | None = None
) -> None:
    """Replace `path` with `data` so that a reader (or a crash) sees old bytes or new, never half.

    `mode` and `mtime_ns` are set on the temp file first, so the new file appears with them.
    """
    tmp = temp_path(path)
    checkpoint("write", tmp)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o644)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if mode is not None:
            os.chmod(tmp, mode)
        if mtime_ns is not None:
            os.utime(tmp, ns=(mtime_ns, mtime_ns))
        checkpoint("replace", path)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def set_mtime(path: Path, mtime_ns: int) -> None:
    checkpoint("utime", path)
    os.utime(path, ns=(mtime_ns, mtime_ns))


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
    shutil.rmtree(path)
    fsync_dir(path.parent)
