"""DFLASH passed along as a value, not tested: `algorithm = "DFLASH"`, `spec_algorithm=X.DFLASH`.

The rule only classifies; whether the value must stay DFLASH (a label, the draft side's own tag)
is the policy's call, and a value the policy has no entry for stays UNHANDLED.
"""

from __future__ import annotations

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules._twin import is_dflash_operand, operand
from ddtree_patch.rules.base import Context, Rule, Token
from ddtree_patch.sites import Decision


class Value(Rule):
    id = "value"
    form = "value"
    MUST_REWRITE = []
    MUST_CLAIM = [
        ('algorithm = "DFLASH"\n', Decision.UNHANDLED),  # no entry decides a value here
        ("def _dflash_batch():\n    return ForwardBatch(spec_algorithm=SpeculativeAlgorithm.DFLASH)\n",
         Decision.KEEP),
        ('def _dflash_label():\n    algorithm: str = "DFLASH"\n', Decision.KEEP),
    ]
    MUST_NOT_TOUCH = [
        'f("DFLASH")\n',
        'x = {"DFLASH": 1}[algorithm]\n',
        'algorithm = "DFLASH" + suffix\n',
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        expr = operand(token.node, ctx) if token.kind == tk.TokenKind.LOGIC else None
        if expr is None or not is_dflash_operand(expr):
            return None
        parent = ctx.parent(expr)
        if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is expr:
            return expr
        if isinstance(parent, cst.Arg) and parent.keyword is not None:
            return expr
        return None
