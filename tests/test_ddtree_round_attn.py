"""DDTreeWorkerV2's round against a fake target that attends through the verify mask (CPU).

`tests/round_harness/drive_round_attn.py`: each tree node's next token is computed from the KV
entries (token, position) it can see through its row of the verify mask, so the round's mask,
verify positions, KV slots, in-place commit move and draft-KV positions all decide the output.
Greedy and seeded sampled decoding must equal sequential decoding token for token, over rounds
whose accepted paths leave the first-child chain.
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
CASES = [(0, 0, "greedy"), (3, 3, "greedy"), (7, 7, "greedy"), (12, 3, "greedy"), (32, 32, "greedy"),
         (7, 7, "sampled"), (32, 32, "sampled"), (32, 32, "auto-greedy"), (32, 32, "auto-sampled")]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    env = dict(os.environ, PYTHONPATH=str(make_stub_site(tmp_path_factory.mktemp("stub_sglang"))))
    proc = subprocess.run([sys.executable, str(REPO / "tests/round_harness/drive_round_attn.py"),
                           *(f"{b}:{k}:{m}" for b, k, m in CASES)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {(r["budget"], r["topk"], r["mode"]): r for r in rows}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"b{c[0]}-k{c[1]}-{c[2]}")
def test_round_through_an_attending_target_equals_sequential_decoding(results, case):
    got = results[case]
    assert got["equal_to_sequential"] and got["draft_commit_ok"], got
    budget = case[0]
    if budget == 0:
        assert got["tokens_per_round"] == 1.0
    elif budget >= 3:
        assert got["rounds_with_off_chain_paths"] > 0, got  # the commit really moved KV
        assert got["tokens_per_round"] > 1.0, got


@pytest.mark.parametrize("mode", ["auto-greedy", "auto-sampled"])
def test_auto_budgets_drawn_at_random_keep_decoding_exact(results, mode):
    """`--speculative-ddtree-budget auto` with its chooser replaced by random draws from the ladder
    (7, 8, 16, 32): each round verifies that prefix of the budget-32 tree through the attending target,
    and greedy output, and seeded sampled output at T = 1, equal sequential decoding."""
    got = results[(32, 32, mode)]
    assert got["equal_to_sequential"] and got["draft_commit_ok"], got
    assert len(set(got["budgets_chosen"])) == 4 and len(got["budgets_chosen"]) == 10, got
    assert got["rounds_with_off_chain_paths"] > 0 and got["tokens_per_round"] > 1.0, got
