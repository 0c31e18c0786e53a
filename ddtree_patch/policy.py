"""Decide each site from the policy table: the first entry matching (path, qualname, form) wins.

Entries are keyed by meaning, never by line number, so one table decides every release; a site no
entry matches is UNHANDLED and fails the audit, which is how a new form reaches a person.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from ddtree_patch.sites import Decision

if TYPE_CHECKING:
    from ddtree_patch.rules.base import Rule


UNMATCHED = "unmatched"  # the form of a token no rule claimed; only explicit entries decide it


@dataclass(frozen=True)
class Entry:
    form: str  # a rule form, or UNMATCHED; globs never match UNMATCHED
    decision: Decision
    reason: str
    path: str = "*"  # glob over the package-relative path
    qualname: str = "*"  # glob over the enclosing qualified name ("<module>" at top level)
    capability: str = ""  # the DDTree capability that decided a feature gate ("" for structure)

    def matches(self, path: str, qualname: str, form: str) -> bool:
        if (form == UNMATCHED) != (self.form == UNMATCHED):
            return False
        return (
            fnmatchcase(form, self.form)
            and fnmatchcase(path, self.path)
            and fnmatchcase(qualname, self.qualname)
        )


@dataclass(frozen=True)
class Policy:
    entries: tuple[Entry, ...]

    def decide(self, path: str, qualname: str, rule: "Rule | None") -> tuple[Decision, str, str]:
        """(decision, reason, capability) of the first matching entry."""
        form = rule.form if rule is not None else UNMATCHED
        for entry in self.entries:
            if entry.matches(path, qualname, form):
                return entry.decision, entry.reason, entry.capability
        if rule is None:
            return Decision.UNHANDLED, "no rule knows this form: a person must decide it", ""
        return Decision.UNHANDLED, f"no policy entry for a {form} site here", ""

