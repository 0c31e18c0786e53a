"""`x in ("DFLASH", ...)` / `not in`, over tuple, list or set literals (also of enum members).

The twin goes right after DFLASH with the same comma and whitespace, so a trailing comma, a
one-per-line layout or a `None` element all survive: `("DFLASH", None)` -> `("DFLASH", "DDTREE", None)`.
"""

from __future__ import annotations

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules._twin import element_of, has_twin, insert_twin, is_dflash_operand
from ddtree_patch.rules.base import Context, Rule, Token


def collection_in_test(token: Token, ctx: Context):
    found = element_of(token.node, ctx)
    if found is None:
        return None
    target = ctx.parent(found[1])
    if isinstance(target, cst.ComparisonTarget) and isinstance(target.operator, (cst.In, cst.NotIn)):
        return found[1]
    return None


def widen_collection(original, updated):
    """Insert the twin after the first DFLASH element, unless one is already there."""
    if has_any_twin(original):
        return updated
    index = next(i for i, e in enumerate(original.elements) if is_dflash_operand(e.value))
    return insert_twin(updated, index)


def has_any_twin(collection) -> bool:
    return any(has_twin(collection, e) for e in collection.elements if is_dflash_operand(e.value))


class Membership(Rule):
    id = "membership"
    form = "membership"
    MUST_REWRITE = [
        ('if a in ("DFLASH", "EAGLE"):\n    pass\n', 'if a in ("DFLASH", "DDTREE", "EAGLE"):\n    pass\n'),
        ('if a not in ["EAGLE", "DFLASH"]:\n    pass\n', 'if a not in ["EAGLE", "DFLASH", "DDTREE"]:\n    pass\n'),
        ('ok = a in {"DFLASH"}\n', 'ok = a in {"DFLASH", "DDTREE"}\n'),
        ('ok = a in ("DFLASH",)\n', 'ok = a in ("DFLASH", "DDTREE",)\n'),
        ('ok = a in (None, "DFLASH")\n', 'ok = a in (None, "DFLASH", "DDTREE")\n'),
        (
            'ok = a in (\n    "EAGLE",\n    "DFLASH",\n)\n',
            'ok = a in (\n    "EAGLE",\n    "DFLASH",\n    "DDTREE",\n)\n',
        ),
        (
            "ok = s in (SpeculativeAlgorithm.EAGLE, SpeculativeAlgorithm.DFLASH)\n",
            "ok = s in (SpeculativeAlgorithm.EAGLE, SpeculativeAlgorithm.DFLASH, SpeculativeAlgorithm.DDTREE)\n",
        ),
    ]
    MUST_NOT_TOUCH = [
        'ok = a in ("DFLASH", "DDTREE")\n',
        'ok = a in ("EAGLE", "NGRAM")\n',
        'ok = a in ("dflash", "eagle")\n',
        'ok = f(("DFLASH", "EAGLE"))\n',
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        return collection_in_test(token, ctx) if token.kind == tk.TokenKind.LOGIC else None

    def applied(self, anchor, ctx):
        return has_any_twin(anchor)

    def rewrite(self, original, updated, ctx):
        return widen_collection(original, updated)
