"""The `--speculative-algorithm` help text that lists builtins: "... NGRAM, DFLASH." gains DDTREE.

The only text the patch rewrites: users read this list to learn which names are accepted.
"""

from __future__ import annotations

import re

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules.base import Context, Rule, Token

_WORD = re.compile(r"\bDFLASH\b")


class BuiltinsHelp(Rule):
    id = "builtins-help"
    form = "builtins-help"
    MUST_REWRITE = [
        (
            'h = "Speculative algorithm. Builtins: EAGLE, NGRAM, DFLASH. Or any name."\n',
            'h = "Speculative algorithm. Builtins: EAGLE, NGRAM, DFLASH, DDTREE. Or any name."\n',
        ),
        (
            'h = (\n    "Builtins: EAGLE, "\n    "NGRAM, DFLASH. Or any "\n    "name."\n)\n',
            'h = (\n    "Builtins: EAGLE, "\n    "NGRAM, DFLASH, DDTREE. Or any "\n    "name."\n)\n',
        ),
    ]
    MUST_NOT_TOUCH = [
        'h = "Builtins: EAGLE, DFLASH, DDTREE."\n',
        'h = "DFLASH only. Block size."\n',
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        return token.node if token.kind == tk.TokenKind.HELP else None

    def applied(self, anchor, ctx):
        return tk.TWIN_MEMBER in anchor.value

    def rewrite(self, original, updated, ctx):
        return updated.with_changes(value=_WORD.sub(f"DFLASH, {tk.TWIN_MEMBER}", updated.value, count=1))
