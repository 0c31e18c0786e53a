"""Allow-lists assigned by name: `NAMES = frozenset({"DFLASH", ...})`, `algos = (...)` in a function.

These gate features by name elsewhere, so DDTREE joins DFLASH wherever the policy widens it
(e.g. the plugin registry's reserved names, since DDTREE becomes a builtin member).
"""

from __future__ import annotations

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules._twin import element_of
from ddtree_patch.rules.base import Context, Rule, Token
from ddtree_patch.rules.membership import has_any_twin, widen_collection

_WRAPPERS = frozenset({"frozenset", "set", "tuple", "list"})


class AllowList(Rule):
    id = "allow-list"
    form = "allow-list"
    MUST_REWRITE = [
        ('_RESERVED = frozenset(\n    {"DFLASH", "EAGLE", "NONE"}\n)\n', '_RESERVED = frozenset(\n    {"DFLASH", "DDTREE", "EAGLE", "NONE"}\n)\n'),
        ('SUPPORTED: tuple = ("EAGLE", "DFLASH")\n', 'SUPPORTED: tuple = ("EAGLE", "DFLASH", "DDTREE")\n'),
        (
            "class C:\n    ALGOS = [SpeculativeAlgorithm.DFLASH]\n",
            "class C:\n    ALGOS = [SpeculativeAlgorithm.DFLASH, SpeculativeAlgorithm.DDTREE]\n",
        ),
        ('def f(a):\n    algos = ("EAGLE", "DFLASH")\n', 'def f(a):\n    algos = ("EAGLE", "DFLASH", "DDTREE")\n'),
    ]
    MUST_NOT_TOUCH = [
        'def f():\n    names = ("DFLASH", "DDTREE", "EAGLE")\n',
        'NAMES = sorted(["DFLASH"])\n',
        'NAMES = {"DFLASH": 1}\n',
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        found = element_of(token.node, ctx) if token.kind == tk.TokenKind.LOGIC else None
        if found is None:
            return None
        collection = found[1]
        value: cst.CSTNode = collection
        arg = ctx.parent(collection)
        if isinstance(arg, cst.Arg) and arg.keyword is None:
            call = ctx.parent(arg)
            if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name)
                    and call.func.value in _WRAPPERS and len(call.args) == 1):
                return None
            value = call
        assign = ctx.parent(value)
        if isinstance(assign, (cst.Assign, cst.AnnAssign)) and assign.value is value:
            return collection
        return None

    def applied(self, anchor, ctx):
        return has_any_twin(anchor)

    def rewrite(self, original, updated, ctx):
        return widen_collection(original, updated)
