"""RECORD: pip's hash format, byte-exact updates, and a check that agrees with pip's distlib."""

from __future__ import annotations

import pytest

from ddtree_patch.record import parse_record, record_hash, update_record, verify_record
from tests.tiny_install import make_tiny_install

RECORD = (
    b"pkg/__init__.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\r\n"
    b"pkg/__pycache__/a.cpython-311.pyc,,\r\n"
    b"pkg/a.py,sha256=old,3\r\n"
    b"pkg/z.py,sha256=keep-me-as-is,9\r\n"
    b"pkg-1.dist-info/RECORD,,\r\n"
)


def test_hash_is_pips_urlsafe_b64_sha256_without_padding():
    # The empty file's row as pip wrote it in sglang-0.5.15.dist-info/RECORD (REQUESTED).
    assert record_hash(b"") == "sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
    assert "=" not in record_hash(b"x" * 1000).split("=", 1)[1]


def test_update_rewrites_adds_and_drops_rows_and_keeps_other_lines_byte_for_byte():
    new = update_record(
        RECORD,
        files={"pkg/a.py": b"new body\n", "pkg/m/new.py": b"x = 1\n"},
        drop={"pkg/__pycache__/a.cpython-311.pyc"},
    )
    lines = new.split(b"\r\n")
    body_hash = record_hash(b"new body\n")
    assert lines[0] == RECORD.split(b"\r\n")[0]
    assert b"pkg/z.py,sha256=keep-me-as-is,9" in lines
    assert f"pkg/a.py,{body_hash},9".encode() in lines
    assert b"pyc" not in new
    paths = [r.path for r in parse_record(new)]
    assert paths == [
        "pkg/__init__.py",
        "pkg/a.py",
        "pkg/m/new.py",
        "pkg/z.py",
        "pkg-1.dist-info/RECORD",
    ]
    assert new.endswith(b"\r\n") and b"\n" not in new.replace(b"\r\n", b"")


def test_update_quotes_odd_paths_like_csv_and_fixes_a_missing_last_newline():
    new = update_record(b"a.py,sha256=x,1", files={"b,c.py": b""})
    assert (
        new == b'a.py,sha256=x,1\n"b,c.py",sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n'
    )
    assert [r.path for r in parse_record(new)] == ["a.py", "b,c.py"]


def test_verify_reports_missing_size_and_hash(tmp_path):
    install = make_tiny_install(tmp_path)
    assert verify_record(install.record) == []
    (install.package_dir / "version.py").write_text("__version__ = '0.5.98'\n")  # same size
    (install.package_dir / "srt" / "server_args.py").write_text("short\n")
    (install.package_dir / "__init__.py").unlink()
    kinds = {p.path: p.kind for p in verify_record(install.record)}
    assert kinds == {
        "sglang/version.py": "hash",
        "sglang/srt/server_args.py": "size",
        "sglang/__init__.py": "missing",
    }


def test_verify_agrees_with_pips_vendored_distlib(tmp_path):
    database = pytest.importorskip("pip._vendor.distlib.database")
    install = make_tiny_install(tmp_path)
    (install.package_dir / "version.py").write_text("__version__ = '0.5.98'\n")
    (install.package_dir / "srt" / "__pycache__" / "server_args.cpython-311.pyc").unlink(
        missing_ok=True
    )
    dist = database.InstalledDistribution(str(install.dist_info))
    names = {"exists": "missing", "size": "size", "hash": "hash"}
    theirs = {
        (str(path).removeprefix(f"{tmp_path}/"), names[kind])
        for path, kind, _, _ in dist.check_installed_files()
    }
    ours = {(p.path, p.kind) for p in verify_record(install.record)}
    assert ours == theirs and ("sglang/version.py", "hash") in ours
