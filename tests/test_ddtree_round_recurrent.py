"""DDTreeWorkerV2's round on a GDN-like target whose next token depends on a recurrent state (CPU).

`tests/round_harness/drive_round_recurrent.py`: the worker takes its GDN path from a qwen3_next
config's server args; the fake target runs each verify row from its parent row's state, the parents
derived from the verify input's tree links by SGLang's rule, and keeps the state at the row DFlash's
commit names (through the worker's `steps_as_nodes`). Greedy output over 12 rounds whose accepted
paths leave the first-child chain must equal sequential decoding, and after every round the request's
state (and the prefix cache's tracked one) must be the accepted path's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from tests.round_harness.stubs import make_stub_site  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CASES = [(0, 0), (3, 3), (7, 7), (12, 3), (32, 32)]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    env = dict(os.environ, PYTHONPATH=str(make_stub_site(tmp_path_factory.mktemp("stub_sglang"))))
    proc = subprocess.run([sys.executable, str(REPO / "tests/round_harness/drive_round_recurrent.py"),
                           *(f"{b}:{k}" for b, k in CASES)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {(r["budget"], r["topk"]): r for r in rows}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"b{c[0]}-k{c[1]}")
def test_round_through_a_recurrent_target_equals_sequential_decoding(results, case):
    got = results[case]
    assert got["tree_recurrence"] and got["backend_topk"] > 1, got  # the worker's GDN path, the wrapped backend
    assert got["equal_to_sequential"] and got["committed_state_ok"], got
    assert got["tracked_states"] > 0, got
    if case[0] == 0:
        assert got["tokens_per_round"] == 1.0
    else:
        assert got["rounds_with_off_chain_paths"] > 0, got  # the state kept is a node off the chain
        assert got["tokens_per_round"] > 1.0, got
