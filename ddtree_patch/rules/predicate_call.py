"""Calls of `x.is_dflash()` / `x.is_dflash_family()`: widened once, at the predicate's definition.

The call site needs no edit; the ledger still lists each one, so a reader sees every place that
now also runs for DDTREE, and the policy can mark the ones DDTree must not share.
"""

from __future__ import annotations

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules.base import Context, Rule, Token
from ddtree_patch.sites import Decision


def predicate_call(token: Token, ctx: Context) -> cst.Call | None:
    node = token.node
    attribute = ctx.parent(node)
    if not (isinstance(node, cst.Name) and node.value in tk.PREDICATES):
        return None
    if not (isinstance(attribute, cst.Attribute) and attribute.attr is node):
        return None
    call = ctx.parent(attribute)
    if isinstance(call, cst.Call) and call.func is attribute and not call.args:
        return call
    return None


class PredicateCall(Rule):
    id = "predicate-call"
    form = "predicate-call"
    decision = Decision.WIDEN
    MUST_REWRITE = []  # classifies only: the definition carries the change
    MUST_NOT_TOUCH = [
        "if spec.is_dflash():\n    pass\n",
        "ok = runner.spec_algorithm.is_dflash_family() and x\n",
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        return predicate_call(token, ctx) if token.kind == tk.TokenKind.LOGIC else None
