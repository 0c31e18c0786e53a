"""The command a failure or a bad state advises fits the user's own install (issue 47, 5c).

`--target` users get pip's `--target` form, `--python` users that interpreter's `-m pip`; the JSON
`error.next` is the command that helps, never the one that failed; a status that needs a command
carries an error object; --strict is mentioned only where it caused the refusal.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sglang_releases import install_release

ROOT = Path(__file__).resolve().parent.parent
MINI = ROOT / "fixtures" / "mini_site"


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtree_patch", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "DDTREE_PATCH_CACHE": "off", **(env or {})}, timeout=300)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return Path(shutil.copytree(MINI, tmp_path / "site with space"))


def _doc(done: subprocess.CompletedProcess) -> dict:
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def _corrupt_manifest(site: Path) -> None:
    (site / ".ddtree-patch" / "sglang" / "manifest.json").write_text("{not json")


@pytest.mark.parametrize("verb", ["status", "apply", "revert"])
def test_a_damaged_manifest_advises_the_target_reinstall(site: Path, verb: str) -> None:
    assert _cli("apply", "--target", str(site)).returncode == 0
    _corrupt_manifest(site)
    doc = _doc(_cli(verb, "--target", str(site), "--json"))
    reinstall = f"pip install --force-reinstall --no-deps --upgrade --target {shlex.quote(str(site))} sglang==0.5.15"
    assert doc["error"]["code"] == 8
    assert doc["error"]["next"] == reinstall  # not `ddtree-patch status`, which fails the same way
    assert f"`{reinstall}`" in doc["error"]["message"]
    human = _cli(verb, "--target", str(site))
    assert human.returncode == 8 and reinstall in human.stderr and "Traceback" not in human.stderr


def test_a_python_install_is_told_that_interpreters_pip(site: Path) -> None:
    """`--python X` finds the SGLang on X's path; the reinstall is `X -m pip ...`."""
    env = {"PYTHONPATH": str(site)}
    assert _cli("apply", "--python", sys.executable, env=env).returncode == 0
    _corrupt_manifest(site)
    for verb in ("status", "apply"):
        doc = _doc(_cli(verb, "--python", sys.executable, "--json", env=env))
        reinstall = f"{shlex.quote(sys.executable)} -m pip install --force-reinstall --no-deps sglang==0.5.15"
        assert doc["error"]["code"] == 8 and doc["error"]["next"] == reinstall, doc["error"]
        assert "--target" not in doc["error"]["message"]


def test_a_drifted_status_under_json_carries_an_error_object(site: Path) -> None:
    assert _cli("apply", "--target", str(site)).returncode == 0
    edited = site / "sglang" / "srt" / "server_args.py"
    edited.write_text(edited.read_text() + "# hand edit\n")
    done = _cli("status", "--target", str(site), "--json")
    doc = _doc(done)
    assert done.returncode == 1 and doc["ok"] is False and doc["state"] == "drifted"
    assert doc["error"]["code"] == 1 and "server_args.py" in doc["error"]["message"]
    assert shlex.split(doc["error"]["next"]) == ["ddtree-patch", "revert", "--force", "--target", str(site)]
    assert _doc(_cli("status", "--target", str(site), "--json"))["error"] is not None
    edited.write_text(edited.read_text().replace("# hand edit\n", ""))  # patched again: ok, no error
    doc = _doc(_cli("status", "--target", str(site), "--json"))
    assert (doc["ok"], doc["error"]) == (True, None)


def _set_version(site: Path, version: str) -> None:
    meta = site / "sglang-0.5.15.dist-info" / "METADATA"
    meta.write_text(re.sub(r"(?m)^Version: .*$", f"Version: {version}", meta.read_text()))


def test_strict_is_mentioned_only_where_it_refused(site: Path) -> None:
    _set_version(site, "0.5.10")  # a release without DFLASH: --strict has nothing to do with it
    for strict in ([], ["--strict"]):
        done = _cli("apply", "--target", str(site), *strict)
        assert done.returncode == 4 and "--strict" not in done.stderr, done.stderr
        doc = _doc(_cli("apply", "--target", str(site), *strict, "--json"))
        assert "--strict" not in doc["error"]["next"] and "sglang>=" in doc["error"]["next"]
    _set_version(site, "0.5.999")  # newer than tested: refused only because of --strict
    doc = _doc(_cli("apply", "--target", str(site), "--strict", "--json"))
    assert doc["error"]["code"] == 4 and "--strict" in doc["error"]["message"]
    assert shlex.split(doc["error"]["next"]) == ["ddtree-patch", "apply", "--target", str(site)]  # without it


@pytest.mark.slow
def test_the_real_0_5_10_is_refused_without_a_word_about_strict(tmp_path: Path) -> None:
    site = install_release("0.5.10", tmp_path / "site")
    done = _cli("apply", "--target", str(site))
    assert done.returncode == 4 and "no DFLASH" in done.stderr, done.stderr
    assert "--strict" not in done.stderr and "Traceback" not in done.stderr


def test_revert_force_says_where_the_overwritten_edits_are(site: Path) -> None:
    assert _cli("apply", "--target", str(site)).returncode == 0
    edited = site / "sglang" / "srt" / "server_args.py"
    edited.write_text(edited.read_text() + "# my hand edit\n")
    mine = edited.read_bytes()
    doc = _doc(_cli("revert", "--force", "--target", str(site), "--json"))
    kept = Path(doc["kept_edits"])
    assert doc["ok"] and doc["forced"] == ["sglang/srt/server_args.py"]
    assert (kept / "sglang" / "srt" / "server_args.py").read_bytes() == mine
    assert _cli("apply", "--target", str(site)).returncode == 0
    edited.write_text(edited.read_text() + "# again\n")
    done = _cli("revert", "--force", "--target", str(site))
    line = next(line for line in done.stdout.splitlines() if line.startswith("kept what --force overwrote"))
    assert Path(line.rsplit(" in ", 1)[1]).is_dir() and Path(line.rsplit(" in ", 1)[1]) != kept
