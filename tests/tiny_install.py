"""Install the tiny SGLang stand-in (fixtures/tiny_sglang) the way pip would, for fast tests."""

from __future__ import annotations

import compileall
import csv
import io
import shutil
from pathlib import Path

from ddtree_patch.model import Install
from ddtree_patch.record import record_hash

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "tiny_sglang" / "sglang"
VERSION = "0.5.99"


def make_tiny_install(site_packages: Path, version: str = VERSION) -> Install:
    """Copy the package, compile bytecode, write a dist-info whose RECORD lists every file."""
    site_packages.mkdir(parents=True, exist_ok=True)
    package = site_packages / "sglang"
    shutil.copytree(FIXTURE, package)
    compileall.compile_dir(package, quiet=2)
    dist_info = site_packages / f"sglang-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n"
    )
    (dist_info / "WHEEL").write_text(
        "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    (dist_info / "INSTALLER").write_text("pip\n")
    rows = []
    for path in sorted(p for p in site_packages.rglob("*") if p.is_file()):
        rel = path.relative_to(site_packages).as_posix()
        if path.suffix == ".pyc":
            rows.append([rel, "", ""])
        else:
            data = path.read_bytes()
            rows.append([rel, record_hash(data), str(len(data))])
    rows.append([f"{dist_info.name}/RECORD", "", ""])
    out = io.StringIO()
    csv.writer(out).writerows(sorted(rows))  # pip: sorted rows, csv's "\r\n" line ends
    (dist_info / "RECORD").write_bytes(out.getvalue().encode())
    return Install(site_packages, package, dist_info, version)
