"""The audit after apply: the preview's sites, proven applied by the bytes on disk.

The scan analyses the pristine backup of every file apply rewrote, so each site keeps the form,
decision and reason the preview gave it (the rewritten code, read afresh, would be a new form:
`x in ("DFLASH", "DDTREE")` is an allow-list). The proof is the file itself: it must hold exactly
the backup with the plan's replacements. Each site then moves to its place in the patched file.
"""

from __future__ import annotations

from dataclasses import replace
from difflib import SequenceMatcher

from ddtree_patch.results import FileResult
from ddtree_patch.source_text import SourceText, split_lines


def prove(result: FileResult, pristine: bytes, current: bytes) -> FileResult | None:
    """`result` (the analysis of `pristine`) with every site the plan edits applied, at its line
    and column in `current`; None when `current` is not what the plan makes of `pristine`."""
    source = SourceText.decode(pristine)
    if source.encode(result.replacements) != current:
        return None
    patched = SourceText.decode(current).lines
    sites = []
    for site in result.sites:
        line, col = _moved(source.lines, result.replacements, site.line, site.col)
        sites.append(replace(site, line=line, col=col, snippet=patched[line - 1].strip()[:160],
                             applied=site.applied or site.planned))
    return replace(result, sites=sites)


def _moved(lines: list[str], replacements: list[tuple[int, int, str]], line: int, col: int) -> tuple[int, int]:
    """Where (line, col) of the pristine `lines` lies once `replacements` are made."""
    shift = 0
    for first, last, text in sorted(replacements):
        if line < first:
            break
        new = split_lines(text)
        if line <= last:
            j, col = _within(lines[first - 1:last], new, line - first, col)
            return first + shift + j, col
        shift += len(new) - (last - first + 1)
    return line + shift, col


def _within(old: list[str], new: list[str], i: int, col: int) -> tuple[int, int]:
    """Line `i` of `old` (and column `col` in it) as an index into `new` (and a column there):
    exact on unchanged lines, the matching characters of a rewritten one."""
    opcodes = SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
    tag, i1, _, j1, j2 = next(op for op in opcodes if op[1] <= i < op[2])  # they cover every old line
    if tag == "equal":
        return j1 + i - i1, col
    j = min(j1 + i - i1, j2 - 1) if j2 > j1 else min(j1, len(new) - 1)  # a deleted line: the next one
    return j, _column(old[i], new[j], col)


def _column(old: str, new: str, col: int) -> int:
    """Column `col` of the line `old` in its rewrite `new`: moved with the characters around it,
    or where the rewritten part starts (a column past the line's end stays clipped)."""
    for tag, a1, a2, b1, _ in SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if a1 <= col < a2:
            return b1 + (col - a1 if tag == "equal" else 0)
    return min(col, len(new))
