"""The install's lock: `flock` on `.ddtree-patch/sglang.lock`, a file its last holder removes.

A lock file that can be removed could be held by two processes at once (one on the removed
file, one on a new one), unless every taker checks, once it holds the lock, that its descriptor
is still the file at the path, and takes the new file otherwise. Every taker here does, so a
holder that leaves no state behind (a revert, an apply that wrote nothing) unlinks the lock file
while it still holds it, and site-packages ends as it was. The kernel drops an flock when its
process dies, so a crash never leaves the lock held.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

POLL_S = 0.05  # how often a waiter tries again


class Busy(Exception):
    """The lock stayed held by another process for the whole timeout."""


def _open(path: Path, create: bool) -> int:
    flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | (os.O_CREAT if create else 0)
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) or not path.exists():
            raise
    # a read-only mount (or another user's lock file): flock needs no write access
    return os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))


def _still_there(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)


def acquire(path: Path, timeout: float, *, shared: bool = False, create: bool = True) -> int | None:
    """Lock `path` and return the descriptor that holds it; raises Busy after `timeout` seconds.

    With `create` off (a reader), a missing lock file is no lock to take: returns None.
    """
    deadline = time.monotonic() + timeout
    mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
    while True:
        if create:
            path.parent.mkdir(exist_ok=True)
        try:
            fd = _open(path, create)
        except FileNotFoundError:
            if not create:
                return None
            continue  # the last holder removed the folder between our mkdir and open
        try:
            fcntl.flock(fd, mode)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                raise Busy(str(path)) from None
            time.sleep(POLL_S)
            continue
        except BaseException:
            os.close(fd)
            raise
        if _still_there(fd, path):
            return fd
        os.close(fd)  # we locked a file its holder removed: take the one at the path now


def release(fd: int, path: Path, *, remove: bool = False) -> None:
    """Unlock; with `remove`, first unlink the lock file (and its folder when that is empty).

    Unlinked while still held, so no taker can hold it after us; a failure to remove it (a
    read-only mount) leaves an empty file that the next taker simply uses.
    """
    try:
        if remove:
            try:
                path.unlink()
                path.parent.rmdir()
            except OSError:
                pass  # gone already, not ours to remove (the folder holds kept copies), or read-only
    finally:
        os.close(fd)
