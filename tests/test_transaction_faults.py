"""Fault injection: fail or kill at every change apply and revert make to the disk.

Whatever step fails, the next command leaves the install pristine or fully patched, byte for
byte, never in between. "Kill" is os._exit in a forked child, so nothing in the process gets to
clean up: only the journal and the order of the writes save the install.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ddtree_patch import fsio
from ddtree_patch.errors import WriteFailed
from ddtree_patch.model import Install
from ddtree_patch.record import verify_record
from ddtree_patch.status import status
from ddtree_patch.transaction import apply_plan, revert
from tests.tiny_install import make_tiny_install
from tests.txn_helpers import FaultAt, Recorder, copy_install, handmade_plan, scratch_dir, snapshot

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def _apply(install: Install) -> object:
    return apply_plan(handmade_plan(install), "1.0")


def _revert(install: Install) -> object:
    return revert(install)


OPS = {"apply": _apply, "revert": _revert}


class Trees:
    """A pristine and a patched tiny install to copy from, and their expected snapshots."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pristine = make_tiny_install(root / "pristine")
        self.pristine_tree = snapshot(self.pristine.site_packages)
        self.patched = copy_install(self.pristine, root / "patched")
        _apply(self.patched)
        self.patched_tree = snapshot(self.patched.site_packages)
        self.copies = 0

    def fresh(self, op: str) -> Install:
        """A copy of the tree `op` starts from."""
        self.copies += 1
        source = self.pristine if op == "apply" else self.patched
        return copy_install(source, self.root / f"copy{self.copies}")

    def steps(self, op: str) -> int:
        recorder = Recorder()
        fsio.fault_hook = recorder
        try:
            OPS[op](self.fresh(op))
        finally:
            fsio.fault_hook = None
        return len(recorder.events)

    def assert_settled(self, install: Install, expect: str, context: str) -> None:
        tree = snapshot(install.site_packages)
        assert tree == (self.pristine_tree if expect == "pristine" else self.patched_tree), context
        assert status(install).state == expect, context
        assert verify_record(install.record) == [], context
        if expect == "pristine":
            assert not install.state_dir.exists(), context


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    with scratch_dir(tmp_path_factory.mktemp("faults")) as root:
        yield Trees(root)


@pytest.fixture(autouse=True)
def _no_hook_left():
    yield
    fsio.fault_hook = None


def _eio(op: str, path: Path) -> None:
    raise OSError(errno.EIO, "injected I/O error", str(path))


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_an_error_at_any_step_is_rolled_back_in_process(trees, op):
    steps = trees.steps(op)
    assert steps > 20
    for n in range(steps):
        install = trees.fresh(op)
        fsio.fault_hook = FaultAt(n, _eio)
        expect = "pristine"
        try:
            result = OPS[op](install)
        except WriteFailed as exc:
            assert exc.exit_code == 10 and "injected I/O error" in exc.message
            if op == "revert":  # only writing its journal can fail before any change
                assert "still patched" in exc.message
                expect = "patched"
            else:
                assert "rolled back" in exc.message
        else:  # revert retries from its journal once, as the next command would
            assert op == "revert" and result.warnings, n
        fsio.fault_hook = None
        trees.assert_settled(install, expect, f"{op} failing at step {n}")


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_a_lasting_error_keeps_the_journal_and_the_next_command_recovers(trees, op):
    steps = trees.steps(op)
    for n in range(steps):
        crashed = trees.fresh(op)
        fsio.fault_hook = FaultAt(n, _eio, persistent=True)
        with pytest.raises(WriteFailed) as err:
            OPS[op](crashed)
        fsio.fault_hook = None
        assert status(crashed).state in ("pristine", "patched", "interrupted"), err.value.message
        if status(crashed).state == "interrupted":
            assert "journal is kept" in err.value.message
        for next_op, expect in (("apply", "patched"), ("revert", "pristine")):
            install = copy_install(crashed, trees.root / f"{crashed.site_packages.name}-{next_op}")
            OPS[next_op](install)
            trees.assert_settled(install, expect, f"{op} failing from step {n}, then {next_op}")


def _killed_child(op: str, install: Install, n: int) -> int:
    pid = os.fork()
    if pid == 0:  # child: die at step n without any cleanup
        code = 0
        try:
            fsio.fault_hook = FaultAt(n, lambda op_, path: os._exit(137))
            OPS[op](install)
        except BaseException:
            code = 1
        os._exit(code)
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status)


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_a_kill_at_any_step_is_recovered_by_the_next_command(trees, op):
    steps = trees.steps(op)
    seen = set()
    for n in range(steps):
        crashed = trees.fresh(op)
        assert _killed_child(op, crashed, n) == 137, f"step {n} was not reached"
        state = status(crashed).state
        seen.add(state)
        assert state in ("pristine", "patched", "interrupted"), f"{op} killed at step {n}: {state}"
        for next_op, expect in (("apply", "patched"), ("revert", "pristine")):
            install = copy_install(crashed, trees.root / f"{crashed.site_packages.name}-{next_op}")
            result = OPS[next_op](install)
            trees.assert_settled(install, expect, f"{op} killed at step {n}, then {next_op}")
            if state == "interrupted":
                assert result.recovered is not None
    assert "interrupted" in seen


def test_a_kill_during_recovery_is_recovered_too(trees):
    recorder = Recorder()
    fsio.fault_hook = recorder
    _apply(trees.fresh("apply"))
    fsio.fault_hook = None
    mid = next(
        i
        for i, (op, path) in enumerate(recorder.events)
        if path.name.startswith(".server_args.py.") and path.name.endswith(fsio.TEMP_SUFFIX)
    )
    crashed = trees.fresh("apply")
    assert _killed_child("apply", crashed, mid + 1) == 137  # original replaced, others not yet
    assert status(crashed).state == "interrupted"
    recovery = Recorder()
    fsio.fault_hook = recovery
    _revert(copy_install(crashed, trees.root / "recovery-steps"))
    fsio.fault_hook = None
    for n in range(len(recovery.events)):
        again = copy_install(crashed, trees.root / f"recovery-kill-{n}")
        assert _killed_child("revert", again, n) == 137
        for next_op, expect in (("apply", "patched"), ("revert", "pristine")):
            install = copy_install(again, trees.root / f"recovery-kill-{n}-{next_op}")
            OPS[next_op](install)
            trees.assert_settled(install, expect, f"recovery killed at step {n}, then {next_op}")
