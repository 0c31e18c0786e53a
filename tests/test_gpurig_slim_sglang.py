"""The sglang wheel slimmer (scripts/rig/slim_sglang.py) on a synthetic wheel: the dropped
packages go, every other member keeps its bytes, RECORD lists exactly the members with their
hashes (names with commas quoted, as pip's csv reader needs), and a second run changes nothing."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import subprocess
import sys
import zipfile
from pathlib import Path

from scripts.rig import slim_sglang as gs

REPO = Path(__file__).resolve().parents[1]  # `python -m scripts.rig.slim_sglang` runs from here

DI = "sglang-0.5.13.dist-info/"
FILES = {
    "sglang/__init__.py": b"__version__ = '0.5.13'\n",
    "sglang/srt/speculative/spec_info.py": b"DFLASH = 1\n",
    "sglang/srt/grpc/_core.so": b"\0" * 5000,
    "sglang/srt/grpc_utils.py": b"# not under sglang/srt/grpc/\n",
    "sglang/multimodal_gen/runtime/x.py": b"x = 1\n" * 100,
    "sglang/srt/layers/moe/configs/E=8,N=512,device_name=H200.json": b"{}\n",
    DI + "METADATA": b"Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.13\n",
}


def fake_bundle(tmp: Path) -> Path:
    (tmp / "whl").mkdir(parents=True)
    with zipfile.ZipFile(tmp / "whl" / "sglang-0.5.13-cp312-cp312-manylinux_2_34_x86_64.whl", "w") as z:
        for name, data in FILES.items():
            z.writestr(name, data)
        z.writestr(DI + "RECORD", "")
    return tmp


def members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) for n in z.namelist()}


def run(bundle: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", gs.__name__, str(bundle)], capture_output=True, text=True, cwd=REPO)


def test_drops_the_packages_and_writes_a_record_pip_reads(tmp_path: Path) -> None:
    bundle = fake_bundle(tmp_path)
    proc = run(bundle)
    assert proc.returncode == 0, proc.stderr
    assert "dropped 2 files" in proc.stdout
    wheel = gs.sglang_wheel(bundle)
    got = members(wheel)
    assert sorted(got) == sorted([n for n in FILES if not n.startswith(gs.DROP)] + [DI + gs.NOTE, DI + "RECORD"])
    for name, data in FILES.items():
        if name in got:
            assert got[name] == data, name
    rows = list(csv.reader(io.StringIO(got[DI + "RECORD"].decode())))
    assert {r[0] for r in rows} == set(got)
    for name, digest, size in rows:
        if name == DI + "RECORD":
            assert (digest, size) == ("", "")
            continue
        want = base64.urlsafe_b64encode(hashlib.sha256(got[name]).digest()).rstrip(b"=").decode()
        assert (digest, int(size)) == (f"sha256={want}", len(got[name])), name
    assert '"sglang/srt/layers/moe/configs/E=8,N=512,device_name=H200.json"' in got[DI + "RECORD"].decode()


def test_a_second_run_drops_nothing_and_writes_the_same_bytes(tmp_path: Path) -> None:
    bundle = fake_bundle(tmp_path)
    assert run(bundle).returncode == 0
    first = gs.sglang_wheel(bundle).read_bytes()
    proc = run(bundle)
    assert proc.returncode == 0 and "dropped 0 files" in proc.stdout
    assert gs.sglang_wheel(bundle).read_bytes() == first


def test_dry_run_leaves_the_bundle_as_it_was(tmp_path: Path) -> None:
    bundle = fake_bundle(tmp_path)
    before = gs.sglang_wheel(bundle).read_bytes()
    proc = subprocess.run([sys.executable, "-m", gs.__name__, str(bundle), "--dry-run"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "dropped 2 files" in proc.stdout
    assert gs.sglang_wheel(bundle).read_bytes() == before
    assert sorted(p.name for p in (bundle / "whl").iterdir()) == [gs.sglang_wheel(bundle).name]
