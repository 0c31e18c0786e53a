"""DFlash's server-argument validation block: widen its test and run DDTree's validation after it.

Recognised by meaning, not by line: an `if` testing DFLASH (`== "DFLASH"`, `.is_dflash()`) whose
body calls `_handle_dflash(...)` (0.5.13 on), or that sits in `_handle_speculative_decoding`
(the inline block of 0.5.11-0.5.12). DDTree's own checks (budget defaults, gates) append to the
branch, so they see the settings DFlash's validation has just derived.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ddtree_patch import tokens as tk
from ddtree_patch.rules._twin import is_dflash_operand
from ddtree_patch.rules.base import Context, Rule, Token
from ddtree_patch.rules.equality import widen_equality
from ddtree_patch.rules.membership import has_any_twin, widen_collection

DFLASH_HANDLER = "_handle_dflash"
INLINE_VALIDATION_FUNCTIONS = frozenset({"_handle_speculative_decoding"})
HOOK = "validate_ddtree_server_args"
HOOK_LINES = (
    "from sglang.srt.speculative.ddtree.server_args import validate_ddtree_server_args\n",
    "validate_ddtree_server_args({server_args})\n",
)
_HANDLER_CALL = m.SimpleStatementLine(body=[m.Expr(m.Call(func=m.Name(DFLASH_HANDLER)))])


def _handler_call(branch: cst.If) -> cst.Call | None:
    for statement in branch.body.body:
        if m.matches(statement, _HANDLER_CALL):
            return statement.body[0].value
    return None


def _test_names_dflash(test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.Call):
        return m.matches(test, m.Call(func=m.Attribute(attr=m.Name("is_dflash")), args=[]))
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        sides = [test.left, test.comparisons[0].comparator]
        if any(is_dflash_operand(side) for side in sides):
            return True
        collection = test.comparisons[0].comparator
        return isinstance(collection, (cst.Tuple, cst.List, cst.Set)) and any(
            is_dflash_operand(e.value) for e in collection.elements
        )
    return False


def _test_widened(test: cst.BaseExpression) -> bool:
    """`.is_dflash()` (widened at its definition) or membership that already names the twin."""
    if isinstance(test, cst.Call):
        return True
    target = test.comparisons[0]
    collection = target.comparator
    return (
        isinstance(target.operator, (cst.In, cst.NotIn))
        and isinstance(collection, (cst.Tuple, cst.List, cst.Set))
        and has_any_twin(collection)
    )


class ValidationHook(Rule):
    id = "validation-hook"
    form = "validation-hook"
    MUST_REWRITE = [
        (
            "def handle(self, server_args):\n"
            "    if self.is_dflash():\n"
            "        _handle_dflash(server_args)\n",
            "def handle(self, server_args):\n"
            "    if self.is_dflash():\n"
            "        _handle_dflash(server_args)\n"
            "        from sglang.srt.speculative.ddtree.server_args import validate_ddtree_server_args\n"
            "        validate_ddtree_server_args(server_args)\n",
        ),
        (
            "class ServerArgs:\n"
            "    def _handle_speculative_decoding(self):\n"
            '        if self.speculative_algorithm == "DFLASH":\n'
            "            self.x = 1\n",
            "class ServerArgs:\n"
            "    def _handle_speculative_decoding(self):\n"
            '        if self.speculative_algorithm in ("DFLASH", "DDTREE"):\n'
            "            self.x = 1\n"
            "            from sglang.srt.speculative.ddtree.server_args import validate_ddtree_server_args\n"
            "            validate_ddtree_server_args(self)\n",
        ),
    ]
    MUST_NOT_TOUCH = [
        "def handle(self, a):\n    if self.is_dflash():\n        _handle_dflash(a)\n"
        "        from sglang.srt.speculative.ddtree.server_args import validate_ddtree_server_args\n"
        "        validate_ddtree_server_args(a)\n",
        "def handle(self, a):\n    if self.is_eagle():\n        _handle_eagle(a)\n",
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        if token.kind != tk.TokenKind.LOGIC:
            return None
        node: cst.CSTNode = token.node
        for ancestor in ctx.ancestors(token.node):
            if isinstance(ancestor, cst.If):
                if ancestor.test is not node or not _test_names_dflash(node):
                    return None
                statement_level = isinstance(ctx.parent(ancestor), (cst.IndentedBlock, cst.Module))
                inline = ctx.function in INLINE_VALIDATION_FUNCTIONS
                if statement_level and (inline or _handler_call(ancestor) is not None):
                    return ancestor
                return None
            if isinstance(ancestor, cst.BaseSuite) or isinstance(ancestor, cst.BaseStatement):
                return None
            node = ancestor
        return None

    def applied(self, anchor, ctx):
        return bool(m.findall(anchor.body, m.Name(HOOK))) and _test_widened(anchor.test)

    def rewrite(self, original, updated, ctx):
        test = updated.test
        if isinstance(original.test, cst.Comparison):
            operator = original.test.comparisons[0].operator
            if isinstance(operator, (cst.In, cst.NotIn)):
                test = test.with_changes(comparisons=[updated.test.comparisons[0].with_changes(
                    comparator=widen_collection(original.test.comparisons[0].comparator,
                                                updated.test.comparisons[0].comparator))])
            else:
                test = widen_equality(original.test, updated.test)
        if m.findall(original.body, m.Name(HOOK)):  # hooked by hand or earlier: widen the test only
            return updated.with_changes(test=test)
        handler = _handler_call(original)
        server_args = ctx.code(handler.args[0].value) if handler is not None and handler.args else "self"
        hook = [ctx.statement(line.format(server_args=server_args)) for line in HOOK_LINES]
        body = updated.body.with_changes(body=[*updated.body.body, *hook])
        return updated.with_changes(test=test, body=body)
