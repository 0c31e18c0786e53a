"""Errors a user can act on: one line saying what and what next, and the exit code to leave with."""

from __future__ import annotations


class DDTreePatchError(Exception):
    """`next`: the command that helps in this case (the CLI's per-code default when None);
    `{command}` in it stands for the verb that failed."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None, *, next: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.next = next
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(DDTreePatchError):
    exit_code = 2


class NotInstalled(DDTreePatchError):
    """No usable SGLang where we looked (missing, two copies, editable)."""

    exit_code = 3


class Unsupported(DDTreePatchError):
    """This SGLang release cannot take the patch (no DFLASH, or unknown with --strict); `install`:
    the SGLang that was found (reported with the error)."""

    exit_code = 4

    def __init__(self, message: str, install: object = None, *, next: str | None = None) -> None:
        super().__init__(message, next=next)
        self.install = install


class EngineError(DDTreePatchError):
    """The plan failed its own checks (an edited file does not compile): a bug to report."""

    exit_code = 5


# Raised by the transaction layer (apply / revert / recover); see docs/exit-codes.md.


class LockHeld(DDTreePatchError):
    """Another apply/revert holds the lock of this install and did not finish in time."""

    exit_code = 6


class ReadOnly(DDTreePatchError):
    """The site-packages (or a folder inside it) cannot be written; nothing was written."""

    exit_code = 7


class CorruptState(DDTreePatchError):
    """The manifest, journal or a backup is unreadable, tampered with, or points outside."""

    exit_code = 8


class Drift(DDTreePatchError):
    """Files the patch wrote changed since apply (hand edit, partial upgrade).

    `drift` holds one `status.FileDrift` (path, state, unified diff) per changed file.
    """

    exit_code = 9

    def __init__(
        self, message: str, exit_code: int | None = None, *, drift: tuple = (), next: str | None = None
    ) -> None:
        super().__init__(message, exit_code, next=next)
        self.drift = drift


class WriteFailed(DDTreePatchError):
    """An I/O error (disk full, permission) during a transaction; the install was rolled back."""

    exit_code = 10


class PlanMismatch(DDTreePatchError):
    """The files on disk are not the ones the plan was built from (changed since, or patched)."""

    exit_code = 11


class VerifyFailed(DDTreePatchError):
    """A check after writing found bytes other than the ones expected."""

    exit_code = 12


class Unpatchable(DDTreePatchError):
    """A file the patch must edit cannot be patched as found: it fails to parse, or it (or a
    folder above it) is a symbolic link. Nothing was written."""

    exit_code = 13


class Interrupted(DDTreePatchError):
    """Ctrl-C (SIGINT): the message says what state the install was left in."""

    exit_code = 130


class NativeDDTree(DDTreePatchError):
    """This SGLang defines DDTREE itself: patching over it would fight upstream's DDTree."""

    exit_code = 14
