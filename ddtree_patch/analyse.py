"""One file, start to finish: outline with `ast`, parse the chunks with libcst, claim, decide, rewrite.

Pure: bytes in, sites and replacement text out. The scanner runs it in worker processes and
caches its result by file hash; the examples of every rule run through the same function.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from ddtree_patch import tokens as tk
from ddtree_patch.outline import Chunk, outline_source
from ddtree_patch.policy import Policy
from ddtree_patch.results import FileResult
from ddtree_patch.rules import RULES, Context, Rule, Token
from ddtree_patch.sites import EDITING, Decision, Site
from ddtree_patch.source_text import SourceText

__all__ = ["FileResult", "SourceText", "analyse_file"]


def _token_kind(node: cst.CSTNode, parent: cst.CSTNode | None, parents,
                class_body: bool = False) -> tk.TokenKind | None:
    """`class_body`: the chunk itself is a class-level statement (its class lies outside it)."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        if not isinstance(value, str):
            return None
        if isinstance(parent, cst.ConcatenatedString):
            root = parent
            while isinstance(parents.get(root), cst.ConcatenatedString):
                root = parents[root]
            whole = root.evaluated_value
            if isinstance(whole, str) and tk.is_builtins_help(whole) and tk.has_dflash_word(value):
                return tk.TokenKind.HELP
            return None
        if tk.is_dflash_string(value):
            return tk.TokenKind.LOGIC
        if tk.is_builtins_help(value):
            return tk.TokenKind.HELP
        if value == tk.ALGORITHM_FLAG and isinstance(parent, cst.Arg) and parent.keyword is None:
            call = parents.get(parent)
            if isinstance(call, cst.Call) and call.args and call.args[0] is parent:
                return tk.TokenKind.ANCHOR
        return None
    if isinstance(node, cst.Name):
        if isinstance(parent, cst.Attribute):
            is_attr = parent.attr is node
            if is_attr and (node.value == tk.ENUM_MEMBER or node.value in tk.PREDICATES):
                return tk.TokenKind.LOGIC
            if is_attr:
                return None
        if isinstance(parent, cst.FunctionDef) and parent.name is node:
            return tk.TokenKind.LOGIC if node.value in tk.PREDICATES else None
        if node.value == tk.ENUM_MEMBER and not isinstance(
            parent, (cst.Param, cst.ImportAlias, cst.ClassDef, cst.FunctionDef, cst.NameItem)
        ) and not (isinstance(parent, cst.Arg) and parent.keyword is node):
            return tk.TokenKind.LOGIC
        return None
    if isinstance(node, cst.AnnAssign):
        line = parent
        block = parents.get(line) if line is not None else None
        if (
            isinstance(node.target, cst.Name)
            and node.target.value == tk.ALGORITHM_FIELD
            and (
                (isinstance(block, cst.IndentedBlock) and isinstance(parents.get(block), cst.ClassDef))
                or (class_body and isinstance(line, cst.SimpleStatementLine))
            )
        ):
            return tk.TokenKind.ANCHOR
    return None


def _members(node: cst.ClassDef) -> frozenset[str]:
    names: set[str] = set()
    for statement in node.body.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            names.add(statement.name.value)
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    names.update(t.target.value for t in small.targets if isinstance(t.target, cst.Name))
                elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    names.add(small.target.value)
    return frozenset(names)


@dataclass(frozen=True)
class _Scope:
    kind: str  # "class" | "function"
    node: cst.ClassDef | cst.FunctionDef
    members: frozenset[str] = frozenset()  # for classes: the names they define


@dataclass(frozen=True)
class _Found:
    token: Token
    scope: tuple[str, ...]
    function: str | None
    class_members: frozenset[str]
    function_node: cst.FunctionDef | None  # the enclosing function when it lies inside the chunk


_STRINGS = (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)


