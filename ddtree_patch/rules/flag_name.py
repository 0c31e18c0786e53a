"""A name of one of DFlash's own CLI flags where argparse declares it (aliases too):
`add_argument("--speculative-dflash-block-size")`.

A declaration, not a test of the algorithm; DDTree reuses DFlash's flags as they are, so the
rule only classifies. Any other argv fragment naming DFLASH (`"--speculative-algorithm=DFLASH"`)
is not claimed and stays UNHANDLED.
"""

from __future__ import annotations

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules.base import Context, Rule, Token
from ddtree_patch.sites import Decision


class FlagName(Rule):
    id = "flag-name"
    form = "flag-name"
    MUST_CLAIM = [
        ('parser.add_argument("--speculative-dflash-block-size", type=int, help="Block size.")\n', Decision.KEEP),
        ('parser.add_argument("--speculative-draft-window-size", "--speculative-dflash-draft-window-size")\n',
         Decision.KEEP),
    ]
    MUST_NOT_TOUCH = [
        'argv = ["--speculative-algorithm=DFLASH"]\n',
        'parser.add_argument("--x", default="--dflash-mode")\n',
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        node = token.node
        if token.kind != tk.TokenKind.STRING or not isinstance(node, cst.SimpleString):
            return None
        value = node.evaluated_value
        arg = ctx.parent(node)
        call = ctx.parent(arg) if isinstance(arg, cst.Arg) else None
        if not (isinstance(value, str) and value.startswith("--") and not any(c.isspace() for c in value)):
            return None
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)):
            return None
        return node if call.func.attr.value == "add_argument" and arg.keyword is None else None
