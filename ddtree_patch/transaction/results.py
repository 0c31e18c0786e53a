"""What apply, revert and recovery report back (plain data, serialisable to JSON)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Recovery:
    """What the recovery of an interrupted transaction did."""

    op: str  # the interrupted operation: "apply" | "revert"
    outcome: str  # "rolled back" (to pristine) | "completed" | "discarded" (another release now)


@dataclass(frozen=True)
class ApplyResult:
    action: str  # "applied" | "unchanged" | "reapplied"
    tool_version: str
    sglang_version: str
    edited: tuple[str, ...]  # paths relative to site-packages
    added: tuple[str, ...]
    state_dir: str
    recovered: Recovery | None = None
    previous_tool_version: str | None = None  # set when an older patch was reverted first
    discarded_stale: bool = False  # an obsolete manifest (SGLang reinstalled) was dropped
    previous_sglang_version: str | None = None  # the release the dropped stale state patched
    warnings: tuple[str, ...] = ()  # e.g. the DDTree worker does not fit this release (worker_fit)


@dataclass(frozen=True)
class RevertResult:
    action: str  # "reverted" (also by recovering an interrupted transaction) | "nothing to revert" | "discarded stale state"
    restored: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    forced: tuple[str, ...] = ()  # drifted files overwritten because of force
    leftovers: tuple[str, ...] = ()  # folders the patch created that now hold others' files
    recovered: Recovery | None = None
    warnings: tuple[str, ...] = ()
    kept_edits: str | None = None  # folder holding the bytes force overwrote or removed (hand edits)
