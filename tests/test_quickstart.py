"""scripts/quickstart.sh, run as a new user runs it: its last line is a command that works in the
user's shell, where the quickstart's venv is not activated."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _checkout_copy(dest: Path) -> Path:
    """The working tree as git sees it (tracked and new files, no ignored ones such as .venv)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        source = ROOT / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    return dest


@pytest.mark.slow
def test_the_quickstart_ends_with_a_command_that_runs(tmp_path: Path) -> None:
    repo = _checkout_copy(tmp_path / "checkout with space")
    done = subprocess.run(["bash", "scripts/quickstart.sh"], cwd=repo, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    command = shlex.split(last.split("(or:")[0])  # the venv is not on PATH here, as in the user's shell
    applied = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert applied.returncode == 0 and applied.stdout.startswith("applied"), applied.stdout + applied.stderr
