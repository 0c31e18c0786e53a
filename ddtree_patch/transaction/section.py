"""The locked section every transaction runs in: the lock, named steps, Ctrl-C, error text.

Ctrl-C before the first write raises KeyboardInterrupt at once (nothing was written). From the
first write on it is deferred to the next step boundary and raised there as `Interrupted`, so
apply rolls back (and revert stops) between two whole changes; during a rollback it is ignored.
"""

from __future__ import annotations

import errno
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ddtree_patch import lockfile
from ddtree_patch.errors import DDTreePatchError, Interrupted, LockHeld, ReadOnly, WriteFailed
from ddtree_patch.model import Install
from ddtree_patch.state import StatePaths, check_state_folder

DEFAULT_LOCK_TIMEOUT = 10.0  # seconds a second apply/revert waits before giving up

Progress = Callable[[str], None]


class Steps:
    """Names each step (for progress and for the error message of a failed one)."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.current = "start"
        self.writing = False  # from the first write on, Ctrl-C waits for a step boundary
        self.rolling_back = False  # Ctrl-C is ignored while undoing
        self.pending_interrupt = False

    def __call__(self, name: str) -> None:
        if self.pending_interrupt and not self.rolling_back:
            self.pending_interrupt = False
            raise Interrupted(f"interrupted (Ctrl-C) before {name}")
        self.current = name
        if self.progress is not None:
            self.progress(name)

    def on_sigint(self, signum: int, frame: object) -> None:
        if not self.writing:
            raise KeyboardInterrupt
        self.pending_interrupt = True


@contextmanager
def locked(install: Install, timeout: float, steps: Steps) -> Iterator[None]:
    """Hold the install's lock (and route Ctrl-C through `steps`) for the whole section."""
    check_state_folder(install)  # before the lock file is opened: it must not be a planted link
    paths = StatePaths(install)
    try:
        fd = lockfile.acquire(paths.lock, timeout)
    except lockfile.Busy:
        raise LockHeld(
            f"another ddtree-patch is working on {install.site_packages} (lock {paths.lock} "
            f"held for over {timeout:g}s); let it finish, then run this again"
        ) from None
    except OSError as exc:
        raise ReadOnly(f"cannot create the lock {paths.lock} ({exc.strerror}); nothing was written") from exc
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, steps.on_sigint) if main else None
    try:
        check_state_folder(install)  # again under the lock: it is ours from here on
        yield
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
        # no state left (reverted, or nothing written): nothing of ours stays in site-packages
        lockfile.release(fd, paths.lock, remove=not paths.root.exists())


def failure(exc: BaseException, step: str, outcome: str) -> BaseException:
    """The user-facing error for an exception raised at `step`."""
    if isinstance(exc, DDTreePatchError):
        error = type(exc)(f"{step}: {exc.message}; {outcome}", exc.exit_code)
        error.next = exc.next
        return error
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        why = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        return WriteFailed(f"{step} failed: {why}{where}; {outcome}")
    if isinstance(exc, KeyboardInterrupt):
        return Interrupted(f"interrupted (Ctrl-C) at {step}; {outcome}")
    return exc
