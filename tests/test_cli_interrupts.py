"""Ctrl-C at each stage of a command: the message says what the install holds, under --json too.

Each child runs the real CLI and sends itself SIGINT at one chosen point (a hook in front of one
function or one import), so the stage is exact instead of a matter of timing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

MINI = Path(__file__).resolve().parent.parent / "fixtures" / "mini_site"
ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "COLUMNS": "200", "DDTREE_PATCH_CACHE": "off"}

# argv[1]: "module:function" to interrupt on its call, or "import:module" on its import; the rest:
# the command line. argv[0] is the console script's name, as when a user runs `ddtree-patch`.
CHILD = """
import importlib, os, signal, sys, time

where, args = sys.argv[1], sys.argv[2:]


def ctrl_c(*_a, **_k):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)  # the handler runs here; never reached past it


kind, name = where.split(":")
if kind == "import":
    class CtrlCOnImport:
        def find_spec(self, fullname, path=None, target=None):
            if fullname == name:
                ctrl_c()

    sys.meta_path.insert(0, CtrlCOnImport())
sys.argv = ["/somewhere/bin/ddtree-patch", *args]
from ddtree_patch.cli import main

if kind != "import":
    setattr(importlib.import_module(kind), name, ctrl_c)
main()
"""


def _run(where: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, where, *args], capture_output=True, text=True,
                          cwd=ROOT, env={**ENV, "PYTHONPATH": str(ROOT)}, timeout=300)


def _status(site: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "ddtree_patch", "status", "--target", str(site), "--json"],
                          capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    return json.loads(done.stdout)["state"]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return Path(shutil.copytree(MINI, tmp_path / "site"))


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_while_starting_up_is_said(site: Path, as_json: bool) -> None:
    """During the CLI's own imports (rich here): one JSON document under --json, else one error
    line; exit 130 and no traceback (it was a KeyboardInterrupt traceback and no JSON)."""
    done = _run("import:rich.console", "status", "--target", str(site), *(["--json"] if as_json else []))
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr
    if as_json:
        doc = json.loads(done.stdout)
        assert doc["ok"] is False and doc["command"] == "status" and doc["error"]["code"] == 130
        assert doc["error"]["message"] == "interrupted (Ctrl-C); nothing was written"
        assert doc["error"]["next"] == f"ddtree-patch status --target {site} --json"
    else:
        assert done.stdout == ""
        assert done.stderr.splitlines()[0] == "error: interrupted (Ctrl-C); nothing was written", done.stderr


@pytest.mark.parametrize("where", ["import:libcst", "ddtree_patch.plan:refuse_native"])
def test_ctrl_c_before_the_transaction_wrote_nothing(site: Path, where: str) -> None:
    """Importing the engine (libcst: a KeyboardInterrupt in a class body surfaced as RuntimeError)
    or checking for a native DDTree: nothing written, and said so in one JSON document."""
    done = _run(where, "apply", "--target", str(site), "--json")
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr
    assert json.loads(done.stdout)["error"]["message"] == "interrupted (Ctrl-C); nothing was written"
    assert _status(site) == "pristine" and not (site / ".ddtree-patch").exists()


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_after_apply_committed_says_the_install_is_patched(site: Path, as_json: bool) -> None:
    """Ctrl-C during the worker-contract check that follows the transaction: the patch is in place,
    and the message says so (it said "nothing was written")."""
    done = _run("ddtree_patch.worker_fit:contract_warnings", "apply", "--target", str(site),
                *(["--json"] if as_json else []))
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr
    message = json.loads(done.stdout)["error"]["message"] if as_json else done.stderr.splitlines()[0]
    assert "nothing was written" not in message and "SGLang is patched now" in message, message
    assert f"`ddtree-patch revert --target {site}` undoes the patch" in message
    assert _status(site) == "patched"


def test_ctrl_c_after_revert_committed_says_the_install_is_pristine(site: Path) -> None:
    assert subprocess.run([sys.executable, "-m", "ddtree_patch", "apply", "--target", str(site)],
                          capture_output=True, cwd=ROOT, env=ENV, timeout=300).returncode == 0
    done = _run("ddtree_patch.cli:result_lines", "revert", "--target", str(site))
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: interrupted (Ctrl-C); SGLang is pristine now:"), done.stderr
    assert _status(site) == "pristine"
