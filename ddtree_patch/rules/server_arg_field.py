"""Declare DDTree's server arguments beside `speculative_algorithm`, in the form the release uses.

Plain dataclass fields (0.5.11-0.5.13, where argparse flags are added separately) or annotated
fields `A[type, "help"]` that generate the CLI flags themselves (0.5.14 on, in `server_args.py`
or `arg_groups/fields/spec.py`).
"""

from __future__ import annotations

import libcst as cst

from ddtree_patch import tokens as tk
from ddtree_patch.rules.base import Context, Rule, Token

# (field, type, default, help): the single description of DDTree's flags, shared with argparse.
FIELDS = (
    ("speculative_ddtree_budget", "Optional[str]", "None",
     "DDTREE only. Draft-tree budget: candidate nodes verified per round (verify width budget + 1), "
     "or auto: each round picks the budget from a ladder by measured cost and predicted acceptance. "
     "Default: the DFlash block size - 1."),
    ("speculative_ddtree_topk", "Optional[int]", "None",
     "DDTREE only. Cap on candidate tokens per tree depth. Default: the budget."),
    ("speculative_ddtree_allow_hybrid_unsafe", "bool", "False",
     "DDTREE only. Allow hybrid targets (Mamba, linear attention, GDN, sliding window), "
     "whose recurrent or windowed state DDTree does not handle per tree node."),
)


def _annotated_alias(annotation: cst.BaseExpression) -> str | None:
    """`A` when the field is declared as `A[Optional[str], "help"]`."""
    if isinstance(annotation, cst.Subscript) and isinstance(annotation.value, cst.Name):
        if annotation.value.value not in {"Optional", "Union"} and len(annotation.slice) >= 2:
            return annotation.value.value
    return None


class ServerArgField(Rule):
    id = "server-arg-field"
    form = "server-arg-field"
    MUST_REWRITE = [
        (
            "class ServerArgs:\n    speculative_algorithm: Optional[str] = None\n    x: int = 1\n",
            "class ServerArgs:\n    speculative_algorithm: Optional[str] = None\n"
            "    speculative_ddtree_budget: Optional[str] = None\n"
            "    speculative_ddtree_topk: Optional[int] = None\n"
            "    speculative_ddtree_allow_hybrid_unsafe: bool = False\n"
            "    x: int = 1\n",
        ),
        (
            'class Spec:\n    speculative_algorithm: A[\n        Optional[str],\n        "Speculative algorithm.",\n    ] = None\n',
            'class Spec:\n    speculative_algorithm: A[\n        Optional[str],\n        "Speculative algorithm.",\n    ] = None\n'
            f'    speculative_ddtree_budget: A[Optional[str], "{FIELDS[0][3]}"] = None\n'
            f'    speculative_ddtree_topk: A[Optional[int], "{FIELDS[1][3]}"] = None\n'
            f'    speculative_ddtree_allow_hybrid_unsafe: A[bool, "{FIELDS[2][3]}"] = False\n',
        ),
    ]
    MUST_NOT_TOUCH = [
        "class ServerArgs:\n    speculative_algorithm: Optional[str] = None\n    speculative_ddtree_budget: Optional[int] = None\n",
        "def f():\n    speculative_algorithm: Optional[str] = None\n",
    ]

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        line = ctx.parent(token.node)
        if token.kind == tk.TokenKind.ANCHOR and isinstance(token.node, cst.AnnAssign) and ctx.function is None:
            return line if isinstance(line, cst.SimpleStatementLine) else None
        return None

    def applied(self, anchor, ctx):
        return FIELDS[0][0] in ctx.class_members

    def rewrite(self, original, updated, ctx):
        alias = _annotated_alias(original.body[0].annotation.annotation)
        lines = []
        for name, type_, default, help_ in FIELDS:
            annotation = f'{alias}[{type_}, "{help_}"]' if alias else type_
            lines.append(ctx.statement(f"{name}: {annotation} = {default}\n"))
        return cst.FlattenSentinel([updated, *lines])
