"""Prose naming DFLASH handed on as a value: a label, a returned message, a field's help text.

`field_name="DFLASH block_size"`, `return "DFLASH ... does not support x"`, `reason = "DFLASH ..."`,
`A[int, "DFLASH only. Block size."]`. Such a string is shown to people, never compared, so the
rule only classifies (the policy keeps it). Prose means words separated by spaces: a regex,
a split list, an argv fragment or a dict/`.get` key is not claimed and stays UNHANDLED.
"""

from __future__ import annotations

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules.base import Context, Rule, Token
from ddtree_patch.sites import Decision


def _flow_target(node: cst.CSTNode, ctx: Context) -> tuple[cst.CSTNode, cst.CSTNode | None]:
    """Follow the value up through `+`, `%`, conditional expressions; (the value, its consumer)."""
    child, parent = node, ctx.parent(node)
    while (
        (isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, (cst.Add, cst.Modulo)))
        or (isinstance(parent, cst.IfExp) and parent.test is not child)
    ):
        child, parent = parent, ctx.parent(parent)
    return child, parent


def _is_handed_on(value: cst.CSTNode, consumer: cst.CSTNode | None, ctx: Context) -> bool:
    if isinstance(consumer, cst.Arg):
        return consumer.keyword is not None
    if isinstance(consumer, (cst.Return, cst.Assign, cst.AnnAssign)):
        return consumer.value is value
    if isinstance(consumer, cst.DictElement):
        return consumer.value is value
    if isinstance(consumer, cst.Element):  # an element of a returned tuple: `return False, "msg"`
        outer = ctx.parent(ctx.parent(consumer))
        return isinstance(outer, cst.Return)
    if isinstance(consumer, cst.Index):  # metadata of Annotated: `A[int, "help"]`
        element = ctx.parent(consumer)
        subscript = ctx.parent(element)
        return isinstance(subscript, cst.Subscript) and subscript.slice[0] is not element
    return False


def _text(node: cst.CSTNode) -> str:
    if isinstance(node, cst.ConcatenatedString):
        return _text(node.left) + _text(node.right)
    if isinstance(node, cst.FormattedString):
        return "".join(p.value for p in node.parts if isinstance(p, cst.FormattedStringText))
    return node.value if isinstance(node, cst.SimpleString) else ""


class Prose(Rule):
    id = "prose"
    form = "prose"
    MUST_CLAIM = [
        ('x = parse(raw, field_name="DFLASH block_size")\n', Decision.KEEP),
        ('def f(req):\n    return "DFLASH speculative decoding does not support " "logprobs yet."\n', Decision.KEEP),
        ('def f(n):\n    reason = ("DFLASH rehearsal exhausted memory for " f"{n} matrices")\n', Decision.KEEP),
        ('def f():\n    return False, "CP/TP-sharing DFLASH PD requires the same TP size"\n', Decision.KEEP),
        ('class S:\n    block: A[int, "DFLASH only. Block size."] = None\n', Decision.KEEP),
    ]
    MUST_NOT_TOUCH = [
        'if re.fullmatch("DFLASH|EAGLE", x):\n    pass\n',
        'names = "EAGLE,DFLASH".split(",")\n',
        'mode = table["DFLASH mode"]\n',
        'flags = {"DFLASH on": 1}\n',
        'check(x, "DFLASH or EAGLE")\n',
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        if token.kind != tk.TokenKind.STRING or not any(c.isspace() for c in _text(token.node).strip()):
            return None
        value, consumer = _flow_target(token.node, ctx)
        return token.node if _is_handed_on(value, consumer, ctx) else None
