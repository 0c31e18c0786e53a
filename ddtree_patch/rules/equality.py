"""`x == "DFLASH"` / `!=` / `is`, either side, also `SpeculativeAlgorithm.DFLASH` and its `.name`.

Widening turns the test into membership of the pair, so the left operand is still evaluated once:
`x == "DFLASH"` -> `x in ("DFLASH", "DDTREE")`, `x != ...` -> `x not in (...)`.
Only the exact upper-case literal is claimed: `x.lower() == "dflash"` stays UNHANDLED for a person.
"""

from __future__ import annotations

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules._twin import is_dflash_operand, operand, twin
from ddtree_patch.rules.base import Context, Rule, Token

_POSITIVE = (cst.Equal, cst.Is)
_NEGATIVE = (cst.NotEqual, cst.IsNot)


def equality_of(token: Token, ctx: Context) -> cst.Comparison | None:
    expr = operand(token.node, ctx)
    if expr is None or not is_dflash_operand(expr):
        return None
    parent = ctx.parent(expr)
    comparison = ctx.parent(parent) if isinstance(parent, cst.ComparisonTarget) else parent
    if not isinstance(comparison, cst.Comparison) or len(comparison.comparisons) != 1:
        return None
    if not isinstance(comparison.comparisons[0].operator, _POSITIVE + _NEGATIVE):
        return None
    return comparison


def widen_equality(original: cst.Comparison, updated: cst.Comparison) -> cst.Comparison:
    target = updated.comparisons[0]
    if is_dflash_operand(original.comparisons[0].comparator):
        other, dflash = updated.left, target.comparator
    else:
        other, dflash = target.comparator, updated.left
    op = target.operator
    if isinstance(op, _POSITIVE):
        new_op: cst.BaseCompOp = cst.In(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after)
    else:
        new_op = cst.NotIn(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after)
    pair = cst.Tuple(
        [
            cst.Element(dflash, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Element(twin(dflash)),
        ]
    )
    return updated.with_changes(left=other, comparisons=[cst.ComparisonTarget(new_op, pair)])


class Equality(Rule):
    id = "equality"
    form = "equality"
    MUST_REWRITE = [
        ('if algo == "DFLASH":\n    pass\n', 'if algo in ("DFLASH", "DDTREE"):\n    pass\n'),
        ('ok = "DFLASH" != args.speculative_algorithm\n', 'ok = args.speculative_algorithm not in ("DFLASH", "DDTREE")\n'),
        (
            'x = (\n    get_spec().speculative_algorithm\n    == "DFLASH"\n)\n',
            'x = (\n    get_spec().speculative_algorithm\n    in ("DFLASH", "DDTREE")\n)\n',
        ),
        (
            "y = self == SpeculativeAlgorithm.DFLASH\n",
            "y = self in (SpeculativeAlgorithm.DFLASH, SpeculativeAlgorithm.DDTREE)\n",
        ),
        (
            "z = str(a).upper() == SpeculativeAlgorithm.DFLASH.name\n",
            "z = str(a).upper() in (SpeculativeAlgorithm.DFLASH.name, SpeculativeAlgorithm.DDTREE.name)\n",
        ),
        (
            "if spec is SpeculativeAlgorithm.DFLASH:\n    pass\n",
            "if spec in (SpeculativeAlgorithm.DFLASH, SpeculativeAlgorithm.DDTREE):\n    pass\n",
        ),
        ("w = algo is not SpeculativeAlgorithm.DFLASH\n", "w = algo not in (SpeculativeAlgorithm.DFLASH, SpeculativeAlgorithm.DDTREE)\n"),
    ]
    MUST_NOT_TOUCH = [
        'if x.lower() == "dflash":\n    pass\n',
        'if a == "DFLASH" == b:\n    pass\n',
        'if x < "DFLASH":\n    pass\n',
        'if x == "EAGLE":\n    pass\n',
        'msg = "DFLASH == x"\n',
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        return equality_of(token, ctx) if token.kind == tk.TokenKind.LOGIC else None

    def rewrite(self, original, updated, ctx):
        return widen_equality(original, updated)
