"""`python -m scripts.rig.strip_native` (what gpurig_compat.sh makes of a '#strip NAME' line): a native
wheel loses its static libraries and headers, its shared libraries their symbols, and stays a wheel
pip installs, whose extension still loads; a second run changes nothing."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from scripts.rig.strip_native import NOTE, strip_wheel

STRIP = shutil.which("strip")
pytestmark = pytest.mark.skipif(STRIP is None, reason="no `strip` (binutils) on this machine")
EXT = Path(sysconfig.get_config_var("DESTSHARED")) / f"_json{sysconfig.get_config_var('EXT_SUFFIX')}"


def make_wheel(folder: Path) -> Path:
    """pkg 1.0 with a Python file, a real extension module (the stdlib's _json), a static library and a header."""
    members = {"pkg/__init__.py": b"x = 1\n", f"pkg/{EXT.name}": EXT.read_bytes(),
               "pkg/lib/libpkg.a": b"!<arch>\n" + b"\0" * 5000, "pkg/include/pkg.h": b"int f(void);\n",
               "pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n",
               "pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n"}
    wheel = folder / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        z.writestr("pkg-1.0.dist-info/RECORD", "")
    return wheel


def test_a_stripped_wheel_installs_and_its_extension_loads(tmp_path: Path) -> None:
    if not EXT.is_file():
        pytest.skip(f"this Python has no shared {EXT.name}")
    src, out = make_wheel(tmp_path), tmp_path / "out" / "pkg-1.0-py3-none-any.whl"
    out.parent.mkdir()
    dropped, saved = strip_wheel(src, out, STRIP)
    assert dropped == 2 and saved >= 5000
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        assert names == {"pkg/__init__.py", f"pkg/{EXT.name}", "pkg-1.0.dist-info/METADATA",
                         "pkg-1.0.dist-info/WHEEL", f"pkg-1.0.dist-info/{NOTE}", "pkg-1.0.dist-info/RECORD"}
        rows = {r[0]: r[1:] for r in csv.reader(io.StringIO(z.read("pkg-1.0.dist-info/RECORD").decode()))}
        for name in names - {"pkg-1.0.dist-info/RECORD"}:
            data = z.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert rows[name] == [f"sha256={digest}", str(len(data))], name
        assert len(z.read(f"pkg/{EXT.name}")) <= EXT.stat().st_size
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                    "--target", str(target), str(out)], check=True)
    probe = ("import importlib.machinery as m, importlib.util as u, sys\n"
             f"loader = m.ExtensionFileLoader('_json', {str(target / 'pkg' / EXT.name)!r})\n"
             "mod = u.module_from_spec(u.spec_from_loader('_json', loader)); loader.exec_module(mod)\n"
             "print(mod.scanstring('\"ok\"', 1))\n")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "('ok', 4)" in res.stdout, res.stderr

    again = tmp_path / "again" / out.name
    again.parent.mkdir()
    assert strip_wheel(out, again, STRIP) == (0, 0)
    with zipfile.ZipFile(out) as a, zipfile.ZipFile(again) as b:
        assert {n: a.read(n) for n in a.namelist()} == {n: b.read(n) for n in b.namelist()}
