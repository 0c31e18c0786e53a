"""What counts as a DFLASH site: one definition shared by the fast `ast` locator and the libcst finder.

A *logic* token is code that names the DFLASH algorithm: the exact string "DFLASH" (any case),
the enum member `DFLASH`, the predicates `is_dflash` / `is_dflash_family` (as methods), plus the
two *anchors* the server-argument rules attach to and the "Builtins: ... DFLASH" help text.
A longer string literal naming DFLASH is a *string* token unless `textflow` proves it text.
Every other mention of dflash is either a *reference* (an identifier naming DFlash's own classes,
modules or variables) or *text* (comments, docstrings, messages); both are counted, never edited.
"""

from __future__ import annotations

import re
from enum import Enum

ENUM_MEMBER = "DFLASH"
TWIN_MEMBER = "DDTREE"
PREDICATES = frozenset({"is_dflash", "is_dflash_family"})
TWIN_PREDICATE = "is_ddtree"
ALGORITHM_FIELD = "speculative_algorithm"
ALGORITHM_FLAG = "--speculative-algorithm"

_HELP_WORD = re.compile(r"\bDFLASH\b")


class TokenKind(str, Enum):
    LOGIC = "logic"
    ANCHOR = "anchor"
    HELP = "help"
    STRING = "string"  # a longer literal naming DFLASH that is not proven text (textflow.py)


def is_dflash_string(value: str) -> bool:
    """The literal names the algorithm itself (not a longer message that mentions it)."""
    return value.strip().lower() == "dflash"


def has_dflash_word(value: str) -> bool:
    return _HELP_WORD.search(value) is not None


def is_builtins_help(value: str) -> bool:
    """The one help text that lists builtin algorithms and so must list DDTREE too."""
    return "Builtins:" in value and has_dflash_word(value)


def count_mentions(text: str) -> int:
    return text.lower().count("dflash")


def count_ddtree(text: str) -> int:
    return text.lower().count("ddtree")
