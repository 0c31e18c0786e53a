"""What a read-only mount does to every write under one folder, in this process or in a CLI run.

The in-process tests and the CLI test (a subprocess: `python -m tests.read_only_mount ROOT ARGS...`)
share these two stand-ins for `os.open` and `os.mkdir`.
"""

from __future__ import annotations

import errno
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT


def read_only(root: Path, real_open: Callable[..., int], real_mkdir: Callable[..., None]) -> tuple[Callable, Callable]:
    """(open, mkdir) that fail under `root` as a read-only mount does (root passes permission bits)."""

    def open_(path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        if Path(path).is_relative_to(root) and flags & WRITES:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, mode, **kw)

    def mkdir(path: Any, mode: int = 0o777, **kw: Any) -> None:
        if Path(path).is_relative_to(root):
            if os.path.lexists(path):  # the kernel says EEXIST before EROFS
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_mkdir(path, mode, **kw)

    return open_, mkdir


@contextmanager
def read_only_mount(root: Path) -> Iterator[None]:
    real = os.open, os.mkdir
    os.open, os.mkdir = read_only(root, *real)
    try:
        yield
    finally:
        os.open, os.mkdir = real


if __name__ == "__main__":  # the CLI on a read-only ROOT: python -m tests.read_only_mount ROOT verb [options]
    from ddtree_patch.cli import main

    os.open, os.mkdir = read_only(Path(sys.argv[1]), os.open, os.mkdir)
    sys.argv = ["ddtree-patch", *sys.argv[2:]]
    main()
