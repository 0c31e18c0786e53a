"""The posterior's Triton kernels compile for sm_90 (cubin) on this machine, GPU or not.

Interpreted runs (the CPU tests) do not lower a kernel; `scripts/compile_kernels_sm90.py` does, in
a subprocess without TRITON_INTERPRET (this test process may have the kernels interpreted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compile_kernels_sm90.py"


def _ptxas_available() -> bool:
    try:
        import triton

        return (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists()
    except ImportError:
        return False


@pytest.mark.skipif(not _ptxas_available(), reason="this Triton has no bundled ptxas")
def test_posterior_kernels_compile_for_sm90() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, str(SCRIPT), "--json"], capture_output=True, text=True, env=env, timeout=900)
    rows = json.loads(res.stdout)
    failed = [r for r in rows if not r["ok"]]
    assert not failed, failed
    assert res.returncode == 0
    by_kernel = {(r["kernel"], r.get("INDEX_TIES"), r.get("SEQUENTIAL")) for r in rows}
    assert ("_check_kernel", True, None) in by_kernel and ("_finish_kernel", True, True) in by_kernel
    assert len(rows) == 12 and all(r["cubin_bytes"] > 0 for r in rows)
