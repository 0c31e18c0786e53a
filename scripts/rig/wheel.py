"""Rewrite a bundle's wheel member by member (scripts.rig.slim_sglang, scripts.rig.strip_native).

Members are dropped or changed; a note in the dist-info says what was done and RECORD is rewritten to
match, so pip installs the result. The wheel keeps its name and version, and a rewrite of a rewritten
wheel replaces the note instead of adding one.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Callable

from scripts.rig.flashinfer import record_row, record_text


def unchanged(name: str, data: bytes) -> bytes:
    return data


def rewrite(src: Path, out: Path, drop: Callable[[str], bool], note_name: str, note: bytes,
            change: Callable[[str, bytes], bytes] = unchanged) -> list[zipfile.ZipInfo]:
    """Write src to out without the members `drop` names, every other one through `change`, and
    dist-info/`note_name` holding `note`; return the dropped members."""
    with zipfile.ZipFile(src) as zin:
        infos = [i for i in zin.infolist() if not i.is_dir()]
        record = next((i.filename for i in infos if i.filename.endswith(".dist-info/RECORD")), None)
        if record is None:
            raise SystemExit(f"{src.name} has no dist-info/RECORD: not a wheel")
        note_path = record[: -len("RECORD")] + note_name
        gone = [i for i in infos if drop(i.filename)]
        rows: list[list[str]] = []
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
            for info in infos:
                if drop(info.filename) or info.filename in (record, note_path):
                    continue
                data = change(info.filename, zin.read(info))
                zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
                rows.append(record_row(info.filename, data))
            zi = zipfile.ZipInfo(note_path, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zout.writestr(zi, note, compress_type=zipfile.ZIP_DEFLATED)
            rows.append(record_row(zi.filename, note))
            zout.writestr(zin.getinfo(record), record_text(rows, record), compress_type=zipfile.ZIP_DEFLATED)
    return gone
