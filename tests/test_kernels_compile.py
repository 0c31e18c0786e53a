"""Every Triton kernel compiles for sm_90 (a cubin) on this machine, GPU or not.

Interpreted runs (the CPU tests) never lower a kernel. `scripts/dev/record_launches.py` records the
launches a few fast interpreted tests make (argument types, constexprs, warps), then
`scripts/dev/compile_kernels_sm90.py` compiles those and the posterior's kernels at V=151936's
constexprs, in a subprocess without TRITON_INTERPRET. Every `*_kernel` in kernels/ must be among
them, so a new kernel needs a test here that launches it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy  # compiles every kernel for sm_90 in a subprocess: about a minute

REPO = Path(__file__).resolve().parents[1]
# one fast interpreted test per launcher (the first of each parametrisation set suffices for types)
RECORDED_TESTS = (
    "tests/test_kernels_tree_mask.py::test_triton_mask_equals_torch",
    "tests/test_kernels_tree_mask.py::test_packed_mask",
    "tests/test_kernels_accept_walk.py::test_triton_walk_equals_torch",
    "tests/test_kernels_accept_walk.py::test_commit_slots",
    "tests/test_kernels_kv_move.py::test_move_equals_torch",
    "tests/test_kernels_slot_reorder.py::test_triton_equals_torch",
    "tests/test_kernels_path_penalties.py::test_walk_equals_torch",
    "tests/test_kernels_path_penalties.py::test_sparse_step_equals_torch_bitwise",
    "tests/test_kernels_path_penalties.py::test_kept_lists_equal_lists_made_from_scratch",
    "tests/test_kernels_tree_build.py::test_triton_equals_torch",
    "tests/test_kernels_vocab_topk.py::test_stream_ties_masked_and_signed_zeros",
    "tests/test_kernels_vocab_topk.py::test_radix_fallback_values",
    "tests/test_kernels_head_topk.py::test_interleaved_parts_equal_the_scan_of_the_same_logits",  # scans from split > 0
    "tests/test_kernels_head_gemm_scan.py::test_epilogue_parts_are_the_scans_maxima",  # with and without the epilogue
    "tests/test_kernels_head_gemm_scan.py::test_descriptor_kernel_writes_the_same_logits_and_parts",  # descriptors
    "tests/test_kernels_tree_window.py::test_the_mask_derived_in_the_verify_equals_the_reference",
)


def _ptxas_available() -> bool:
    try:
        import triton

        return (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists()
    except ImportError:
        return False


def _all_kernels() -> set[str]:
    return {m for f in (REPO / "kernels").glob("*.py")
            for m in re.findall(r"@triton\.jit\s*\ndef (_\w+_kernel)\(", f.read_text())}


@pytest.mark.skipif(not _ptxas_available(), reason="this Triton has no bundled ptxas")
def test_every_kernel_compiles_for_sm90(tmp_path: Path) -> None:
    launches = tmp_path / "launches.json"
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    rec = subprocess.run([sys.executable, "-m", "scripts.dev.record_launches", str(launches), "--", "-q",
                          "-p", "no:cacheprovider", *RECORDED_TESTS], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=1200)
    assert rec.returncode == 0, rec.stdout[-3000:]
    env.pop("TRITON_INTERPRET")
    res = subprocess.run([sys.executable, "-m", "scripts.dev.compile_kernels_sm90", "--launches", str(launches),
                          "--json"], capture_output=True, text=True, env=env, cwd=REPO, timeout=1200)
    rows = json.loads(res.stdout)
    failed = [r for r in rows if not r["ok"]]
    assert not failed, failed
    assert res.returncode == 0
    compiled = {r["kernel"] for r in rows}
    assert _all_kernels() <= compiled, _all_kernels() - compiled
    tables = {(r["kernel"], r.get("INDEX_TIES"), r.get("SEQUENTIAL")) for r in rows if not r.get("recorded")}
    assert ("_check_kernel", True, None) in tables and ("_finish_kernel", True, True) in tables
