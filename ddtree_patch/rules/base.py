"""What a rewrite rule is: one syntactic form, its claim on a token, its rewrite, its examples.

Rules follow the Fixit habit: each carries code it must rewrite (`MUST_REWRITE`, before/after)
and code it must leave alone (`MUST_NOT_TOUCH`: it owns no site there, or only one already
rewritten); a rule that only classifies lists code whose site it must own, with the decision the
policy gives it (`MUST_CLAIM`). One parametrised test runs them all under the real policy: a rule
holds no decision of its own, `data/policy.py` is the one source of decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Union

import libcst as cst

from ddtree_patch.sites import Decision
from ddtree_patch.tokens import TokenKind

Rewritten = Union[cst.CSTNode, cst.FlattenSentinel, cst.RemovalSentinel]


@dataclass(frozen=True)
class Token:
    node: cst.CSTNode  # SimpleString, Name (identifier or attribute name) or AnnAssign
    kind: TokenKind


@dataclass(frozen=True)
class Context:
    """What a rule may know about a token's surroundings (never the disk)."""

    path: str
    module: cst.Module  # the parsed chunk (for code_for_node and parser config)
    parents: Mapping[cst.CSTNode, cst.CSTNode]
    scope: tuple[str, ...]  # enclosing class/function names, outermost first
    function: str | None  # innermost enclosing function, None directly in a class or module body
    class_members: frozenset[str]  # names defined in the innermost enclosing class
    function_source: Callable[[], str] = field(default=lambda: "", repr=False)  # that function's text

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode):
        current = self.parents.get(node)
        while current is not None:
            yield current
            current = self.parents.get(current)

    def statement(self, code: str) -> cst.BaseStatement:
        return cst.parse_statement(code, config=self.module.config_for_parsing)

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)


class Rule:
    """One syntactic form. `claim` returns the node to rewrite (the anchor) or None."""

    id: ClassVar[str]
    form: ClassVar[str]
    MUST_REWRITE: ClassVar[list[tuple[str, str]]] = []
    MUST_NOT_TOUCH: ClassVar[list[str]] = []
    NARROWS: ClassVar[bool] = False  # can test DDTREE away where DDTree lacks the capability
    MUST_NARROW: ClassVar[list[tuple[str, str]]] = []  # (before, after) when the policy narrows
    # (code, the policy's decision) whose one DFLASH site this rule owns (rules that only classify)
    MUST_CLAIM: ClassVar[list[tuple[str, Decision]]] = []

    def claim(self, token: Token, ctx: Context) -> cst.CSTNode | None:
        raise NotImplementedError

    def applied(self, anchor: cst.CSTNode, ctx: Context) -> bool:
        """The rewrite is already in place: the engine then does not call `rewrite` (idempotence
        lives here, once, not in each rewrite)."""
        return False

    def rewrite(self, original: cst.CSTNode, updated: cst.CSTNode, ctx: Context) -> Rewritten:
        """Default: a rule that only classifies (the site needs no edit of its own)."""
        return updated

    def narrowed(self, anchor: cst.CSTNode, ctx: Context) -> bool:
        """The narrowing is already in place (rules that NARROWS)."""
        return False

    def narrow(self, original: cst.CSTNode, updated: cst.CSTNode, ctx: Context) -> Rewritten:
        """Keep the site DFlash-only although its predicate was widened (rules that NARROWS)."""
        raise NotImplementedError(f"{self.id} cannot narrow")
