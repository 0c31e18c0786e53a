"""Scan an install: byte prefilter, then `analyse_file` on candidates, in parallel, cached by hash.

The cache (one JSON per file result, keyed by the engine's own fingerprint, the file's path and
its sha256) makes a second audit of an unchanged install nearly free; a stat index (size, mtime)
spares re-reading the thousands of files that never mention dflash, as git's index does.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from multiprocessing import get_context
from pathlib import Path

from ddtree_patch.dropins import DROPIN_ROOT, capabilities_path
from ddtree_patch.errors import Unpatchable
from ddtree_patch.model import Install
from ddtree_patch.data.policy import default_policy
from ddtree_patch.results import FileResult

PARALLEL_MIN_FILES = 12  # below this a pool costs more than it saves
Progress = Callable[[str], None]


@dataclass
class ScanResult:
    files: list[FileResult] = field(default_factory=list)  # candidates, sorted by path
    scanned: int = 0  # .py files looked at
    cache_hits: int = 0

    @property
    def skipped(self) -> list[tuple[str, str]]:
        return [(f.path, f.skipped) for f in self.files if f.skipped]


@lru_cache(maxsize=1)
def engine_fingerprint() -> str:
    """Changes whenever the engine, its rules or its policy change (so cached results expire)."""
    digest = hashlib.sha256(sys.version.encode())
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + path.read_bytes())
    digest.update(capabilities_path().read_bytes())  # the policy decides gates from it
    return digest.hexdigest()[:20]


def cache_root() -> Path | None:
    configured = os.environ.get("DDTREE_PATCH_CACHE")
    if configured == "off":
        return None
    base = Path(configured) if configured else Path.home() / ".cache" / "ddtree-patch" / "scan"
    return base / engine_fingerprint()


def _refuse_link(package_dir: Path, entry: os.DirEntry) -> None:
    """A linked folder (its files would be skipped or lie elsewhere) or a linked module that
    mentions dflash (an edit target the patch cannot replace in place) stops the scan."""
    if not entry.is_dir():
        if not entry.name.endswith(".py"):
            return
        try:
            if b"dflash" not in Path(entry.path).read_bytes().lower():
                return
        except OSError:
            return
    rel = Path(entry.path).relative_to(package_dir.parent).as_posix()
    raise Unpatchable(
        f"{rel} is a symbolic link: ddtree-patch reads and edits only plain files and folders "
        "(pip installs no links); reinstall SGLang as plain files, then run this again"
    )


def _walk(package_dir: Path):
    stack = [package_dir]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    _refuse_link(package_dir, entry)
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        stack.append(Path(entry.path))
                elif entry.name.endswith(".py") and entry.is_file(follow_symlinks=False):
                    yield entry


def _write_json(path: Path, data) -> bool:
    """Atomically (temp file + rename, so a concurrent reader never sees half); False if unwritable."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:
        return False
    return True


class _Cache:
    def __init__(self, root: Path | None, package_dir: Path) -> None:
        self.root = root
        key = hashlib.sha256(str(package_dir).encode()).hexdigest()[:20]
        self.index_path = root / "stat" / f"{key}.json" if root else None
        self.index: dict[str, list] = {}
        if self.index_path and self.index_path.is_file():
            try:
                self.index = json.loads(self.index_path.read_text())
            except ValueError:
                self.index = {}

    def result_path(self, rel: str, sha: str) -> Path | None:
        if not self.root:
            return None
        key = hashlib.sha256(f"{rel}\0{sha}".encode()).hexdigest()
        return self.root / "files" / key[:2] / f"{key}.json"

    def load(self, rel: str, sha: str) -> FileResult | None:
        path = self.result_path(rel, sha)
        if path is None or not path.is_file():
            return None
        try:
            return FileResult.from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError):
            return None

    def store(self, rel: str, sha: str, result: FileResult) -> None:
        path = self.result_path(rel, sha)
        if path is None:
            return
        if not _write_json(path, result.to_json()):
            self.root = None  # an unwritable cache is no cache, not an error

    def save_index(self) -> None:
        if not self.index_path:
            return
        _write_json(self.index_path, self.index)


