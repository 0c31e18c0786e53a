"""`choices=[... "DFLASH" ...]` of a CLI flag: argparse must accept DDTREE where it accepts DFLASH."""

from __future__ import annotations

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules._twin import element_of
from ddtree_patch.rules.base import Context, Rule, Token
from ddtree_patch.rules.membership import has_any_twin, widen_collection


class Choices(Rule):
    id = "choices"
    form = "choices"
    MUST_REWRITE = [
        (
            'parser.add_argument(\n    "--algorithm",\n    choices=["DFLASH", "EAGLE", "NGRAM"],\n)\n',
            'parser.add_argument(\n    "--algorithm",\n    choices=["DFLASH", "DDTREE", "EAGLE", "NGRAM"],\n)\n',
        ),
    ]
    MUST_NOT_TOUCH = [
        'parser.add_argument("--x", choices=["EAGLE"])\n',
        'parser.add_argument("--x", options=["DFLASH"])\n',
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        found = element_of(token.node, ctx) if token.kind == tk.TokenKind.LOGIC else None
        if found is None:
            return None
        arg = ctx.parent(found[1])
        if isinstance(arg, cst.Arg) and arg.keyword is not None and arg.keyword.value == "choices":
            return found[1]
        return None

    def applied(self, anchor, ctx):
        return has_any_twin(anchor)

    def rewrite(self, original, updated, ctx):
        return widen_collection(original, updated)
