"""DFLASH as a positional argument: `check_backends(cfg, "DFLASH")`.

Deliberately narrow: `getattr(SpeculativeAlgorithm, "DFLASH")` has this form too, so nothing here
is decided by principle; only per-site policy entries (with reasons) settle such sites.
"""

from __future__ import annotations

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules._twin import is_dflash_operand, operand
from ddtree_patch.rules.base import Context, Rule, Token
from ddtree_patch.sites import Decision


class CallArg(Rule):
    id = "call-arg"
    form = "call-arg"
    MUST_REWRITE = []
    MUST_CLAIM = [
        ('_assert_backends(cfg, "DFLASH")\n', Decision.UNHANDLED),  # no entry decides it here
        ('def _dflash_backends(cfg):\n    return _assert_backends(cfg, "DFLASH")\n', Decision.KEEP),
    ]
    MUST_NOT_TOUCH = ['_assert_backends(cfg, algorithm="DFLASH")\n', 'x = "DFLASH"[0]\n']

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        expr = operand(token.node, ctx) if token.kind == tk.TokenKind.LOGIC else None
        if expr is None or not is_dflash_operand(expr):
            return None
        arg = ctx.parent(expr)
        if isinstance(arg, cst.Arg) and arg.keyword is None and isinstance(ctx.parent(arg), cst.Call):
            return expr
        return None
