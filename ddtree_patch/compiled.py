"""The one compile check every written Python file passes: in the plan (before a dry run shows
it) and again in the transaction (before anything is written)."""

from __future__ import annotations

from ddtree_patch.errors import EngineError


def check_compiles(path: str, data: bytes) -> None:
    try:
        compile(data, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        why = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, SyntaxError) else exc
        raise EngineError(f"the patched {path} would not compile ({why}): please report this bug") from exc
