"""`def is_dflash(self)`: add the sibling `is_ddtree()` with the same shape (DFLASH -> DDTREE).

`is_dflash` itself is widened by its body's comparison (the equality rule); `is_dflash_family`
follows it. The sibling lets DDTree's own branches (worker dispatch) test for DDTREE alone, and
a plugin class whose `is_dflash` returns False gets an `is_ddtree` returning False.
"""

from __future__ import annotations

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules._twin import twin
from ddtree_patch.rules.base import Context, Rule, Token


class _Rename(cst.CSTTransformer):
    def leave_Name(self, original, updated):
        return updated.with_changes(value=tk.TWIN_PREDICATE) if updated.value == "is_dflash" else updated


class PredicateDef(Rule):
    id = "predicate-def"
    form = "predicate-def"
    MUST_REWRITE = [  # (the body's comparison is widened by the equality rule)
        (
            "class S(Enum):\n    def is_dflash(self) -> bool:\n        return self == S.DFLASH\n",
            "class S(Enum):\n    def is_dflash(self) -> bool:\n        return self in (S.DFLASH, S.DDTREE)\n\n"
            "    def is_ddtree(self) -> bool:\n        return self == S.DDTREE\n",
        ),
        (
            "class Custom:\n    x = 1\n\n    def is_dflash(self) -> bool:\n        return False\n",
            "class Custom:\n    x = 1\n\n    def is_dflash(self) -> bool:\n        return False\n\n"
            "    def is_ddtree(self) -> bool:\n        return False\n",
        ),
    ]
    MUST_NOT_TOUCH = [
        "class S:\n    def is_dflash(self):\n        return True\n\n    def is_ddtree(self):\n        return False\n",
        "class S:\n    def is_dflash_family(self):\n        return self.is_dflash() or self.is_dspark()\n",
        "def is_dflash_like(x):\n    return x\n",
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        parent = ctx.parent(token.node)
        if token.kind == tk.TokenKind.LOGIC and isinstance(parent, cst.FunctionDef) and parent.name is token.node:
            return parent
        return None

    def applied(self, anchor, ctx):
        return anchor.name.value != "is_dflash" or tk.TWIN_PREDICATE in ctx.class_members

    def rewrite(self, original, updated, ctx):
        sibling = twin(original).visit(_Rename())
        if not sibling.leading_lines:  # the blank line above the original lies outside the chunk
            sibling = sibling.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        return cst.FlattenSentinel([updated, sibling])
