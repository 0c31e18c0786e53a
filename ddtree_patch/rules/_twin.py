"""Shared expression surgery: the DDTREE twin of a DFLASH expression, and sibling insertion."""

from __future__ import annotations

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules.base import Context

_PROPERTY_ATTRS = frozenset({"name", "value"})


class _Twin(cst.CSTTransformer):
    def leave_SimpleString(self, original, updated):
        if tk.is_dflash_string(updated.evaluated_value):
            return updated.with_changes(value=updated.value.replace("DFLASH", "DDTREE").replace("dflash", "ddtree"))
        return updated

    def leave_Name(self, original, updated):
        if updated.value == tk.ENUM_MEMBER:
            return updated.with_changes(value=tk.TWIN_MEMBER)
        return updated


def twin(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`"DFLASH"` -> `"DDTREE"`, `X.DFLASH.name` -> `X.DDTREE.name` (quotes and case kept)."""
    return expr.visit(_Twin())


def is_dflash_operand(expr: cst.CSTNode) -> bool:
    """`"DFLASH"` exactly, or an attribute chain whose member is DFLASH (`A.DFLASH.name`)."""
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value == tk.ENUM_MEMBER
    while isinstance(expr, cst.Attribute):
        if expr.attr.value == tk.ENUM_MEMBER:
            return True
        expr = expr.value
    return False


def operand(token: cst.CSTNode, ctx: Context) -> cst.BaseExpression | None:
    """The expression a DFLASH token stands for: the string, `X.DFLASH`, or `X.DFLASH.name`."""
    parent = ctx.parent(token)
    if isinstance(token, cst.SimpleString):
        return None if isinstance(parent, cst.ConcatenatedString) else token
    if not (isinstance(token, cst.Name) and token.value == tk.ENUM_MEMBER):
        return None
    if not (isinstance(parent, cst.Attribute) and parent.attr is token):
        return None
    expr: cst.BaseExpression = parent
    up = ctx.parent(expr)
    while isinstance(up, cst.Attribute) and up.value is expr and up.attr.value in _PROPERTY_ATTRS:
        expr, up = up, ctx.parent(up)
    return expr


def element_of(token: cst.CSTNode, ctx: Context) -> tuple[cst.Element, cst.Tuple | cst.List | cst.Set] | None:
    """(element, collection) when the token's operand is an element of a collection literal."""
    expr = operand(token, ctx)
    if expr is None or not is_dflash_operand(expr):
        return None
    element = ctx.parent(expr)
    if not isinstance(element, cst.Element) or element.value is not expr:
        return None
    collection = ctx.parent(element)
    if isinstance(collection, (cst.Tuple, cst.List, cst.Set)):
        return element, collection
    return None


def has_twin(collection: cst.Tuple | cst.List | cst.Set, element: cst.Element) -> bool:
    twin_code = cst.Module([]).code_for_node(twin(element.value))
    return any(cst.Module([]).code_for_node(e.value) == twin_code for e in collection.elements)


def insert_twin(collection, index: int):
    """Insert the twin of element `index` right after it, keeping commas, newlines and indents."""
    elements = list(collection.elements)
    element = elements[index]
    new = element.with_changes(value=twin(element.value))
    last = index == len(elements) - 1
    if not last:
        elements[index + 1:index + 1] = [new.with_changes(comma=element.comma)]
    elif index > 0 and isinstance(elements[index - 1].comma, cst.Comma):
        # The last element's comma (if any) faces the closing bracket; the separator between
        # elements is the one its predecessor uses.
        elements[index] = element.with_changes(comma=elements[index - 1].comma)
        elements.append(new.with_changes(comma=element.comma))
    else:
        elements[index] = element.with_changes(
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        )
        elements.append(new.with_changes(comma=element.comma))
    return collection.with_changes(elements=elements)
