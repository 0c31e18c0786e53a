"""Releases that build the CLI by hand (0.5.11-0.5.13): add DDTree's flags after `--speculative-algorithm`."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ddtree_patch import tokens as tk
from ddtree_patch.rules.base import Context, Rule, Token
from ddtree_patch.rules.server_arg_field import FIELDS

_TYPED_FLAG = '{parser}.add_argument(\n    "{flag}",\n    type={type},\n    default={default},\n    help="{help}",\n)\n'
_BOOL_FLAG = '{parser}.add_argument(\n    "{flag}",\n    action="store_true",\n    help="{help}",\n)\n'
_ARGPARSE_TYPES = {"Optional[int]": "int", "Optional[str]": "str"}  # FIELDS' types -> argparse's type=


def _declaration(parser: str, field: str, type_: str, default: str, help_: str) -> str:
    if type_ == "bool":
        return _BOOL_FLAG.format(parser=parser, flag=_flag(field), help=help_)
    return _TYPED_FLAG.format(parser=parser, flag=_flag(field), type=_ARGPARSE_TYPES[type_], default=default,
                              help=help_)


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


class ArgparseFlag(Rule):
    id = "argparse-flag"
    form = "argparse-flag"
    MUST_REWRITE = [
        (
            'def add(parser):\n    parser.add_argument(\n        "--speculative-algorithm",\n        type=str,\n    )\n',
            'def add(parser):\n    parser.add_argument(\n        "--speculative-algorithm",\n        type=str,\n    )\n'
            + "".join(
                ("    " + line if line else "") + "\n"
                for field, type_, default, help_ in FIELDS
                for line in _declaration("parser", field, type_, default, help_).splitlines()
            ),
        ),
    ]
    MUST_NOT_TOUCH = [
        'def add(parser):\n    parser.add_argument("--speculative-algorithm")\n    parser.add_argument("--speculative-ddtree-budget")\n',
        'def add(parser):\n    parser.add_argument("--speculative-num-steps")\n',
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        if token.kind != tk.TokenKind.ANCHOR or not isinstance(token.node, cst.SimpleString):
            return None
        arg = ctx.parent(token.node)
        call = ctx.parent(arg)
        expr = ctx.parent(call)
        line = ctx.parent(expr)
        if (
            isinstance(call, cst.Call)
            and m.matches(call.func, m.Attribute(attr=m.Name("add_argument")))
            and isinstance(expr, cst.Expr)
            and isinstance(line, cst.SimpleStatementLine)
        ):
            return line
        return None

    def applied(self, anchor, ctx):
        return f'"{_flag(FIELDS[0][0])}"' in (ctx.function_source() or ctx.code(ctx.module))

    def rewrite(self, original, updated, ctx):
        parser = ctx.code(original.body[0].value.func.value)
        flags = [ctx.statement(_declaration(parser, *spec)) for spec in FIELDS]
        return cst.FlattenSentinel([updated, *flags])
