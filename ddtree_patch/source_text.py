"""Source text that re-encodes to its original bytes: the lines every replacement is counted in.

Apart from `analyse.py` so that the audit can re-apply a cached plan without importing libcst.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass


def split_lines(text: str) -> list[str]:
    """Lines with their endings, split only at `\\n`, `\\r\\n` and `\\r` (as Python reads source)."""
    return io.StringIO(text, newline="").readlines()


@dataclass(frozen=True)
class SourceText:
    """Decoded source that re-encodes to the original bytes (BOM and line endings kept)."""

    encoding: str
    lines: list[str]

    @classmethod
    def decode(cls, data: bytes) -> "SourceText":
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return cls(encoding, split_lines(data.decode(encoding)))

    @property
    def newline(self) -> str:
        first = self.lines[0] if self.lines else "\n"
        return "\r\n" if first.endswith("\r\n") else "\r" if first.endswith("\r") else "\n"

    def encode(self, replacements: list[tuple[int, int, str]]) -> bytes:
        lines = list(self.lines)
        for first, last, text in sorted(replacements, reverse=True):
            lines[first - 1:last] = [text]
        return "".join(lines).encode(self.encoding)
