"""The --json contract (docs/json.md): every verb and every error prints one document on stdout
with the same envelope; exit 0 exactly when `ok`; errors carry {code, message, next}."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddtree_patch import __version__
MINI = Path(__file__).resolve().parent.parent / "fixtures" / "mini_site"

ENVELOPE = {"schema", "command", "tool_version", "sglang", "ok", "error"}


def _run(*args: str, text: bool = False) -> tuple[int, dict | str]:
    env = {**os.environ, "COLUMNS": "80", "DDTREE_PATCH_CACHE": "off"}
    argv = [sys.executable, "-m", "ddtree_patch", *args] + ([] if text else ["--json"])
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    if text:
        return done.returncode, done.stdout
    doc = json.loads(done.stdout)  # exactly one document, nothing else on stdout
    assert ENVELOPE <= doc.keys(), doc.keys()
    assert doc["schema"] == "ddtree-patch/2" and doc["tool_version"] == __version__
    assert doc["command"] == args[0]
    assert doc["sglang"] is None or set(doc["sglang"]) == {"version", "package_dir", "site_packages"}
    assert doc["ok"] is (done.returncode == 0), (done.returncode, doc)
    if doc["ok"]:
        assert doc["error"] is None
    else:
        error = doc["error"]  # every failure says why and what to run next
        assert error["code"] == done.returncode and error["message"] and error["next"], doc
    return done.returncode, doc


@pytest.fixture
def site(tmp_path):
    shutil.copytree(MINI, tmp_path / "site")
    return tmp_path / "site"


def test_every_verb_and_state(site):
    t = ("--target", str(site))
    rc, doc = _run("status", *t)
    assert rc == 0 and doc["state"] == "pristine" and "apply --dry-run" in doc["next"]
    rc, doc = _run("audit", *t)
    assert rc == 0 and doc["state"] == "pristine" and doc["sglang"]["version"] == "0.5.15"
    rc, doc = _run("apply", "--dry-run", *t)
    assert rc == 0 and doc["edits"] and not doc["up_to_date"]
    rc, doc = _run("apply", *t)
    assert rc == 0 and doc["action"] == "applied"
    edited = doc["edited"]
    rc, doc = _run("apply", "--dry-run", *t)
    assert rc == 0 and doc["up_to_date"] and doc["edits"] == [] and doc["diff"] == ""
    assert _run("apply", "--dry-run", *t, text=True) == (0, "already applied, nothing to do\n")
    rc, doc = _run("audit", *t)
    assert rc == 0 and doc["state"] == "patched"
    assert all(s["applied"] for s in doc["sites"] if s["decision"] in ("WIDEN", "EDIT"))
    rc, doc = _run("status", *t)
    assert rc == 0 and doc["state"] == "patched" and doc["patched_by"] == __version__ and "revert" in doc["next"]

    patched = site / edited[0]
    patched.write_text(patched.read_text() + "\n# a hand edit\n")
    for verb in ("status", "audit"):
        rc, doc = _run(verb, *t)
        assert rc == 1 and doc["state"] == "drifted" and "revert --force" in doc["next"], (verb, doc)
    rc, doc = _run("revert", *t)
    assert rc == 9 and doc["error"]["code"] == 9 and doc["drift"][0]["path"] == edited[0]
    assert "revert --force" in doc["error"]["next"]
    rc, doc = _run("revert", "--force", *t)
    assert rc == 0 and doc["action"] == "reverted"
    assert _run("revert", *t)[0] == 0


def test_stale_install_is_reported_by_status_and_audit(site):
    t = ("--target", str(site))
    assert _run("apply", *t)[0] == 0
    shutil.rmtree(site / "sglang")
    shutil.copytree(MINI / "sglang", site / "sglang")  # SGLang reinstalled over the patch
    for verb in ("status", "audit"):
        rc, doc = _run(verb, *t)
        assert rc == 1 and doc["state"] == "stale" and "apply" in doc["next"], (verb, doc)


def test_an_unhandled_site_is_a_json_error(site):
    path = site / "sglang" / "srt" / "speculative" / "spec_info.py"
    path.write_text(path.read_text() + '\n\ndef pick(x):\n    return {"DFLASH": 1}[x]\n')
    rc, doc = _run("audit", "--target", str(site))
    assert rc == 1 and doc["problems"] == ["1 UNHANDLED site(s)"]
    assert doc["error"]["message"] == "1 UNHANDLED site(s)" and "audit --json" in doc["error"]["next"]


@pytest.mark.parametrize("args,code", [
    (("status", "--target", "/nonexistent/site"), 3),
    (("audit", "--target", "/etc/hostname"), 3),
    (("apply", "--python", "/usr/bin/false"), 2),
    (("revert", "--bogus-option"), 2),
    (("apply", "--target", "OLD"), 4),
])
def test_errors_are_json_documents(site, args, code):
    old = site / "sglang-0.5.15.dist-info" / "METADATA"
    old.write_text(old.read_text().replace("0.5.15", "0.5.10"))
    args = tuple(str(site) if a == "OLD" else a for a in args)
    rc, doc = _run(*args)
    assert rc == code and doc["error"]["code"] == code and not doc["ok"]


def test_piped_audit_rows_never_wrap(site):
    rc, text = _run("audit", "--target", str(site), text=True)
    assert rc == 0
    rows = [line for line in text.splitlines() if line.startswith("  ")]
    assert rows and all(len(line.split("\t")) == 7 and line.split("\t")[0].split(":")[-1].isdigit() for line in rows)


def test_help_shows_flags_as_flags_and_says_what_python_does():
    env = {**os.environ, "COLUMNS": "200"}
    top = subprocess.run([sys.executable, "-m", "ddtree_patch", "--help"], capture_output=True, text=True, env=env)
    assert "--help" in top.stdout and "<bool>" not in top.stdout, top.stdout
    for verb in ("audit", "apply", "revert", "status"):
        done = subprocess.run([sys.executable, "-m", "ddtree_patch", verb, "--help"], capture_output=True,
                              text=True, env=env)
        assert "--help" in done.stdout and "<bool>" not in done.stdout, done.stdout  # --json, --help, ...: flags
        python_line = next(line for line in done.stdout.splitlines() if "--python" in line)
        assert ("Patch" in python_line) == (verb == "apply"), (verb, python_line)


def test_interrupted_install_is_reported_by_status_and_audit(site):
    from ddtree_patch.errors import WriteFailed
    from ddtree_patch.locate import from_folder
    from ddtree_patch.plan import build_plan
    from ddtree_patch.transaction import apply_plan
    from tests.txn_helpers import failing_disk

    with failing_disk(5), pytest.raises(WriteFailed, match="journal is kept"):
        apply_plan(build_plan(from_folder(site)), __version__)
    for verb in ("status", "audit"):
        rc, doc = _run(verb, "--target", str(site))
        assert rc == 1 and doc["state"] == "interrupted" and "ddtree-patch apply" in doc["next"], (verb, doc)


def test_version_is_the_installed_distributions():
    """`ddtree-patch --version`: the version pip installed (importlib.metadata), also in every --json document."""
    from importlib.metadata import version

    done = subprocess.run([sys.executable, "-m", "ddtree_patch", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == f"ddtree-patch {version('ddtree-patch')}\n", done.stdout
    assert __version__ == version("ddtree-patch")
