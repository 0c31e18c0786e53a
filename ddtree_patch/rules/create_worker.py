"""`create_worker`'s `if self.is_dflash():` branch: put a DDTREE branch in front of it.

`is_dflash()` is widened, so without this branch DDTREE would get DFlash's worker; the DDTree
worker (a drop-in module) picks the adapter for this release's DFlash worker family.
"""

from __future__ import annotations

import re

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules.base import Context, Rule, Token
from ddtree_patch.rules.predicate_call import predicate_call

DISPATCH_FUNCTION = "create_worker"
BRANCH = (
    "if {receiver}.is_ddtree():\n"
    "    from sglang.srt.speculative.ddtree.worker import worker_class\n"
    "\n"
    "    return worker_class({server_args})\n"
)


_SERVER_ARGS_PARAM = re.compile(r"def\s+\w+\(\s*self\s*,\s*(\w+)")


class CreateWorker(Rule):
    id = "create-worker"
    form = "worker-dispatch"
    MUST_REWRITE = [
        (
            "class S(Enum):\n"
            "    def create_worker(self, server_args):\n"
            "        if self.is_dflash():\n"
            "            from x import DFlashWorker\n"
            "\n"
            "            return DFlashWorker\n",
            "class S(Enum):\n"
            "    def create_worker(self, server_args):\n"
            "        if self.is_ddtree():\n"
            "            from sglang.srt.speculative.ddtree.worker import worker_class\n"
            "\n"
            "            return worker_class(server_args)\n"
            "        if self.is_dflash():\n"
            "            from x import DFlashWorker\n"
            "\n"
            "            return DFlashWorker\n",
        ),
    ]
    MUST_NOT_TOUCH = [
        "def other(self):\n    if self.is_dflash():\n        return 1\n",
        "def create_worker(self, a):\n    if self.is_ddtree():\n        return 2\n    if self.is_dflash():\n        return 1\n",
        "def create_worker(self, a):\n    x = self.is_dflash()\n",
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        call = predicate_call(token, ctx) if token.kind == tk.TokenKind.LOGIC else None
        if call is None or token.node.value != "is_dflash" or ctx.function != DISPATCH_FUNCTION:
            return None
        branch = ctx.parent(call)
        if isinstance(branch, cst.If) and branch.test is call and isinstance(ctx.parent(branch), cst.IndentedBlock):
            return branch
        return None

    def applied(self, anchor, ctx):
        return f".{tk.TWIN_PREDICATE}()" in ctx.function_source()

    def rewrite(self, original, updated, ctx):
        param = _SERVER_ARGS_PARAM.search(ctx.function_source())
        server_args = param.group(1) if param else "server_args"
        receiver = ctx.code(original.test.func.value)
        branch = ctx.statement(BRANCH.format(receiver=receiver, server_args=server_args))
        return cst.FlattenSentinel([branch.with_changes(leading_lines=original.leading_lines), updated])
