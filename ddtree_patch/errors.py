"""Errors the tool reports to a person: one line saying what failed and what to do next.

Each class carries the process exit code the CLI returns for it (see docs/exit-codes.md), so the
CLI renders every failure the same way: print `message`, exit with `exit_code`.
"""

from __future__ import annotations


class DDTreePatchError(Exception):
    """Base of every error meant for the user; `message` is one line, `exit_code` is stable."""

    exit_code: int = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class UsageError(DDTreePatchError):
    """Bad command line: conflicting or missing options."""

    exit_code = 2


class NotInstalled(DDTreePatchError):
    """No SGLang where we looked (or two copies on the path, or an editable install)."""

    exit_code = 3


class Unsupported(DDTreePatchError):
    """An SGLang release this tool cannot patch (no DFLASH, or unknown newer with --strict)."""

    exit_code = 4


class LockHeld(DDTreePatchError):
    """Another apply/revert holds the lock of this install and did not finish in time."""

    exit_code = 5


class ReadOnly(DDTreePatchError):
    """The site-packages (or a folder inside it) cannot be written; nothing was written."""

    exit_code = 6


class CorruptState(DDTreePatchError):
    """The manifest, journal or a backup is unreadable, tampered with, or points outside."""

    exit_code = 7


class Drift(DDTreePatchError):
    """Files the patch wrote changed since apply (hand edit, partial upgrade).

    `drift` holds one `status.FileDrift` (path, state, unified diff) per changed file.
    """

    exit_code = 8

    def __init__(self, message: str, exit_code: int | None = None, *, drift: tuple = ()) -> None:
        super().__init__(message, exit_code)
        self.drift = drift


class WriteFailed(DDTreePatchError):
    """An I/O error (disk full, permission) during a transaction; the install was rolled back."""

    exit_code = 9


class InvalidPlan(DDTreePatchError):
    """The plan does not compile, or no longer matches the files on disk."""

    exit_code = 10


class VerifyFailed(DDTreePatchError):
    """A check after writing found bytes other than the ones expected."""

    exit_code = 11
