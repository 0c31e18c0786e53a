"""The ledger's vocabulary: decisions and the site records the audit reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from enum import Enum


class Decision(str, Enum):
    WIDEN = "WIDEN"  # DDTree shares this DFlash behaviour: the condition also accepts DDTREE
    KEEP = "KEEP"  # DFlash-only on purpose (the reason says why)
    NARROW = "NARROW"  # a widened predicate call tests DDTREE away: DDTree lacks the capability
    EDIT = "EDIT"  # a structural change: new enum member, predicate, flag, dispatch, hook
    UNHANDLED = "UNHANDLED"  # no rule or no policy entry: the audit fails


EDITING = (Decision.WIDEN, Decision.EDIT, Decision.NARROW)  # the decisions whose sites the plan edits


@dataclass(frozen=True)
class Site:
    path: str  # relative to the sglang package, posix
    line: int
    col: int
    qualname: str  # enclosing class/function names joined by "."; "<module>" at top level
    kind: str  # tokens.TokenKind value
    form: str  # rule form, or "unmatched"
    rule: str  # rule id, or "" when no rule claimed the token
    decision: Decision
    reason: str
    snippet: str  # the source line, stripped
    applied: bool  # the rewrite is already present (an applied install audits clean)
    capability: str = ""  # the DDTree capability that decided this feature gate, if it is one

    @property
    def planned(self) -> bool:
        """The plan changes this site (by an edit here, or one that carries it): a rule claimed it,
        its decision edits, and it is not so already."""
        return bool(self.rule) and self.decision in EDITING and not self.applied

    def to_json(self) -> dict:
        data = asdict(self)
        data["decision"] = self.decision.value
        return data

    @classmethod
    def from_json(cls, data: dict) -> "Site":
        return cls(**{**data, "decision": Decision(data["decision"])})


# Forms whose sites need no edit of their own: the edit of another form's site carries them
# (`x.is_dflash()` widens when `is_dflash()`'s body does). Data, so the audit needs no rules.
CARRIED_BY = {"predicate-call": "predicate-def"}


def with_carried(sites: list[Site]) -> list[Site]:
    """Sites with `applied` also true where the edit that carries them is applied."""
    applied_forms = {s.form for s in sites if s.applied}
    return [
        replace(s, applied=True)
        if not s.applied and s.decision is Decision.WIDEN and CARRIED_BY.get(s.form) in applied_forms
        else s
        for s in sites
    ]
