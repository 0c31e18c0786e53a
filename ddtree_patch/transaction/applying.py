"""apply: under one lock, recover, plan from the disk as it is now, decide, write or roll back.

A plan built earlier (`apply_plan`) is first checked to still describe the install; a read-only
install that already holds the plan is the no-op it is anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable

from ddtree_patch.errors import Drift, EngineError, PlanMismatch, ReadOnly, WriteFailed
from ddtree_patch.model import Install, Plan
from ddtree_patch.state import (
    StatePaths,
    install_state,
    load_journal,
    load_manifest,
    plan_digest,
    python_description,
)
from ddtree_patch.status import classify, drift_report, file_states
from ddtree_patch.transaction.changes import list_changes
from ddtree_patch.transaction.plan_check import (
    check_plan_base,
    check_plan_covers_patch,
    check_writable,
    install_dirs,
    plan_dirs,
    stage,
)
from ddtree_patch.transaction.recovery import clear_leftovers, recover_locked
from ddtree_patch.transaction.restore import (
    check_restorable,
    remove_state,
    restore_pristine,
    verify_pristine,
)
from ddtree_patch.transaction.results import ApplyResult, Recovery
from ddtree_patch.transaction.reverting import revert_locked
from ddtree_patch.transaction.section import DEFAULT_LOCK_TIMEOUT, Progress, Steps, failure, locked
from ddtree_patch.transaction.write import write_patch

Planner = Callable[[Install], Plan]


def apply(
    install: Install,
    make_plan: Planner,
    tool_version: str,
    *,
    progress: Progress | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    python: str | None = None,
) -> ApplyResult:
    """Plan and write the patch as one transaction, the plan built under the lock.

    `make_plan(install)` runs after the lock is taken and any crash recovered, so no other
    apply or revert can change the files between planning and writing (the CLI's path).
    A read-only install that already holds exactly this plan is the usual no-op.
    """
    try:
        check_writable(install_dirs(install))
    except ReadOnly as exc:
        return _read_only(install, make_plan, tool_version, lock_timeout, exc)
    return _apply(install, make_plan, tool_version, progress, lock_timeout, python, staged=False)


def apply_plan(
    plan: Plan,
    tool_version: str,
    *,
    progress: Progress | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    python: str | None = None,
) -> ApplyResult:
    """Write a plan built earlier; a no-op when exactly this is applied.

    The plan must be built from the pristine files (`state.pristine_view`), also when the install
    is already patched: then an older patch (other tool version or other content) is reverted and
    the plan applied in its place. Under the lock the plan is checked against the install again
    (PlanMismatch, exit 11): refused when an apply or revert ran since it was built (`Plan.base`
    differs from `state.install_state`; unless the install now holds exactly this plan, a no-op),
    or when a file changed. `python` describes the target interpreter for the manifest (default:
    the one running the tool).
    """
    stage(plan)
    if plan.base is None:
        raise EngineError(
            "the plan does not record the install's state it was built from (Plan.base): build it "
            "with plan.build_plan, or set base=state.install_state(install) before reading files"
        )
    try:
        check_writable(plan_dirs(plan))
    except ReadOnly as exc:
        return _read_only(plan.install, lambda _: plan, tool_version, lock_timeout, exc)
    return _apply(
        plan.install, lambda _: plan, tool_version, progress, lock_timeout, python, staged=True
    )


def _unchanged(
    install: Install, plan: Plan, tool_version: str, recovered: Recovery | None = None
) -> ApplyResult | None:
    """The no-op result when the install holds exactly this plan of this tool version now."""
    manifest = load_manifest(install)
    if (
        manifest is None
        or manifest.tool_version != tool_version
        or manifest.changes.plan_digest != plan_digest(plan)
        or classify(file_states(install, manifest.changes)) != "patched"
    ):
        return None
    return ApplyResult(
        "unchanged",
        tool_version,
        install.version,
        tuple(e.path for e in manifest.changes.edited),
        tuple(a.path for a in manifest.changes.added),
        str(install.state_dir),
        recovered,
    )


def _read_only(
    install: Install, make_plan: Planner, tool_version: str, lock_timeout: float, error: ReadOnly
) -> ApplyResult:
    """A read-only install (a read-only mount) already patched with this plan: the no-op, exit 0.

    The lock is taken through a read-only descriptor (flock needs no write access), so no apply
    or revert from a machine that can write runs meanwhile. Anything else needs writing: `error`.
    """
    if not StatePaths(install).manifest.is_file():
        raise error
    with locked(install, lock_timeout, Steps(None)):
        if load_journal(install) is not None:  # an interrupted transaction: recovery writes
            raise error
        result = _unchanged(install, make_plan(install), tool_version)
    if result is None:
        raise error
    return result


def _check_plan_current(install: Install, plan: Plan, tool_version: str) -> None:
    """Refuse a plan built before an apply or revert changed the install (caller holds the lock).

    A plan describes the install as it was when planning began: built while patched, it was
    not meant for the pristine install a revert left since (nor the reverse). Accepted only when
    the state is as it was then, or the install holds exactly this plan now (nothing to write).
    """
    if install_state(install) == plan.base:
        return
    if load_journal(install) is None and _unchanged(install, plan, tool_version) is not None:
        return
    raise PlanMismatch(
        "the install changed since the plan was built (an apply or revert ran in between); "
        "nothing was written: build the plan again"
    )


def _apply(
    install: Install,
    make_plan: Planner,
    tool_version: str,
    progress: Progress | None,
    lock_timeout: float,
    python: str | None,
    *,
    staged: bool,
) -> ApplyResult:
    step = Steps(progress)
    with locked(install, lock_timeout, step):
        if staged:
            _check_plan_current(install, make_plan(install), tool_version)
        recovered = recover_locked(install, step)
        clear_leftovers(install, step)  # refuses a state that still holds backups of value
        plan = make_plan(install)
        if not staged:
            stage(plan)
            check_writable(plan_dirs(plan))
        manifest = load_manifest(install)
        state = classify(file_states(install, manifest.changes)) if manifest else "pristine"
        if manifest is not None and state == "drifted":
            states = file_states(install, manifest.changes)
            names = ", ".join(s.path for s in states if s.state != "patched")
            raise Drift(
                f"patched files changed since apply ({names}); nothing was written "
                "(run `ddtree-patch revert --force`, then apply)",
                drift=drift_report(install, states),
            )
        check_plan_base(plan)
        previous = None
        if manifest is not None and state == "patched":
            check_plan_covers_patch(plan, manifest, tool_version)
            unchanged = _unchanged(install, plan, tool_version, recovered)
            if unchanged is not None:
                return unchanged
            check_restorable(install, manifest.changes, force=False)
            revert_locked(install, manifest, step, force=False)
            previous = manifest.tool_version
        elif manifest is not None:  # stale: nothing of that patch is left
            step.writing = True
            remove_state(install, step)
        changes, record_data = list_changes(install, plan)
        try:
            write_patch(
                install,
                plan,
                changes,
                record_data,
                tool_version,
                python or python_description(),
                step,
            )
        except BaseException as exc:
            failed_at = step.current
            step.rolling_back = True
            try:
                restore_pristine(install, changes, step, force=False)
                verify_pristine(install, changes)
                remove_state(install, step)
            except BaseException as rollback_exc:
                raise WriteFailed(
                    f"{failed_at} failed ({exc or type(exc).__name__}); rolling back failed too "
                    f"({rollback_exc}); the journal is kept: run `ddtree-patch revert` to go back "
                    "to pristine (or `ddtree-patch apply` to apply again)"
                ) from exc
            outcome = (
                f"rolled back to the pristine install (the patch of {previous} was reverted first)"
                if previous
                else "rolled back: the install is unchanged"
            )
            error = failure(exc, failed_at, outcome)
            if error is exc:
                raise
            raise error from exc
        return ApplyResult(
            "reapplied" if previous else "applied",
            tool_version,
            install.version,
            tuple(e.path for e in changes.edited),
            tuple(a.path for a in changes.added),
            str(install.state_dir),
            recovered,
            previous,
            manifest is not None and state == "stale",
            manifest.sglang_version if manifest is not None and state == "stale" else None,
        )
