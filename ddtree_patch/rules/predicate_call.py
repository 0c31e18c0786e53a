"""Calls of `x.is_dflash()` / `x.is_dflash_family()`: widened once, at the predicate's definition.

A shared call site needs no edit; the ledger still lists each one, so a reader sees every place
that now also runs for DDTREE. Where the policy finds that DDTree lacks the capability a call
gates, it narrows the call back: `x.is_dflash()` -> `(x.is_dflash() and not x.is_ddtree())`.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

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
    MUST_REWRITE = []  # a widening needs no edit here: the definition carries it
    NARROWS = True
    MUST_NARROW = [
        (
            "def supports_grammar_overlap(self):\n    return self.is_eagle() or self.is_dflash_family()\n",
            "def supports_grammar_overlap(self):\n"
            "    return self.is_eagle() or (self.is_dflash_family() and not self.is_ddtree())\n",
        ),
        (
            "if not spec_algorithm.is_dflash_family():\n    pass\n",
            "if not (spec_algorithm.is_dflash_family() and not spec_algorithm.is_ddtree()):\n    pass\n",
        ),
    ]
    MUST_CLAIM = [
        ("if spec.is_dflash():\n    pass\n", Decision.WIDEN),
        ("ok = runner.spec_algorithm.is_dflash_family() and x\n", Decision.WIDEN),
    ]
    MUST_NOT_TOUCH = [
        "def is_dflash(self):\n    return self.name in ('DFLASH', 'DDTREE')\n",
        "check = spec.is_dflash\n",
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        return predicate_call(token, ctx) if token.kind == tk.TokenKind.LOGIC else None

    def narrowed(self, anchor, ctx):
        parent = ctx.parent(anchor)
        return (
            isinstance(parent, cst.BooleanOperation)
            and isinstance(parent.operator, cst.And)
            and parent.left is anchor
            and m.matches(parent.right, _NOT_IS_DDTREE)
        )

    def narrow(self, original, updated, ctx):
        receiver = updated.func.value
        not_ddtree = cst.UnaryOperation(
            cst.Not(), cst.Call(cst.Attribute(receiver, cst.Name(tk.TWIN_PREDICATE)))
        )
        return cst.BooleanOperation(
            updated.with_changes(lpar=[], rpar=[]), cst.And(), not_ddtree,
            lpar=[cst.LeftParen()], rpar=[cst.RightParen()],
        )


_NOT_IS_DDTREE = m.UnaryOperation(
    operator=m.Not(), expression=m.Call(func=m.Attribute(attr=m.Name(tk.TWIN_PREDICATE)), args=[])
)
