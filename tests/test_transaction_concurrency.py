"""Transactions at once, in several processes: one writes, the others wait (or fail cleanly).

The slow loop races the real command line (apply, revert, status) for 50 rounds: every round
ends pristine or fully patched, byte for byte, and no process prints a traceback.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddtree_patch import lockfile
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


# The real command line, three at a time: apply, revert and status started together on one
# install, each step of a transaction slowed a little so that they overlap.
CLI_CHILD = """
import os, random, sys, time
from pathlib import Path
from ddtree_patch import fsio
from ddtree_patch.cli import main
import ddtree_patch.plan, ddtree_patch.transaction  # noqa: E401,F401 - the CLI imports these lazily:
# loaded before the start signal, so each verb reaches the lock as soon as its delay says
go, delay = Path(sys.argv[1]), float(sys.argv[2])
(go.parent / f"ready-{os.getpid()}").touch()
while not go.exists():
    time.sleep(0.002)
time.sleep(delay)
fsio.fault_hook = lambda op, path: time.sleep(0.002)
sys.argv = ["ddtree-patch", *sys.argv[3:]]
main()
"""

ROUNDS = 50


def _cli_round(site: Path, work: Path, seed: int, env: dict) -> list[tuple[str, int, str, str]]:
    rng = random.Random(seed)
    go = work / "go"
    commands = [["apply"], ["revert"], ["status"]]
    rng.shuffle(commands)
    children = [
        (
            command[0],
            subprocess.Popen(
                [sys.executable, "-c", CLI_CHILD, str(go), f"{rng.uniform(0, 0.05):.3f}",
                 *command, "--target", str(site)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for command in commands
    ]
    deadline = time.monotonic() + 120
    while len(list(work.glob("ready-*"))) < len(children):
        assert time.monotonic() < deadline, "a child did not start"
        time.sleep(0.01)
    go.touch()
    outcomes = []
    for name, child in children:
        out, err = child.communicate(timeout=120)
        outcomes.append((name, child.returncode, out, err))
    return outcomes


@pytest.mark.slow
def test_apply_revert_and_status_racing_always_end_whole(tmp_path):
    with scratch_dir(tmp_path) as root:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "DDTREE_PATCH_CACHE": str(root / "cache")}
        install = make_tiny_install(root / "site")
        pristine = snapshot(install.site_packages)
        reference = copy_install(install, root / "reference")
        done = subprocess.run([sys.executable, "-m", "ddtree_patch", "apply", "--target",
                               str(reference.site_packages)], cwd=ROOT, env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        patched = snapshot(reference.site_packages)
        seen = set()
        for n in range(ROUNDS):
            work = root / f"round-{n}"
            work.mkdir()
            outcomes = _cli_round(install.site_packages, work, n, env)
            for name, rc, out, err in outcomes:
                context = f"round {n}: {name} exited {rc}\n{out}\n{err}"
                assert "Traceback" not in err and "Traceback" not in out, context
                assert rc in (0, 6), context  # 6: waited for the lock too long (a clean refusal)
                if rc == 6:
                    assert err.startswith("error: another ddtree-patch is working on"), context
                if name == "status" and rc == 0:
                    assert out.startswith(("state: pristine", "state: patched")), context
            state = status(install).state
            seen.add(state)
            tree = snapshot(install.site_packages)
            assert (state, tree) in (("pristine", pristine), ("patched", patched)), f"round {n}"
            if state == "pristine":
                assert not install.state_dir.exists(), f"round {n}"
            assert verify_record(install.record) == [], f"round {n}"
        assert seen == {"pristine", "patched"}  # both orders happened


@pytest.mark.parametrize("replaced", [False, True], ids=["removed", "replaced"])
def test_a_lock_file_its_holder_removes_is_never_held_twice(tmp_path, monkeypatch, replaced):
    """The holder that leaves nothing behind unlinks the lock file while a taker has it open: the
    taker must end up holding the file at the path, or a third taker would get one too. `replaced`:
    a third taker has already made a new lock file there when the taker's flock succeeds on the old one."""
    path = tmp_path / ".ddtree-patch" / "sglang.lock"
    holder = lockfile.acquire(path, 1)
    real_flock = fcntl.flock

    calls: list[int] = []

    def the_holder_leaves_first(fd, operation):
        calls.append(fd)
        if len(calls) == 1:  # between the taker's first open and its flock
            lockfile.release(holder, path, remove=True)
            if replaced:
                path.parent.mkdir(exist_ok=True)
                path.touch()
        return real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", the_holder_leaves_first)
    taker = lockfile.acquire(path, 5)
    monkeypatch.undo()
    assert len(calls) == 2  # the stale file, then the one at the path
    with pytest.raises(lockfile.Busy):
        lockfile.acquire(path, 0.2)
    with pytest.raises(lockfile.Busy):
        lockfile.acquire(path, 0.2, shared=True, create=False)  # a status waits too
    lockfile.release(taker, path, remove=True)
    assert not path.parent.exists()
    assert lockfile.acquire(path, 0, shared=True, create=False) is None  # no file: nothing to wait for
