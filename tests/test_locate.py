"""Finding SGLang without importing it, and the clear errors when we must not patch it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddtree_patch.errors import NotInstalled, Unsupported, UsageError
from ddtree_patch.locate import _from_probe, from_folder, from_interpreter, locate

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "mini_site"


def _site(tmp_path: Path, version: str = "0.5.15") -> Path:
    site = tmp_path / "site"
    shutil.copytree(FIXTURE, site)
    info = site / "sglang-0.5.15.dist-info"
    if version != "0.5.15":
        info = info.rename(site / f"sglang-{version}.dist-info")
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n\n")
    return site


def test_site_packages_and_package_folder_both_work(tmp_path):
    site = _site(tmp_path)
    for target in (site, site / "sglang"):
        install = from_folder(target)
        assert install.version == "0.5.15"
        assert install.package_dir == site.resolve() / "sglang"
        assert install.record == site.resolve() / "sglang-0.5.15.dist-info" / "RECORD"


def test_missing_package(tmp_path):
    with pytest.raises(NotInstalled, match="no sglang package"):
        from_folder(tmp_path)
    with pytest.raises(NotInstalled, match="does not exist"):
        from_folder(tmp_path / "nope")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(NotInstalled, match="is a file"):
        from_folder(tmp_path / "a-file")
    (tmp_path / "foo-1.0.dist-info").mkdir()
    with pytest.raises(NotInstalled, match="pip install --target"):
        from_folder(tmp_path)


def test_python_that_is_not_python(tmp_path):
    with pytest.raises(UsageError, match="exited with status 1 and printed nothing; pass a Python interpreter"):
        locate(python="/usr/bin/false")


def test_release_without_dflash_is_refused(tmp_path):
    with pytest.raises(Unsupported, match="no DFLASH") as caught:
        from_folder(_site(tmp_path, "0.5.10.post1"))
    assert caught.value.exit_code == 4


def test_newer_release_warns_and_strict_refuses(tmp_path):
    site = _site(tmp_path, "0.6.2")
    assert any("newer than" in w for w in from_folder(site).warnings)
    with pytest.raises(Unsupported, match="--strict"):
        from_folder(site, strict=True)


@pytest.mark.parametrize("version", ["0.6", "1.0", "0.5.24rc1"])
def test_versions_compare_by_pep440(tmp_path, version):
    """Two-part and pre-releases are compared as versions, never refused as "no DFLASH"."""
    install = from_folder(_site(tmp_path, version))
    assert any("newer than" in w for w in install.warnings), install.warnings


@pytest.mark.parametrize("version", ["0.5.23.post1", "0.5.12.post1", "0.5.11rc1"])
def test_a_post_or_pre_release_is_its_release(tmp_path, version):
    assert from_folder(_site(tmp_path, version)).warnings == ()


def test_a_version_that_is_not_pep440_is_left_to_the_audit(tmp_path):
    site = _site(tmp_path, "nightly-build")
    assert any("not a PEP 440 version" in w for w in from_folder(site).warnings)
    with pytest.raises(Unsupported, match="--strict"):
        from_folder(site, strict=True)


def test_two_dist_infos_in_one_site(tmp_path):
    site = _site(tmp_path)
    shutil.copytree(site / "sglang-0.5.15.dist-info", site / "sglang-0.5.14.dist-info")
    with pytest.raises(NotInstalled, match="two SGLang dist-infos"):
        from_folder(site)


def _probe(origins, dists):
    return {"python": "py", "origins": origins, "dists": dists}


def test_probe_errors():
    with pytest.raises(NotInstalled, match="not installed"):
        _from_probe(_probe([], []), False)
    two = [{"path": "/a/sglang-1.dist-info", "direct_url": "{}"}, {"path": "/b/sglang-1.dist-info", "direct_url": "{}"}]
    with pytest.raises(NotInstalled, match="two copies"):
        _from_probe(_probe(["/a/sglang"], two), False)
    editable = [{"path": "/a/sglang-1.dist-info", "direct_url": json.dumps({"dir_info": {"editable": True}})}]
    with pytest.raises(NotInstalled, match="editable"):
        _from_probe(_probe(["/src/sglang/python/sglang"], editable), False)
    elsewhere = [{"path": "/a/sglang-1.dist-info", "direct_url": "{}"}]
    with pytest.raises(NotInstalled, match="not beside its metadata"):
        _from_probe(_probe(["/src/python/sglang"], elsewhere), False)


def test_another_interpreter_is_asked_in_a_subprocess(tmp_path, monkeypatch):
    site = _site(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(site))
    install = from_interpreter(sys.executable)
    assert install.package_dir == site.resolve() / "sglang"
    assert "sglang" not in sys.modules, "locating must never import SGLang"


def test_python_and_target_together_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError):
        locate(python=sys.executable, target=tmp_path)


def test_cli_reports_one_line_and_exit_code(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "ddtree_patch", "audit", "--target", str(tmp_path)],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 3
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("error: no sglang package")
    assert len(lines) == 2 and lines[1].startswith("next: ddtree-patch audit --target")  # the message names no command


@pytest.mark.parametrize("prints,what", [
    (b"42\n", "(it printed '42')"),
    (b"{}\n", "(it printed '{}')"),
    (b"[1,2]\n", "(it printed '[1,2]')"),
    (b'{"origins": "x", "dists": 1, "python": 3}\n', "(its answer has fields of the wrong type"),
    (b'{"origins": [], "dists": [{"path": 1, "direct_url": "{}"}], "python": "p"}\n',
     "(its answer has fields of the wrong type"),
    (b"\xff\xfe not utf-8\n", "(it printed bytes that are not UTF-8)"),
])
def test_an_interpreter_that_answers_wrongly_is_named_in_one_line(tmp_path, prints, what):
    """`--python` at a program that prints something other than the probe's answer: exit 2, one
    `error:` line naming the program and what it printed, then what to run; no traceback."""
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.buffer.write({prints!r})\n")
    fake.chmod(0o755)
    for as_json in (False, True):
        done = subprocess.run([sys.executable, "-m", "ddtree_patch", "status", "--python", str(fake),
                               *(["--json"] if as_json else [])], capture_output=True, text=True)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        message = json.loads(done.stdout)["error"]["message"] if as_json else done.stderr.splitlines()[0]
        assert message.startswith(f"error: --python {fake} did not answer like a Python interpreter" if not as_json
                                  else f"--python {fake} did not answer like a Python interpreter"), message
        assert what in message and message.endswith("pass a Python interpreter (e.g. /path/to/venv/bin/python)")


def test_a_damaged_direct_url_is_named_not_a_traceback():
    damaged = [{"path": "/a/sglang-1.dist-info", "direct_url": "not json"}]
    with pytest.raises(NotInstalled, match="direct_url.json is not a JSON object .* -m pip install --force-reinstall"):
        _from_probe(_probe(["/a/sglang"], damaged), False)
    listed = [{"path": "/a/sglang-1.dist-info", "direct_url": "[1]"}]
    with pytest.raises(NotInstalled, match="the install is damaged"):
        _from_probe(_probe(["/a/sglang"], listed), False)
