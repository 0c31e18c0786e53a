"""Errors a user can act on: one line saying what and what next, and the exit code to leave with."""

from __future__ import annotations


class DDTreePatchError(Exception):
    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(DDTreePatchError):
    exit_code = 2


class NotInstalled(DDTreePatchError):
    """No usable SGLang where we looked (missing, two copies, editable)."""

    exit_code = 3


class Unsupported(DDTreePatchError):
    """This SGLang release cannot take the patch (no DFLASH, or unknown with --strict)."""

    exit_code = 4


class EngineError(DDTreePatchError):
    """The plan failed its own checks (an edited file does not compile): a bug to report."""

    exit_code = 5
