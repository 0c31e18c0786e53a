"""One file's analysis as plain data: what the scan cache stores and a warm audit reads back.

Kept apart from `analyse.py` so reading cached results never imports libcst or the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddtree_patch.sites import Site


@dataclass
class FileResult:
    path: str
    sites: list[Site] = field(default_factory=list)
    replacements: list[tuple[int, int, str]] = field(default_factory=list)  # (first, last line, text)
    mentions: dict[str, int] = field(default_factory=dict)  # logic / reference / text / ddtree
    skipped: str | None = None

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "sites": [s.to_json() for s in self.sites],
            "replacements": [list(r) for r in self.replacements],
            "mentions": self.mentions,
            "skipped": self.skipped,
        }

    @classmethod
    def from_json(cls, data: dict) -> "FileResult":
        return cls(
            path=data["path"],
            sites=[Site.from_json(s) for s in data["sites"]],
            replacements=[tuple(r) for r in data["replacements"]],
            mentions=data["mentions"],
            skipped=data["skipped"],
        )
