"""`DFLASH = auto()` in an enum: add `DDTREE = auto()` right after it.

Only `auto()` (or the exact "DFLASH" string value) is claimed: copying an explicit number would
make DDTREE an alias of DFLASH, which must be left to a person.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ddtree_patch import tokens as tk
from ddtree_patch.rules._twin import twin
from ddtree_patch.rules.base import Context, Rule, Token

_VALUE = m.Call(func=m.Name("auto"), args=[]) | m.SimpleString()


class EnumMember(Rule):
    id = "enum-member"
    form = "enum-member"
    MUST_REWRITE = [
        (
            "class SpeculativeAlgorithm(Enum):\n    EAGLE = auto()\n    DFLASH = auto()  # block drafter\n    NGRAM = auto()\n",
            "class SpeculativeAlgorithm(Enum):\n    EAGLE = auto()\n    DFLASH = auto()  # block drafter\n    DDTREE = auto()\n    NGRAM = auto()\n",
        ),
    ]
    MUST_NOT_TOUCH = [
        "class A(Enum):\n    DFLASH = auto()\n    DDTREE = auto()\n",
        "class A(IntEnum):\n    DFLASH = 7\n",
        "DFLASH = auto()\n",
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        target = ctx.parent(token.node)
        assign = ctx.parent(target) if isinstance(target, cst.AssignTarget) else None
        line = ctx.parent(assign) if isinstance(assign, cst.Assign) else None
        if not isinstance(line, cst.SimpleStatementLine) or len(assign.targets) != 1:
            return None
        if ctx.function is not None or not ctx.scope or not m.matches(assign.value, _VALUE):
            return None
        if isinstance(assign.value, cst.SimpleString) and assign.value.evaluated_value != tk.ENUM_MEMBER:
            return None
        return line

    def applied(self, anchor, ctx):
        return tk.TWIN_MEMBER in ctx.class_members

    def rewrite(self, original, updated, ctx):
        sibling = twin(original).with_changes(leading_lines=[], trailing_whitespace=cst.TrailingWhitespace())
        return cst.FlattenSentinel([updated, sibling])
