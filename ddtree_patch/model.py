"""Plain data passed between the layers: where SGLang is, and what a patch would change.

Nothing here touches the disk; the locate layer fills `Install`, the plan layer fills `Plan`,
and the transaction layer writes a `Plan` into an `Install`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Install:
    """One installed copy of SGLang, found without importing it."""

    site_packages: Path  # folder holding the `sglang` package and its dist-info
    package_dir: Path  # site_packages / "sglang"
    dist_info: Path | None  # site_packages / "sglang-X.Y.Z.dist-info" (None for a bare folder)
    version: str  # as written in the dist-info METADATA
    warnings: tuple[str, ...] = ()
    python: str | None = None  # the interpreter it was found through (None: a folder, --target)

    @property
    def record(self) -> Path | None:
        return self.dist_info / "RECORD" if self.dist_info else None

    @property
    def state_dir(self) -> Path:
        """Where backups, manifest and journal live: beside the package, never outside it."""
        return self.site_packages / ".ddtree-patch" / "sglang"


@dataclass(frozen=True)
class FileEdit:
    """A file of the package rewritten in place; paths are relative to `Install.package_dir`."""

    path: str  # posix, e.g. "srt/speculative/spec_info.py"
    before: bytes
    after: bytes


@dataclass(frozen=True)
class AddedFile:
    """A file the patch drops into the package (tree-verify modules, kernels)."""

    path: str  # posix, relative to `Install.package_dir`
    data: bytes


@dataclass
class Plan:
    """Every byte `apply` would write; validated (parsed and compiled) before it is built."""

    install: Install
    edits: list[FileEdit] = field(default_factory=list)
    added: list[AddedFile] = field(default_factory=list)
    base: str | None = None  # state.install_state() when planning began: apply_plan refuses it once that moved on
