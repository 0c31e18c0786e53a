"""Which string literals naming DFLASH are proven text, so never sites.

Text is identified positively: a docstring (or any bare string statement), or a string that flows
only into a message sink: the exception of a `raise`, an `assert` message, a logging / warnings /
print call, a `help=` / `description=` keyword, through f-strings, `+`, `%` and `.format` on the
way. Every other literal whose words include DFLASH (any case: `"DFLASH|EAGLE"`, `"EAGLE,DFLASH"`,
`"--speculative-algorithm=DFLASH"`, a dict or `.get` key) is a site: a rule decides it or it is
UNHANDLED. A literal where dflash is only part of an identifier (`"dflash_config"`,
`"set_dflash_layers_to_capture"`) names DFlash's own things and counts as a reference.
"""

from __future__ import annotations

import ast
import re

_WORD = re.compile(r"\bdflash\b", re.IGNORECASE)
_SINK_CALLS = frozenset({
    "print", "debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log",
    "info_once", "warning_once", "print_warning_once", "echo", "secho",
})
_SINK_KEYWORDS = frozenset({"help", "description", "epilog", "usage"})


def names_dflash(value: str) -> bool:
    """DFLASH appears as a word of the string (not only inside an identifier)."""
    return _WORD.search(value) is not None


def string_value(node: ast.AST) -> str | None:
    """The literal text of a string constant or f-string (its constant parts), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return None


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _is_sink_call(call: ast.Call, above: ast.AST | None) -> bool:
    name = _callee(call)
    return (isinstance(above, ast.Raise) and above.exc is call) or name in _SINK_CALLS or "warn" in name.lower()


def is_text(node: ast.AST, ancestors: list[ast.AST]) -> bool:
    """`ancestors`: the enclosing nodes, outermost first (the node's parent last)."""
    child = node
    for i in range(len(ancestors) - 1, -1, -1):
        parent = ancestors[i]
        above = ancestors[i - 1] if i else None
        if isinstance(parent, ast.Expr):
            return True  # a docstring, or a bare string statement
        if isinstance(parent, (ast.JoinedStr, ast.FormattedValue)):
            pass
        elif isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Add, ast.Mod)):
            pass
        elif isinstance(parent, ast.IfExp) and child is not parent.test:
            pass
        elif isinstance(parent, ast.Attribute) and parent.attr == "format":
            if not (isinstance(above, ast.Call) and above.func is parent):
                return False
        elif isinstance(parent, ast.Call):
            if child is parent.func:
                if not (isinstance(child, ast.Attribute) and child.attr == "format"):
                    return False
            else:
                return _is_sink_call(parent, above)
        elif isinstance(parent, ast.keyword):
            if parent.arg in _SINK_KEYWORDS:
                return True
            return isinstance(above, ast.Call) and _is_sink_call(above, ancestors[i - 2] if i > 1 else None)
        elif isinstance(parent, ast.Raise):
            return True
        elif isinstance(parent, ast.Assert):
            return child is parent.msg
        else:
            return False
        child = parent
    return False
