"""Two applies at once, in two processes: one writes, the other waits (or fails cleanly)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddtree_patch.record import verify_record
from ddtree_patch.status import status
from ddtree_patch.transaction import apply_plan
from tests.tiny_install import make_tiny_install
from tests.txn_helpers import copy_install, handmade_plan, scratch_dir, snapshot

ROOT = Path(__file__).resolve().parent.parent

# Builds its plan before taking the lock (as the CLI does), says it is ready, waits for the start
# signal, then applies slowly (10 ms per write) so that the two transactions overlap.
CHILD = """
import json, os, sys, time
from pathlib import Path
from ddtree_patch import fsio
from ddtree_patch.errors import DDTreePatchError
from ddtree_patch.model import Install
from ddtree_patch.transaction import apply_plan
from tests.txn_helpers import handmade_plan

site, go, timeout = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
install = Install(site, site / "sglang", site / "sglang-0.5.99.dist-info", "0.5.99")
plan = handmade_plan(install)
(go.parent / f"ready-{os.getpid()}").touch()
while not go.exists():
    time.sleep(0.002)
fsio.fault_hook = lambda op, path: time.sleep(0.01)
try:
    print(json.dumps({"action": apply_plan(plan, "1.0", lock_timeout=timeout).action}))
except DDTreePatchError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": exc.message}))
    sys.exit(exc.exit_code)
"""


def _race(install, tmp_path, timeout):
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(install.site_packages), str(go), str(timeout)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    # Start both only once both have imported and planned: a slow start must not serialise them.
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < 2:
        assert time.monotonic() < deadline and all(c.poll() is None for c in children), "a child died"
        time.sleep(0.01)
    go.touch()
    outcomes = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert out, err
        outcomes.append((child.returncode, json.loads(out)))
    return sorted(outcomes, key=lambda o: o[0])


@pytest.fixture
def expected(tmp_path):
    with scratch_dir(tmp_path) as root:
        install = make_tiny_install(root / "site")
        reference = copy_install(install, root / "reference")
        apply_plan(handmade_plan(reference), "1.0")
        yield install, snapshot(reference.site_packages)


def _assert_patched(install, tree):
    assert snapshot(install.site_packages) == tree
    assert status(install).state == "patched"
    assert verify_record(install.record) == []


def test_the_second_apply_waits_then_finds_it_done(expected, tmp_path):
    install, tree = expected
    (rc1, first), (rc2, second) = _race(install, tmp_path, timeout=60)
    assert (rc1, rc2) == (0, 0)
    assert sorted([first["action"], second["action"]]) == ["applied", "unchanged"]
    _assert_patched(install, tree)


def test_the_second_apply_fails_cleanly_when_the_wait_is_short(expected, tmp_path):
    install, tree = expected
    (rc1, first), (rc2, second) = _race(install, tmp_path, timeout=0.05)
    assert (rc1, first) == (0, {"action": "applied"})
    assert (
        rc2 == 6 and second["error"] == "LockHeld" and "another ddtree-patch" in second["message"]
    )
    _assert_patched(install, tree)
