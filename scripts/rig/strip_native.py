"""Shrink a bundle's native wheel (e.g. xgrammar) to what an engine loads, so the bundle fits a device call.

    python -m scripts.rig.strip_native .gpurig-0.5.17/whl/xgrammar-*.whl            # rewrite in place
    python -m scripts.rig.strip_native .gpurig-0.5.17/whl/xgrammar-*.whl --dry-run  # only report sizes

xgrammar 0.2.1's wheel is 43 MB: a 65 MB static library (`lib/*.a`, for building against it) and a
53 MB extension, 51 MB of which are symbols. A running engine needs neither the library, the C
headers (`include/`) nor the symbols: this drops those members and strips every `.so` with
`strip --strip-unneeded` (the extension goes to about 2 MB). The wheel keeps its name and version;
RECORD is rewritten and a note in the dist-info says what changed. Running it again changes nothing.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from scripts.rig.wheel import rewrite

NOTE = "DDTREE_PATCH_STRIPPED"


def dropped(name: str) -> bool:
    """Members only a build against the package uses: static libraries and C headers."""
    return name.endswith(".a") or "/include/" in name


def stripped(data: bytes, strip: str) -> bytes:
    """A shared library without the symbols a loader does not need."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lib.so"
        path.write_bytes(data)
        subprocess.run([strip, "--strip-unneeded", str(path)], check=True, capture_output=True)
        return path.read_bytes()


def strip_wheel(src: Path, out: Path, strip: str) -> tuple[int, int]:
    """Write src to out without `dropped` members and with its `.so` members stripped;
    return (members dropped, unpacked bytes saved)."""
    saved = 0

    def change(name: str, data: bytes) -> bytes:
        nonlocal saved
        if not (name.endswith(".so") or ".so." in name):
            return data
        small = stripped(data, strip)
        saved += len(data) - len(small)
        return small

    note = (b"rewritten by ddtree-patch scripts/rig/strip_native.py: static libraries (*.a) and "
            b"headers (include/) dropped, shared libraries stripped (--strip-unneeded)\n")
    gone = rewrite(src, out, dropped, NOTE, note, change)
    return len(gone), saved + sum(i.file_size for i in gone)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("wheels", type=Path, nargs="+")
    ap.add_argument("--dry-run", action="store_true", help="report the sizes, keep the wheels")
    a = ap.parse_args()
    strip = shutil.which("strip")
    if strip is None:
        print("no `strip` on PATH (binutils): cannot strip the shared libraries", file=sys.stderr)
        return 2
    for src in a.wheels:
        if not src.is_file():
            print(f"{src}: no such wheel", file=sys.stderr)
            return 2
        tmp = src.with_name(src.name + ".stripped")
        n, saved = strip_wheel(src, tmp, strip)
        print(f"{src.name}: dropped {n} files, {saved} bytes unpacked saved; wheel "
              f"{src.stat().st_size} -> {tmp.stat().st_size} bytes")
        if a.dry_run:
            tmp.unlink()
        else:
            tmp.replace(src)
    return 0


if __name__ == "__main__":
    sys.exit(main())