class _Finder(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (ParentNodeProvider, PositionProvider)

    def __init__(self, chunk: Chunk, depth: int) -> None:
        super().__init__()
        self.chunk = chunk
        self.depth = depth  # wrapper lines above the chunk
        self.stack: list[_Scope] = []
        self.found: list[_Found] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.stack.append(_Scope("class", node, _members(node)))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._check(node)  # the predicate name belongs to the enclosing scope
        self.stack.append(_Scope("function", node))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.stack.pop()

    def on_visit(self, node: cst.CSTNode) -> bool:
        if not isinstance(node, cst.FunctionDef):
            self._check(node)
        return super().on_visit(node)

    def _is_string_token(self, node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
        """The outline marked this whole literal (a concatenation counts once) as a string token."""
        if not isinstance(node, _STRINGS) or isinstance(parent, cst.ConcatenatedString) or not self.chunk.strings:
            return False
        start = self.get_metadata(PositionProvider, node).start
        return (start.line - self.depth + self.chunk.start - 1, start.column) in self.chunk.strings

    def _check(self, node: cst.CSTNode) -> None:
        parents = self.metadata[ParentNodeProvider]
        if isinstance(node, cst.FunctionDef):
            kind = _token_kind(node.name, node, parents)
            token_node: cst.CSTNode = node.name
        elif isinstance(node, cst.Name) and isinstance(parents.get(node), cst.FunctionDef):
            return  # counted with its FunctionDef above
        elif self._is_string_token(node, parents.get(node)):
            kind, token_node = tk.TokenKind.STRING, node
        else:
            chunk_is_class_body = self.chunk.class_level and not self.stack
            kind = _token_kind(node, parents.get(node), parents, chunk_is_class_body)
            token_node = node
        if kind is None:
            return
        scope = self.chunk.scope + tuple(s.node.name.value for s in self.stack)
        if isinstance(node, cst.FunctionDef):
            scope += (node.name.value,)  # a definition's site is the definition itself
        function = next((s.node for s in reversed(self.stack) if s.kind == "function"), None)
        classes = [s.members for s in self.stack if s.kind == "class"]
        self.found.append(_Found(
            Token(token_node, kind), scope,
            function.name.value if function is not None else self.chunk.function,
            classes[-1] if classes else self.chunk.class_members,
            function,
        ))


def _function_source(node: cst.FunctionDef | None, chunk: Chunk, module: cst.Module, source: SourceText):
    """Lazily, the text of the function around a token (inside the chunk, or the one around it)."""
    if node is not None:
        return lambda: module.code_for_node(node)
    if chunk.function_lines is not None:
        first, last = chunk.function_lines
        return lambda: "".join(source.lines[first - 1:last])
    return lambda: ""


def _wrapper(chunk: Chunk, source: SourceText) -> tuple[str, int] | None:
    """Wrap an indented chunk in `if 1:` lines so libcst can parse it alone; None if it can't.

    One wrapper level per enclosing block, each one indentation unit deeper, so libcst infers
    the file's own unit for any block a rule creates.
    """
    first = source.lines[chunk.start - 1]
    indent = first[: len(first) - len(first.lstrip(" \t"))]
    if chunk.depth == 0:
        return ("", 0) if not indent else None
    unit = indent[: len(indent) // chunk.depth]
    if not unit or unit * chunk.depth != indent:
        return None
    return "".join(unit * j + "if 1:" + source.newline for j in range(chunk.depth)), chunk.depth


def analyse_file(path: str, data: bytes, policy: Policy, rules: tuple[Rule, ...] = RULES) -> FileResult:
    result = FileResult(path)
    try:
        source = SourceText.decode(data)
        outline = outline_source(data)
    except (SyntaxError, UnicodeDecodeError, ValueError) as error:
        result.skipped = f"not parseable by this Python: {type(error).__name__}: {error}"
        return result
    text = "".join(source.lines)
    total = tk.count_mentions(text)
    result.mentions = {
        "logic": outline.logic_mentions,
        "reference": outline.reference_mentions,
        "text": max(total - outline.logic_mentions - outline.reference_mentions, 0),
        "ddtree": tk.count_ddtree(text),
    }
    chunks = outline.chunks
    if any(_wrapper(c, source) is None for c in chunks):
        whole = Chunk(1, len(source.lines), 0, (), None, None, frozenset(), False, sum(c.tokens for c in chunks),
                      set().union(*(c.strings for c in chunks)))
        chunks = [whole]
    for chunk in chunks:
        _analyse_chunk(result, chunk, source, policy, rules)
    result.sites.sort(key=lambda s: (s.line, s.col))
    return result


def _analyse_chunk(result: FileResult, chunk: Chunk, source: SourceText,
                   policy: Policy, rules: tuple[Rule, ...]) -> None:
    prefix, depth = _wrapper(chunk, source)
    body = "".join(source.lines[chunk.start - 1:chunk.end])
    module = cst.parse_module(prefix + body)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    finder = _Finder(chunk, depth)
    wrapper.visit(finder)
    parents = wrapper.resolve(ParentNodeProvider)
    positions = wrapper.resolve(PositionProvider)
    edits: dict[cst.CSTNode, tuple[Rule, Context, bool]] = {}
    for found in finder.found:
        token, scope = found.token, found.scope
        ctx = Context(result.path, module, parents, scope, found.function, found.class_members,
                      _function_source(found.function_node, chunk, module, source))
        rule, anchor = next(((r, a) for r in rules if (a := r.claim(token, ctx)) is not None), (None, None))
        qualname = ".".join(scope) or "<module>"
        decision, reason, capability = policy.decide(result.path, qualname, rule)
        narrow = decision is Decision.NARROW
        if narrow and not (rule is not None and rule.NARROWS):
            decision, reason = Decision.UNHANDLED, f"the policy narrows a form that cannot be narrowed: {reason}"
            narrow = False
        if rule is None or anchor is None:
            applied = False
        else:
            applied = rule.narrowed(anchor, ctx) if narrow else rule.applied(anchor, ctx)
        if rule is not None and anchor is not None and decision in EDITING and not applied:
            edits.setdefault(anchor, (rule, ctx, narrow))
        position = positions[token.node].start
        line = position.line - depth + chunk.start - 1
        result.sites.append(Site(
            path=result.path, line=line, col=position.column, qualname=qualname,
            kind=token.kind.value, form=rule.form if rule else "unmatched",
            rule=rule.id if rule else "", decision=decision, reason=reason,
            snippet=source.lines[line - 1].strip()[:160],
            applied=applied, capability=capability,
        ))
    if len(finder.found) != chunk.tokens:
        result.sites.append(Site(
            path=result.path, line=chunk.start, col=0, qualname=".".join(chunk.scope) or "<module>",
            kind=tk.TokenKind.LOGIC.value, form="unmatched", rule="", decision=Decision.UNHANDLED,
            reason=f"engine disagreement: ast saw {chunk.tokens} tokens, libcst {len(finder.found)}",
            snippet=source.lines[chunk.start - 1].strip()[:160], applied=False,
        ))
    if not edits:
        return
    new_code = module.visit(_Applier(edits)).code
    if new_code != module.code:
        new_body = new_code[len(prefix):]
        if not new_code.startswith(prefix):
            raise AssertionError(f"{result.path}:{chunk.start}: a rule rewrote the parse wrapper")
        if body.endswith("\r") and not new_body.endswith("\r"):  # libcst drops a module's last bare CR
            new_body += "\r"
        result.replacements.append((chunk.start, chunk.end, new_body))


class _Applier(cst.CSTTransformer):
    def __init__(self, edits: dict[cst.CSTNode, tuple[Rule, Context, bool]]) -> None:
        super().__init__()
        self.edits = edits

    def on_leave(self, original_node, updated_node):
        edit = self.edits.get(original_node)
        if edit is None:
            return updated_node
        rule, ctx, narrow = edit
        if narrow:
            return rule.narrow(original_node, updated_node, ctx)
        return rule.rewrite(original_node, updated_node, ctx)
