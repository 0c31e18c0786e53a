"""apply, revert and recover: all-or-nothing writes of a Plan into an installed SGLang.

apply (`applying`): take the lock, recover a crashed transaction (`recovery`), build the plan
under the lock and check it against the disk (`plan_check`, `changes`), then write the journal
(the full list of intended changes), back up every original, replace each file atomically,
update RECORD, move stale bytecode away, verify, write the manifest and remove the journal
(`write`). Any error or Ctrl-C rolls back to the pristine install (`restore`) and is re-raised
naming the step. A crash (kill, power loss) leaves the journal; the next apply or revert
finishes or rolls back from it before doing anything else.

revert (`reverting`): refuse when patched files changed since apply (unless forced), check
every backup, journal, restore every original byte (and mtime, so the original bytecode is
valid again), delete added files, restore RECORD, verify, then delete the state.

All of it runs inside `section.locked`: one lock per install, Ctrl-C deferred to step
boundaries once writing starts.
"""

from ddtree_patch.model import Install
from ddtree_patch.transaction.applying import apply, apply_plan
from ddtree_patch.transaction.plan_check import check_writable, install_dirs
from ddtree_patch.transaction.recovery import recover_locked
from ddtree_patch.transaction.results import ApplyResult, Recovery, RevertResult
from ddtree_patch.transaction.reverting import revert
from ddtree_patch.transaction.section import DEFAULT_LOCK_TIMEOUT, Progress, Steps, locked


def recover(
    install: Install,
    *,
    progress: Progress | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> Recovery | None:
    """Finish or roll back an interrupted transaction, if any (apply and revert do this first)."""
    check_writable(install_dirs(install))
    step = Steps(progress)
    with locked(install, lock_timeout, step):
        return recover_locked(install, step)


__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "ApplyResult",
    "Recovery",
    "RevertResult",
    "apply",
    "apply_plan",
    "recover",
    "revert",
]
