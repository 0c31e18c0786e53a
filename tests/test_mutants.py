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


@pytest.mark.parametrize("tail,status", [
    ("2 passed in 1.00s", "SURVIVED"),
    ("1 passed, 3 skipped in 1.00s", "SURVIVED"),
    ("3 skipped in 0.40s", "ERROR"),  # every named test skipped: nothing judged the mutant
])
def test_a_mutant_whose_tests_all_skip_is_an_error_not_a_survivor(tmp_path, monkeypatch, tail, status) -> None:
    from scripts.dev import mutate
    from scripts.dev.mutants import Mutant

    (tmp_path / "m.py").write_text("x = 1\n")
    monkeypatch.setattr(mutate, "run_tests", lambda copy, tests: (0, tail))
    outcome = mutate.run_mutant(tmp_path, Mutant("x is 2", "m.py", "x = 1", "x = 2", ("tests/t.py",)))
    assert outcome.status == status and (tmp_path / "m.py").read_text() == "x = 1\n"
