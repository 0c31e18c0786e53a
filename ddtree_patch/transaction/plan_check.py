"""Checks of a plan that write nothing: it compiles, stays inside, fits the disk, is writable."""

from __future__ import annotations

import errno
import hashlib
import os
import shlex
from pathlib import Path

from ddtree_patch import fsio
from ddtree_patch.compiled import check_compiles
from ddtree_patch.dropins import DROPIN_ROOT
from ddtree_patch.errors import CorruptState, EngineError, NotInstalled, PlanMismatch, ReadOnly, WriteFailed
from ddtree_patch.model import Install, Plan
from ddtree_patch.state import Manifest, checked_path, pristine_view, site_path


def stage(plan: Plan) -> None:
    """Refuse a plan whose Python files do not compile or whose paths repeat or escape."""
    seen: set[str] = set()
    files = [(e.path, e.after) for e in plan.edits] + [(a.path, a.data) for a in plan.added]
    for path, data in files:
        if path in seen:
            raise EngineError(f"the plan names {path} twice")
        seen.add(path)
        try:
            checked_path(plan.install, site_path(plan.install, path))
        except CorruptState as exc:
            raise EngineError(f"the plan names a path outside the package: {path!r}") from exc
        if path.endswith(".py"):
            check_compiles(path, data)
    for a in plan.added:
        if not a.path.startswith(f"{DROPIN_ROOT}/"):
            raise EngineError(f"the plan adds {a.path} outside the drop-in folder {DROPIN_ROOT}")


def install_dirs(install: Install) -> set[Path]:
    dirs = {install.site_packages, install.package_dir}
    if install.dist_info is not None:
        dirs.add(install.dist_info)
    return dirs


def plan_dirs(plan: Plan) -> set[Path]:
    """Every folder the plan writes in (the nearest existing one is probed)."""
    install = plan.install
    return install_dirs(install) | {
        checked_path(install, site_path(install, f.path)).parent for f in [*plan.edits, *plan.added]
    }


def _nearest_existing(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


def check_writable(dirs: set[Path]) -> None:
    """Detect a read-only install before writing anything: permission bits, then a probe file."""
    for folder in sorted({_nearest_existing(d) for d in dirs}):
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ReadOnly(f"{folder} is not writable by this user; nothing was written")
        try:
            fsio.probe_writable(folder)
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise ReadOnly(
                    f"{folder} is not writable ({exc.strerror}); nothing was written"
                ) from exc
            raise WriteFailed(
                f"cannot write in {folder} ({exc.strerror}); nothing was written"
            ) from exc


def check_plan_base(plan: Plan) -> None:
    """The plan must describe the pristine files, not an already patched install."""
    view = pristine_view(plan.install)
    for e in plan.edits:
        try:
            base = view.read(e.path)
        except FileNotFoundError:
            raise PlanMismatch(f"{e.path} is not in the package; run the command again") from None
        if base != e.before:
            raise PlanMismatch(
                f"the plan's original of {e.path} differs from the pristine file (built from a "
                "patched or changed install?); run the command again"
            )
    for a in plan.added:
        if (plan.install.package_dir / a.path).exists() and a.path not in view.added:
            folder = plan.install.package_dir / DROPIN_ROOT
            quoted = shlex.quote(str(folder))
            raise NotInstalled(
                f"{a.path} exists but ddtree-patch did not write it (a DDTree from elsewhere, or what is "
                f"left of one), and the patch would overwrite it; nothing was written. Move {folder} aside "
                f"(`mv {quoted} {quoted}.foreign`), then run `ddtree-patch apply` again"
            )


def check_plan_covers_patch(plan: Plan, manifest: Manifest, tool_version: str) -> None:
    """Refuse a plan that would silently drop edits of the applied patch.

    An engine that scans the patched files (instead of `pristine_view`) finds nothing left to
    edit, and applying its plan would revert the edits. Same tool version: the plan must edit
    the same files from the same originals. Other version: it must share at least one edit.
    """
    applied = {e.path: e.sha256_before for e in manifest.changes.edited}
    planned = {
        site_path(plan.install, e.path): hashlib.sha256(e.before).hexdigest() for e in plan.edits
    }
    if not applied:
        return
    if (tool_version == manifest.tool_version and planned != applied) or not (
        planned.keys() & applied.keys()
    ):
        missing = sorted(applied.keys() - planned.keys()) or sorted(applied)
        raise PlanMismatch(
            f"the plan leaves out edits of the applied patch ({', '.join(missing)}): it was built "
            "from the patched files, not the pristine ones; nothing was written"
        )
