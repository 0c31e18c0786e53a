"""Shared helpers of the transaction tests: hand-made plans, tree snapshots, fault hooks."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ddtree_patch import fsio
from ddtree_patch.model import AddedFile, FileEdit, Install, Plan
from ddtree_patch.state import install_state, pristine_view

TINY_EDITS = (
    "srt/speculative/spec_info.py",
    "srt/server_args.py",
    "srt/speculative/dflash_worker.py",
)
RELEASE_EDITS = ("srt/speculative/spec_info.py", "srt/server_args.py", "version.py")
ADDED = {
    "srt/speculative/ddtree/__init__.py": b'"""DDTree drop-in (stand-in for the tests)."""\n',
    "srt/speculative/ddtree/kernels/__init__.py": b"def build_tree(*args):\n    return None\n",
}


def handmade_plan(
    install: Install, edits: tuple[str, ...] = TINY_EDITS, marker: str = "v1"
) -> Plan:
    """A plan like the engine's: append a line to each edited file, drop two new modules in.

    Built from the pristine view, as the engine must, so it is the same on a patched install;
    records the install's state first, as the engine does (`Plan.base`).
    """
    base = install_state(install)
    view = pristine_view(install)
    file_edits = []
    for path in edits:
        before = view.read(path)
        newline = b"\r\n" if b"\r\n" in before else b"\n"
        after = before + newline + f"DDTREE_TEST_MARKER = {marker!r}".encode() + newline
        file_edits.append(FileEdit(path, before, after))
    added = [AddedFile(path, data + f"# {marker}\n".encode()) for path, data in ADDED.items()]
    return Plan(install, file_edits, added, base)


_hashes: dict[str, tuple[tuple[int, ...], str]] = {}


def _sha256(path: Path) -> str:
    """sha256 of a file, reused while its inode, size, mtime and ctime are unchanged.

    ctime moves on every write, rename onto, chmod or utime, so a reused hash is never stale.
    """
    st = path.stat()
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    cached = _hashes.get(str(path))
    if cached is None or cached[0] != key:
        cached = (key, hashlib.sha256(path.read_bytes()).hexdigest())
        _hashes[str(path)] = cached
    return cached[1]


def snapshot(root: Path, *, with_state: bool = False) -> dict[str, str]:
    """sha256 of every file and a marker for every folder under root, except the state folder
    (unless `with_state`: a full revert must leave nothing of ours behind)."""
    tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if with_state or d != ".ddtree-patch"]
        base = Path(dirpath)
        for d in dirnames:
            tree[(base / d).relative_to(root).as_posix() + "/"] = "dir"
        for f in filenames:
            path = base / f
            tree[path.relative_to(root).as_posix()] = _sha256(path)
    return tree


def reinstall(install: Install, release: Install) -> None:
    """As `pip install --force-reinstall`: remove what RECORD lists, lay `release`'s files down again."""
    shutil.rmtree(install.package_dir)
    shutil.copytree(release.package_dir, install.package_dir)
    shutil.copy2(release.record, install.record)


def copy_install(install: Install, dest: Path) -> Install:
    """A copy of the whole site-packages (state folder included) and its Install."""
    shutil.copytree(install.site_packages, dest, symlinks=True)
    dist_info = dest / install.dist_info.name if install.dist_info else None
    return Install(dest, dest / install.package_dir.name, dist_info, install.version)


class FaultAt:
    """An fsio.fault_hook that runs `action` at the n-th change (0-based), or after it too.

    The writability probes are not changes (they leave nothing behind), so they are not counted.
    """

    def __init__(
        self, n: int, action: Callable[[str, Path], None], *, persistent: bool = False
    ) -> None:
        self.n = n
        self.action = action
        self.persistent = persistent
        self.seen = 0

    def __call__(self, op: str, path: Path) -> None:
        if op == "probe":
            return
        index = self.seen
        self.seen += 1
        if index == self.n or (self.persistent and index > self.n):
            self.action(op, path)


def _eio(op: str, path: Path) -> None:
    raise OSError(errno.EIO, "injected I/O error", str(path))


@contextmanager
def failing_disk(at: int) -> Iterator[None]:
    """Every change from the `at`-th (0-based) on fails with EIO, the rollback's too: the journal is kept."""
    fsio.fault_hook = FaultAt(at, _eio, persistent=True)
    try:
        yield
    finally:
        fsio.fault_hook = None


class Recorder:
    """An fsio.fault_hook that only lists the changes, to count the steps of a clean run."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Path]] = []

    def __call__(self, op: str, path: Path) -> None:
        if op != "probe":
            self.events.append((op, path))


@contextmanager
def scratch_dir(fallback: Path) -> Iterator[Path]:
    """A folder on tmpfs where there is one (tests of write order, not of the disk's fsync)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield fallback
        return
    root = Path(tempfile.mkdtemp(prefix="ddtree-tests-", dir=shm))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
