"""The GPU scripts read each release's real ServerArgs (CPU, cached release venvs).

0.5.23's ServerArgs is no dataclass and resolves only on `resolve_once()`: the start-up gate check
(scripts/gpu/gate_check.py) once read unresolved fields there (every width gate FAIL), and the engine
runner (scripts/gpu/engine_run.py) fell back to 0.5.11-0.5.13's CUDA-graph field names, which 0.5.23
rejects at start. Both are checked here on a patched release before any device call depends on them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cpu_serverargs.venv_builder import ensure_venv
from tests.release_probe import run_probe
from tests.sglang_releases import release_metadata

REPO = Path(__file__).resolve().parent.parent

PROBE = r"""
import contextlib, inspect, io, json, sys
from scripts.gpu import engine_run, gate_check
from sglang.srt.server_args import ServerArgs

gate_check.TARGET, gate_check.DRAFT = sys.argv[1], sys.argv[2]
gate_check.CASES = [(name, dict(extra, device="cuda"), expect) for name, extra, expect in gate_check.CASES]
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    gate_check.main()
print(json.dumps({
    "gates": [line for line in printed.getvalue().splitlines() if line.startswith("GATE")],
    "graph_kwargs": sorted(engine_run.decode_cuda_graph_kwargs()),
    "fields": sorted(inspect.signature(ServerArgs).parameters),
}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.5.15", "0.5.23"])
def test_gate_check_and_engine_graph_settings_read_the_release_s_server_args(version, fresh_release):
    site = fresh_release(version)
    applied = subprocess.run([sys.executable, "-m", "ddtree_patch", "apply", "--target", str(site)],
                             capture_output=True, text=True)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    ensure_venv(version, release_metadata(site, version))  # built here if missing: the probe needs it
    models = REPO / "fixtures" / "models"
    report = run_probe(version, lambda _version: site, PROBE, str(models / "tiny-qwen3"),
                       str(models / "tiny-dflash-draft"), repo_on_path=True,
                       env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert len(report["gates"]) == 6 and all(": PASS " in line for line in report["gates"]), report["gates"]
    assert set(report["graph_kwargs"]) <= set(report["fields"]), report["graph_kwargs"]
    assert "cuda_graph_max_bs_decode" in report["graph_kwargs"]  # 0.5.14+ field names
