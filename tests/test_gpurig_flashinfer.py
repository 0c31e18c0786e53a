"""The FlashInfer bundle builder (scripts/rig/flashinfer.py) on a synthetic wheel: the slim copy
keeps the Python, the #include closure of the seeds (or the seeds alone) and the compiled modules
put into data/aot, with a RECORD pip accepts; a bundle it would overfill is left as it was."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from scripts.rig import flashinfer_aot_build
from scripts.rig import flashinfer as gf

D = "flashinfer/data/"
FILES = {
    "flashinfer/__init__.py": b"__version__ = '0.6.12'\n",
    D + "csrc/a.cu": b'#include "flashinfer/b.cuh"\n#if X\n#include <flashinfer/c.cuh>\n#endif\n',
    D + "include/flashinfer/b.cuh": b"#pragma once\n",
    D + "include/flashinfer/c.cuh": b"#pragma once\n",
    D + "include/flashinfer/unused.cuh": b"#pragma once\n",
    D + "cutlass/include/cute/big.hpp": b"// not reached\n" * 100,
}


def fake_wheel(tmp: Path) -> Path:
    path = tmp / "flashinfer_python-0.6.12-py3-none-any.whl"
    di = "flashinfer_python-0.6.12.dist-info/"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in FILES.items():
            z.writestr(name, data)
        z.writestr(di + "METADATA", "Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.6.12\n")
        z.writestr(di + "WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(di + "RECORD", "")
    return path


def test_closure_aot_and_record(tmp_path: Path) -> None:
    out, _ = gf.slim_wheel(fake_wheel(tmp_path), tmp_path, ["a.cu"], {D + "aot/m/m.so": b"\x7fELF"})
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        record = z.read("flashinfer_python-0.6.12+slim.dist-info/RECORD").decode().splitlines()
        meta = z.read("flashinfer_python-0.6.12+slim.dist-info/METADATA").decode()
        for row in record[:-1]:
            name, digest, size = row.split(",")
            data = z.read(name)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)
    assert out.name == "flashinfer_python-0.6.12+slim-py3-none-any.whl" and "Version: 0.6.12+slim" in meta
    assert {D + "csrc/a.cu", D + "include/flashinfer/b.cuh", D + "include/flashinfer/c.cuh",
            D + "aot/m/m.so", "flashinfer/__init__.py"} <= names
    assert D + "include/flashinfer/unused.cuh" not in names and D + "cutlass/include/cute/big.hpp" not in names
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    str(out)], check=True)
    assert (site / "flashinfer/data/aot/m/m.so").read_bytes() == b"\x7fELF"


def test_generator_inputs_only_keeps_the_seeds_alone(tmp_path: Path) -> None:
    out, _ = gf.slim_wheel(fake_wheel(tmp_path), tmp_path, ["a.cu"], generator_inputs_only=True)
    with zipfile.ZipFile(out) as z:
        data = {n for n in z.namelist() if n.startswith(D) and not n.endswith(".txt")}
    assert data == {D + "csrc/a.cu"}


def test_a_bundle_it_would_overfill_is_left_unchanged(tmp_path: Path, monkeypatch) -> None:
    bundle = tmp_path / "rig"
    (bundle / "whl").mkdir(parents=True)
    (bundle / "stubs" / "flashinfer").mkdir(parents=True)
    (bundle / "stubs" / "flashinfer" / "__init__.py").write_text("raise ImportError\n")
    with zipfile.ZipFile(bundle / "whl" / "sglang-0.5.15-py3-none-any.whl", "w") as z:
        z.writestr("sglang-0.5.15.dist-info/METADATA", "Requires-Dist: flashinfer_python[cu13]==0.6.12\n")
    monkeypatch.setattr(gf, "SEEDS", ("a.cu",))
    before = sorted(p.relative_to(bundle) for p in bundle.rglob("*"))
    monkeypatch.setattr(sys, "argv", ["gpurig_flashinfer.py", str(bundle), "--wheel", str(fake_wheel(tmp_path)),
                                      "--limit", "1000", "--checkout-bytes", "0"])
    assert gf.main() == 1
    assert sorted(p.relative_to(bundle) for p in bundle.rglob("*")) == before


def test_aot_build_names_every_module_per_head_dim() -> None:
    labels = flashinfer_aot_build.calls([64, 128])
    assert {"fa2_hd64", "fa3_hd64", "decode_hd128", "norm", "sampling", "quantization", "cascade"} <= set(labels)
    assert "'fa3', bf, bf, bf, i32, 128, 128" in labels["fa3_hd128"]


def test_aot_modules_refuse_a_missing_one(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no compiled module"):
        gf.aot_modules(tmp_path, ["norm"])


def test_checkout_bytes_count_what_the_device_call_copies(tmp_path: Path, tmp_path_factory) -> None:
    """Tracked files and untracked ones git does not ignore travel with the checkout; ignored ones
    (bundles, venvs) do not; outside a git checkout the fixed allowance stands."""
    run = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (tmp_path / ".gitignore").write_text(".gpurig*/\n")
    (tmp_path / "tracked.py").write_bytes(b"x" * 100)
    run("add", ".gitignore", "tracked.py")
    (tmp_path / "new.md").write_bytes(b"y" * 40)
    (tmp_path / ".gpurig-fi").mkdir()
    (tmp_path / ".gpurig-fi" / "big.whl").write_bytes(b"z" * 5000)
    assert gf.checkout_bytes(tmp_path) == 100 + 40 + len(".gpurig*/\n")
    assert gf.checkout_bytes(tmp_path_factory.mktemp("no_git")) == gf.CHECKOUT
