"""The mutant list stays runnable: every mutant's snippet occurs exactly once in its file and the
tests it names exist. Code that moves breaks a mutant silently until the next full mutation run;
this catches it in every CI run instead (the full run takes about 20 minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.dev.mutants import MUTANTS

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_mutant_finds_its_snippet_once_and_its_tests(mutant) -> None:
    source = (REPO / mutant.file).read_text(encoding="utf-8")
    assert source.count(mutant.original) == 1, f"{mutant.file}: the snippet occurs {source.count(mutant.original)} times"
    assert mutant.original != mutant.replacement
    for test in mutant.tests:
        assert (REPO / test.split("::")[0]).is_file(), test


def test_mutant_names_are_unique() -> None:
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
