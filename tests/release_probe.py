"""Run a probe script inside a release's cached CPU venv, with that release's SGLang on PYTHONPATH.

The tests that check DDTree's pieces against SGLang's own kernels and pools (tree recurrence, path
window, SWA commit, verify tile) and the GPU scripts on patched releases each run one such probe:
real SGLang is imported only there, never into the test process. The probe prints one JSON line
last; that line is returned.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from tests.cpu_serverargs.venv_builder import venv_cache

REPO = Path(__file__).resolve().parent.parent
HELPERS = REPO / "tests" / "cpu_serverargs"
# Run before each probe: SGLang imports torchvision (and xgrammar) at module level, the CPU venv has neither.
STAND_IN = "import torchvision_stand_in\ntorchvision_stand_in.install(('xgrammar',))\n"


def run_probe(version: str, release_site: Callable[[str], Path], code: str, *args: str,
              repo_on_path: bool = False, env: dict[str, str] | None = None) -> dict:
    """`code` run by the `version` venv's python (Triton interpreted) after the torchvision stand-in
    (tests/cpu_serverargs), its last stdout line as JSON;
    skipped where that venv is not built. `repo_on_path`: the repository root importable too;
    `env`: more environment variables."""
    python = venv_cache() / version / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no SGLang {version} CPU venv at {python} (built by tests/cpu_serverargs/venv_builder.py)")
    path = [release_site(version), HELPERS] + ([REPO] if repo_on_path else [])
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path)), "PYTHONNOUSERSITE": "1",
               "TRITON_INTERPRET": "1", **(env or {})}
    done = subprocess.run([str(python), "-c", STAND_IN + code, *args], capture_output=True, text=True, env=environ,
                          cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
