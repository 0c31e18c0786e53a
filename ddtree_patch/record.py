"""Read, update and check a dist-info RECORD the way pip writes and reads it.

RECORD is CSV: `path,algo=urlsafe-b64-digest-without-padding,size`, paths relative to the folder
that holds the dist-info (site-packages). pip uninstalls from it, so every file the patch adds is
listed and every file it rewrites gets its new hash and size; rows of bytecode the patch moves
away are dropped. Lines the patch does not concern are kept byte for byte (pip writes `\\r\\n`).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path


def record_hash(data: bytes, algo: str = "sha256") -> str:
    digest = hashlib.new(algo, data).digest()
    return f"{algo}=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class RecordRow:
    path: str
    hash: str  # "" for rows without one (RECORD itself, bytecode)
    size: str  # "" when absent


def _parse_line(line: bytes) -> list[str]:
    rows = list(csv.reader([line.decode("utf-8").rstrip("\r\n")]))
    return rows[0] if rows else []


def parse_record(data: bytes) -> list[RecordRow]:
    rows = []
    for line in data.splitlines():
        fields = _parse_line(line)
        if fields:
            fields += [""] * (3 - len(fields))
            rows.append(RecordRow(fields[0], fields[1], fields[2]))
    return rows


def _format_row(path: str, data: bytes | None, newline: str) -> bytes:
    out = io.StringIO()
    fields = [path, "", ""] if data is None else [path, record_hash(data), len(data)]
    csv.writer(out, lineterminator=newline).writerow(fields)
    return out.getvalue().encode("utf-8")


def update_record(
    data: bytes,
    *,
    files: Mapping[str, bytes],
    drop: Collection[str] = (),
    listed: Collection[str] = (),
) -> bytes:
    """RECORD bytes with rows for `files` (path -> new content) rewritten or added, `drop` removed,
    and `listed` paths added without hash or size (as pip lists RECORD itself: files whose bytes
    change later, listed so that pip uninstall removes them).

    New rows go where pip's sorted order puts them; all other lines stay as they were.
    """
    lines = data.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith(b"\r\n") else "\n"
    if lines and not lines[-1].endswith((b"\n", b"\r")):
        lines[-1] += newline.encode()
    out: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for line in lines:
        fields = _parse_line(line)
        path = fields[0] if fields else ""
        if path in drop:
            continue
        if path in files:
            ending = line[len(line.rstrip(b"\r\n")) :].decode()
            line = _format_row(path, files[path], ending)
            seen.add(path)
        out.append((path, line))
    known = {path for path, _ in out}
    rows = {path: files[path] for path in set(files) - seen}
    rows.update({path: None for path in set(listed) - known - set(files)})
    for path in sorted(rows):
        row = _format_row(path, rows[path], newline)
        at = next((i for i, (p, _) in enumerate(out) if p > path), len(out))
        out.insert(at, (path, row))
    return b"".join(line for _, line in out)


@dataclass(frozen=True)
class RecordProblem:
    path: str
    kind: str  # "missing" | "size" | "hash"
    expected: str
    actual: str


def verify_record(record_path: Path) -> list[RecordProblem]:
    """Check every RECORD row against the file, as pip's vendored distlib does.

    A listed file must exist; where a size is given it must match, then where a hash is given it
    must match. The RECORD row itself is skipped (it cannot hash itself).
    """
    base = record_path.parent.parent
    problems = []
    for row in parse_record(record_path.read_bytes()):
        path = base / row.path
        if path.resolve() == record_path.resolve():
            continue
        if not path.is_file():
            problems.append(RecordProblem(row.path, "missing", "file", "none"))
            continue
        data = path.read_bytes()
        if row.size and row.size != str(len(data)):
            problems.append(RecordProblem(row.path, "size", row.size, str(len(data))))
        elif row.hash:
            algo = row.hash.split("=", 1)[0]
            actual = record_hash(data, algo)
            if actual != row.hash:
                problems.append(RecordProblem(row.path, "hash", row.hash, actual))
    return problems
