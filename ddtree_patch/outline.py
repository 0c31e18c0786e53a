"""Find, with Python's fast `ast` parser, the statements that hold DFLASH logic tokens.

libcst is exact but slow; parsing only these statements (each the outermost statement of its
function, class or module body that holds a token) instead of whole files is what keeps a cold
audit well under a naive full parse. Subtrees whose lines never mention a token are not walked.
The outline also counts the mentions that are references or text, which are never edited.
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass, field

from ddtree_patch import textflow
from ddtree_patch import tokens as tk

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_BODIES = (ast.Module, ast.ClassDef, *_FUNCS)
_INTERESTING = re.compile(rb"dflash|speculative_algorithm|--speculative-algorithm", re.IGNORECASE)


@dataclass
class Chunk:
    """Lines [start, end] (1-based, inclusive) of one statement to parse with libcst."""

    start: int
    end: int
    depth: int  # compound statements around it (each adds one indentation level)
    scope: tuple[str, ...]  # enclosing class/function names outside the chunk
    function: str | None  # innermost enclosing function outside the chunk
    function_lines: tuple[int, int] | None  # that function's own line range
    class_members: frozenset[str]  # names defined in the innermost enclosing class
    class_level: bool  # the statement sits directly in a class body
    tokens: int = 0  # logic tokens the outline saw inside (the finder must see as many)
    strings: set[tuple[int, int]] = field(default_factory=set)  # (line, column in characters) of string tokens


@dataclass
class Outline:
    chunks: list[Chunk] = field(default_factory=list)
    logic_mentions: int = 0  # "dflash" occurrences inside logic tokens
    reference_mentions: int = 0  # inside identifiers that are not logic tokens


def _class_members(node: ast.ClassDef) -> frozenset[str]:
    names: set[str] = set()
    for stmt in node.body:
        if isinstance(stmt, (*_FUNCS, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            names.add(stmt.target.id)
    return frozenset(names)


def _logic_kind(node: ast.AST, parent: ast.AST | None, in_class_body: bool) -> tk.TokenKind | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if isinstance(parent, ast.JoinedStr):
            return None
        if tk.is_dflash_string(node.value):
            return tk.TokenKind.LOGIC
        if tk.is_builtins_help(node.value):
            return tk.TokenKind.HELP
        if node.value == tk.ALGORITHM_FLAG and isinstance(parent, ast.Call):
            if parent.args and parent.args[0] is node:
                return tk.TokenKind.ANCHOR
        return None
    if isinstance(node, ast.Name) and node.id == tk.ENUM_MEMBER:
        return tk.TokenKind.LOGIC
    if isinstance(node, ast.Attribute) and (node.attr == tk.ENUM_MEMBER or node.attr in tk.PREDICATES):
        return tk.TokenKind.LOGIC
    if isinstance(node, _FUNCS) and node.name in tk.PREDICATES:
        return tk.TokenKind.LOGIC
    if (
        in_class_body
        and isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id == tk.ALGORITHM_FIELD
    ):
        return tk.TokenKind.ANCHOR
    return None


def _identifier_mentions(node: ast.AST) -> int:
    """Mentions of dflash in identifiers this node introduces or uses (not in its children)."""
    names: list[str] = []
    if isinstance(node, ast.Name):
        names.append(node.id)
    elif isinstance(node, ast.Attribute):
        names.append(node.attr)
    elif isinstance(node, (*_FUNCS, ast.ClassDef)):
        names.append(node.name)
    elif isinstance(node, ast.alias):
        names.extend(n for n in (node.name, node.asname) if n)
    elif isinstance(node, ast.arg):
        names.append(node.arg)
    elif isinstance(node, ast.keyword) and node.arg:
        names.append(node.arg)
    elif isinstance(node, ast.ImportFrom) and node.module:
        names.append(node.module)
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        names.extend(node.names)
    return sum(tk.count_mentions(n) for n in names)


def _start_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


@dataclass(frozen=True)
class _Where:
    """What the walk knows about the enclosing statement bodies."""

    scope: tuple[str, ...] = ()
    function: str | None = None
    function_lines: tuple[int, int] | None = None
    members: frozenset[str] = frozenset()
    depth: int = 0  # compound statements entered so far
    body_owner: bool = True  # the current node's statement children start chunks
    class_body: bool = False


class _Walker:
    def __init__(self, interesting: list[int], lines: list[bytes]) -> None:
        self.outline = Outline()
        self.chunks: dict[int, Chunk] = {}
        self.interesting = interesting
        self.lines = lines
        self.ancestors: list[ast.AST] = []

    def _string_kind(self, node: ast.AST, parent: ast.AST | None) -> tk.TokenKind | None:
        """A string literal naming DFLASH that is not proven text; references are counted here."""
        if isinstance(parent, ast.JoinedStr):
            return None  # judged as part of its f-string
        value = textflow.string_value(node)
        if value is None or "dflash" not in value.lower():
            return None
        if not textflow.names_dflash(value):
            self.outline.reference_mentions += tk.count_mentions(value)
            return None
        return None if textflow.is_text(node, self.ancestors) else tk.TokenKind.STRING

    def _column(self, node: ast.AST) -> tuple[int, int]:
        line = self.lines[node.lineno - 1][: node.col_offset]
        return node.lineno, len(line.decode("utf-8", errors="replace"))

    def _relevant(self, node: ast.AST) -> bool:
        start = getattr(node, "lineno", None)
        if start is None:
            return True
        if isinstance(node, ast.stmt):
            start = _start_line(node)
        end = getattr(node, "end_lineno", None) or start
        i = bisect.bisect_left(self.interesting, start)
        return i < len(self.interesting) and self.interesting[i] <= end

    def walk(self, node: ast.AST, parent: ast.AST | None, where: _Where, chunk: Chunk | None) -> None:
        kind = _logic_kind(node, parent, where.class_body and isinstance(node, ast.stmt))
        if kind is None and chunk is not None:
            kind = self._string_kind(node, parent)
            if kind is not None:
                chunk.strings.add(self._column(node))
        ident = _identifier_mentions(node)
        if kind is not None and chunk is not None:
            value = textflow.string_value(node)
            self.outline.logic_mentions += ident or (tk.count_mentions(value) if value is not None else 0)
            chunk.tokens += 1
        else:
            self.outline.reference_mentions += ident

        inner = where
        if isinstance(node, ast.ClassDef):
            inner = _Where(where.scope + (node.name,), where.function, where.function_lines,
                           _class_members(node), where.depth + 1, True, True)
        elif isinstance(node, _FUNCS):
            inner = _Where(where.scope + (node.name,), node.name,
                           (_start_line(node), node.end_lineno or node.lineno),
                           where.members, where.depth + 1, True, False)
        elif isinstance(node, ast.stmt):
            inner = _Where(where.scope, where.function, where.function_lines, where.members,
                           where.depth + (1 if _is_compound(node) else 0), False, False)
        elif isinstance(node, ast.Module):
            inner = _Where()
        self.ancestors.append(node)
        for child in ast.iter_child_nodes(node):
            if not self._relevant(child):
                continue
            child_chunk = chunk
            if isinstance(child, ast.stmt) and inner.body_owner and isinstance(node, _BODIES):
                child_chunk = self._chunk_for(child, inner)
            self.walk(child, node, inner, child_chunk)
        self.ancestors.pop()

    def _chunk_for(self, statement: ast.stmt, where: _Where) -> Chunk:
        chunk = self.chunks.get(id(statement))
        if chunk is None:
            chunk = Chunk(_start_line(statement), statement.end_lineno or statement.lineno, where.depth,
                          where.scope, where.function, where.function_lines, where.members,
                          where.class_body)
            self.chunks[id(statement)] = chunk
        return chunk


def _is_compound(node: ast.stmt) -> bool:
    return hasattr(node, "body")


def outline_source(data: bytes) -> Outline:
    """Raises SyntaxError for a file this Python cannot parse (the caller reports it skipped)."""
    tree = ast.parse(data)
    lines = data.splitlines()
    interesting = [i for i, line in enumerate(lines, 1) if _INTERESTING.search(line)]
    walker = _Walker(interesting, lines)
    walker.walk(tree, None, _Where(), None)
    chunks = sorted((c for c in walker.chunks.values() if c.tokens), key=lambda c: (c.start, -c.end))
    merged: list[Chunk] = []
    for chunk in chunks:  # a definition's header token and a token in its body
        if merged and chunk.start <= merged[-1].end:
            merged[-1].tokens += chunk.tokens
            merged[-1].strings |= chunk.strings
            merged[-1].end = max(merged[-1].end, chunk.end)
            continue
        merged.append(chunk)
    walker.outline.chunks = merged
    return walker.outline
