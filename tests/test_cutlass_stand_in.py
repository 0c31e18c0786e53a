"""The rig's CUTLASS DSL stand-in (gpurig/stubs-extra/cutlass-permissive): SGLang's own modules that
build CuTe DSL kernels at import time import under it, and a placeholder reached at run time raises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

STAND_IN = Path(__file__).resolve().parent.parent / "gpurig" / "stubs-extra" / "cutlass-permissive"
# SGLang 0.5.15 modules importing `cutlass` at module level, with nothing else outside the stdlib
CUTE_MODULES = ("cute_utils/__init__.py", "cute_utils/cvt.py", "cute_utils/_tcgen05.py")

PROBE = """
import importlib.util, sys
for i, path in enumerate(sys.argv[1:]):
    spec = importlib.util.spec_from_file_location(f"cute_module_{i}", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
import cutlass
from cutlass.cute.nvgpu import cpasync
assert isinstance(cpasync.CopyBulkTensorTileG2SOp, cutlass.Placeholder)
try:
    cutlass.cute.make_tensor(object())
except RuntimeError as e:
    print("raised:", e)
"""


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(STAND_IN))
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("version", ["0.5.15"])
def test_sglang_cute_modules_import_under_the_stand_in(release_site, version: str) -> None:
    folder = release_site(version) / "sglang" / "srt" / "layers" / "attention"
    res = _run(*(str(folder / m) for m in CUTE_MODULES))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "raised: cutlass.cute.make_tensor: the CUTLASS DSL is not installed" in res.stdout


def test_without_the_stand_in_those_modules_do_not_import(release_site) -> None:
    """The control: the failure the stand-in exists for (no `cutlass` on this machine)."""
    folder = release_site("0.5.15") / "sglang" / "srt" / "layers" / "attention"
    res = subprocess.run([sys.executable, "-c", PROBE, str(folder / CUTE_MODULES[0])], capture_output=True,
                         text=True, timeout=120, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert res.returncode != 0 and "No module named 'cutlass'" in res.stderr
