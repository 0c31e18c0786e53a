"""Mutation testing of the critical modules with our own mutant list (scripts/dev/mutants.py).

Copies the repo (tracked and untracked, not ignored files) to a temporary folder once, checks
that every named test passes there unmutated, then applies one mutant at a time to the copy,
runs its fast tests with the copy first on PYTHONPATH, and puts the file back. The working tree
is never written. Prints KILLED / SURVIVED per mutant and a summary; exit 1 when a mutant not
marked equivalent survives (or the baseline fails, or a snippet is not found exactly once).

    python -m scripts.dev.mutate [--json] [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from scripts.dev.mutants import MUTANTS, Mutant

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300  # one mutant's tests
BASELINE_TIMEOUT_S = 3600  # every named test at once (the interpreted kernel tests take minutes)


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # KILLED, SURVIVED, TIMEOUT (counts as killed), ERROR (the run itself broke)
    seconds: float
    detail: str = ""

    def to_json(self) -> dict:
        m = self.mutant
        return {"name": m.name, "file": m.file, "status": self.status, "equivalent": m.equivalent,
                "tests": list(m.tests), "seconds": round(self.seconds, 1), "detail": self.detail}


def copy_repo(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.split(b"\0")
    for rel in filter(None, (p.decode() for p in listed)):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def run_tests(copy: Path, tests: tuple[str, ...], timeout_s: int = TIMEOUT_S) -> tuple[int | None, str]:
    """pytest's exit status (None on timeout) and its last lines."""
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    # heavy tests count as slow (tests/conftest.py) but install nothing: mutants name them
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "heavy or not slow", *tests]
    try:
        proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout_s} s"
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return proc.returncode, lines[-1] if lines else ""


def check_snippets(copy: Path, mutants: list[Mutant]) -> list[str]:
    problems = []
    for m in mutants:
        count = (copy / m.file).read_text().count(m.original)
        if count != 1:
            problems.append(f"{m.name}: the snippet occurs {count} times in {m.file}")
    return problems


def run_mutant(copy: Path, m: Mutant) -> Outcome:
    path = copy / m.file
    original = path.read_text()
    path.write_text(original.replace(m.original, m.replacement))
    start = time.monotonic()
    try:
        rc, tail = run_tests(copy, m.tests)
    finally:
        path.write_text(original)
    seconds = time.monotonic() - start
    if rc is None:
        return Outcome(m, "TIMEOUT", seconds, tail)
    if rc == 0 and " passed" not in tail:  # every named test skipped: nothing judged the mutant
        return Outcome(m, "ERROR", seconds, f"its tests ran none: {tail}")
    if rc == 0:
        return Outcome(m, "SURVIVED", seconds, tail)
    if rc in (1, 2):  # test failures, or a collection error the mutant caused
        return Outcome(m, "KILLED", seconds, tail)
    if rc < 0:  # the tests died by a signal: the mutant corrupted memory (the baseline passed)
        return Outcome(m, "KILLED", seconds, f"crashed (signal {-rc}): {tail}")
    return Outcome(m, "ERROR", seconds, f"pytest exit {rc}: {tail}")  # 3-5: usage, no tests...


def summary(outcomes: list[Outcome]) -> dict:
    survivors = [o for o in outcomes if o.status == "SURVIVED"]
    return {
        "mutants": len(outcomes),
        "killed": sum(o.status in ("KILLED", "TIMEOUT") for o in outcomes),
        "survived_equivalent": sum(bool(o.mutant.equivalent) for o in survivors),
        "survived": sum(not o.mutant.equivalent for o in survivors),
        "errors": sum(o.status == "ERROR" for o in outcomes),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--only", default="", help="run the mutants whose name contains this")
    args = parser.parse_args(argv)
    mutants = [m for m in MUTANTS if args.only in m.name]
    say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if args.json else (lambda *a: print(*a, flush=True))
    with tempfile.TemporaryDirectory(prefix="ddtree-mutate-") as tmp:
        copy = Path(tmp) / "repo"
        copy_repo(copy)
        problems = check_snippets(copy, mutants)
        tests = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
        rc, tail = run_tests(copy, tests, BASELINE_TIMEOUT_S)
        if rc != 0:
            problems.append(f"the named tests fail without any mutant: {tail}")
        if problems:
            for p in problems:
                say(f"ERROR {p}")
            if args.json:
                print(json.dumps({"ok": False, "problems": problems}))
            return 1
        say(f"baseline: {len(tests)} test selections pass unmutated ({tail})")
        outcomes = []
        for m in mutants:
            outcome = run_mutant(copy, m)
            outcomes.append(outcome)
            note = f"  [equivalent: {m.equivalent}]" if m.equivalent and outcome.status == "SURVIVED" else ""
            say(f"{outcome.status:8} {outcome.seconds:5.1f}s  {m.file}: {m.name}{note}")
    result = summary(outcomes)
    ok = result["survived"] == 0 and result["errors"] == 0
    if args.json:
        print(json.dumps({"ok": ok, "summary": result, "mutants": [o.to_json() for o in outcomes]}, indent=2))
    else:
        print(f"{result['mutants']} mutants: {result['killed']} killed, {result['survived']} survived, "
              f"{result['survived_equivalent']} equivalent survived, {result['errors']} errors")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