def _candidates(install: Install, cache: _Cache) -> tuple[list[tuple[str, str, bytes | None]], int]:
    """(relpath, sha256, bytes-or-None-when-unread) of files mentioning dflash; and the count looked at."""
    found: list[tuple[str, str, bytes | None]] = []
    index: dict[str, list] = {}
    scanned = 0
    prefix = len(str(install.package_dir)) + 1
    for entry in _walk(install.package_dir):
        rel = entry.path[prefix:].replace(os.sep, "/")
        if rel.startswith(DROPIN_ROOT + "/"):
            continue  # our own drop-ins: checked byte for byte by the audit, not scanned
        scanned += 1
        stat = entry.stat(follow_symlinks=False)
        known = cache.index.get(rel)
        if known and known[0] == stat.st_size and known[1] == stat.st_mtime_ns:
            index[rel] = known
            if known[2]:
                found.append((rel, known[2], None))
            continue
        data = Path(entry.path).read_bytes()
        sha = hashlib.sha256(data).hexdigest() if b"dflash" in data.lower() else ""
        index[rel] = [stat.st_size, stat.st_mtime_ns, sha]
        if sha:
            found.append((rel, sha, data))
    cache.index = index
    return sorted(found), scanned


def _analyse_job(job: tuple[str, bytes]) -> FileResult:
    from ddtree_patch.analyse import analyse_file  # libcst and the rules: only when a file is analysed

    return analyse_file(job[0], job[1], default_policy())


def _read_from(candidates: list[tuple[str, str, bytes | None]],
               originals: Mapping[str, Path]) -> list[tuple[str, str, bytes | None]]:
    """The candidates with each file of `originals` read from its backup instead."""
    found = {rel: (rel, sha, data) for rel, sha, data in candidates}
    for rel, backup in originals.items():
        data = backup.read_bytes()
        found.pop(rel, None)
        if b"dflash" in data.lower():
            found[rel] = (rel, hashlib.sha256(data).hexdigest(), data)
    return [found[rel] for rel in sorted(found)]


def scan(install: Install, progress: Progress | None = None, workers: int | None = None,
         originals: Mapping[str, Path] | None = None) -> ScanResult:
    """`originals` (package path -> backup, `state.PristineView.originals`): files a patch rewrote,
    analysed as they were before it, so a patched install scans as its preview did."""
    cache = _Cache(cache_root(), install.package_dir)
    candidates, scanned = _candidates(install, cache)
    if originals:
        candidates = _read_from(candidates, originals)
    result = ScanResult(scanned=scanned)
    results: dict[str, FileResult] = {}
    jobs: list[tuple[str, str, bytes]] = []
    for rel, sha, data in candidates:
        cached = cache.load(rel, sha)
        if cached is not None:
            results[rel] = cached
            result.cache_hits += 1
            if progress:
                progress(rel)
            continue
        if data is None:
            data = (install.package_dir / rel).read_bytes()
        jobs.append((rel, sha, data))
    workers = workers or min(os.cpu_count() or 1, 8)
    if len(jobs) >= PARALLEL_MIN_FILES and workers > 1:
        # Largest first, so no worker is left with one big file at the end.
        jobs.sort(key=lambda job: -len(job[2]))
        with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
            outputs = pool.map(_analyse_job, [(rel, data) for rel, _, data in jobs], chunksize=1)
            for (rel, sha, _), output in zip(jobs, outputs):
                results[rel] = output
                cache.store(rel, sha, output)
                if progress:
                    progress(rel)
    else:
        for rel, sha, data in jobs:
            results[rel] = output = _analyse_job((rel, data))
            cache.store(rel, sha, output)
            if progress:
                progress(rel)
    cache.save_index()
    result.files = [results[rel] for rel, _, _ in candidates]
    return result
