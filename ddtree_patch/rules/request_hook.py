"""The scheduler's DFlash request check: DDTree's own refusals run first, then DFlash's.

Recognised by meaning: an `if` testing DFLASH (`x.is_dflash()`, `x.is_dflash_family()`, or a name
test) whose body assigns `msg = validate_dflash_request(req, ...)`. The assignment becomes
`msg = validate_ddtree_request(x, req) or validate_dflash_request(req, ...)`, so a DDTREE request
asking for a feature DDTree lacks is aborted with DDTree's own message by the scheduler's existing
abort path, and the server keeps serving the others.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ddtree_patch import tokens as tk
from ddtree_patch.rules.base import Context, Rule, Token

DFLASH_VALIDATOR = "validate_dflash_request"
HOOK = "validate_ddtree_request"
IMPORT = "from sglang.srt.speculative.ddtree.requests import validate_ddtree_request\n"
_VALIDATE = m.Call(func=m.Name(DFLASH_VALIDATOR))
# Also the rewritten line, so the rule still owns its site after apply (and `applied` sees it).
_HOOKED = m.BooleanOperation(left=m.Call(func=m.Name(HOOK)), operator=m.Or(), right=_VALIDATE)
_ASSIGN = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name())],
                                               value=m.OneOf(_VALIDATE, _HOOKED))])
_PREDICATE = m.Call(func=m.Attribute(attr=m.OneOf(*(m.Name(p) for p in tk.PREDICATES))), args=[])


def _validator_line(branch: cst.If) -> cst.SimpleStatementLine | None:
    return next((s for s in branch.body.body if m.matches(s, _ASSIGN)), None)


class RequestHook(Rule):
    id = "request-hook"
    form = "request-hook"
    MUST_REWRITE = [
        (
            "def handle(self, req):\n"
            "    if self.spec_algorithm.is_dflash_family():\n"
            "        error_msg = validate_dflash_request(req, self.enable_overlap)\n"
            "        if error_msg is not None:\n"
            "            return error_msg\n",
            "def handle(self, req):\n"
            "    if self.spec_algorithm.is_dflash_family():\n"
            "        from sglang.srt.speculative.ddtree.requests import validate_ddtree_request\n"
            "        error_msg = validate_ddtree_request(self.spec_algorithm, req) or validate_dflash_request(req, self.enable_overlap)\n"
            "        if error_msg is not None:\n"
            "            return error_msg\n",
        ),
    ]
    MUST_NOT_TOUCH = [
        "def handle(self, req):\n    if self.spec_algorithm.is_dflash():\n        error_msg = check(req)\n",
        "def handle(self, req):\n    if self.spec_algorithm.is_eagle():\n        error_msg = validate_dflash_request(req)\n",
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        if token.kind != tk.TokenKind.LOGIC:
            return None
        attribute = ctx.parent(token.node)
        call = ctx.parent(attribute) if isinstance(attribute, cst.Attribute) else None
        branch = ctx.parent(call) if call is not None else None
        if not (isinstance(branch, cst.If) and branch.test is call and m.matches(call, _PREDICATE)):
            return None
        return branch if _validator_line(branch) is not None else None

    def applied(self, anchor, ctx):
        return bool(m.findall(anchor.body, m.Name(HOOK)))

    def rewrite(self, original, updated, ctx):
        line = _validator_line(updated)
        assign = line.body[0]
        request = ctx.code(assign.value.args[0].value) if assign.value.args else "req"
        receiver = ctx.code(original.test.func.value)
        value = f"{HOOK}({receiver}, {request}) or {ctx.code(assign.value)}"
        new_assign = ctx.statement(f"{ctx.code(assign.targets[0].target)} = {value}\n")
        new_assign = new_assign.with_changes(leading_lines=line.leading_lines)
        body = []
        for statement in updated.body.body:
            body.extend([ctx.statement(IMPORT), new_assign] if statement is line else [statement])
        return updated.with_changes(body=updated.body.with_changes(body=body))
