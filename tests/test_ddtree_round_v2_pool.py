"""DDTreeWorkerV2's decode rounds against SGLang's own spec-v2 KV bookkeeping (0.5.14-0.5.23), on a CPU.

A real install of each release, patched by `apply`, runs in its CPU venv (tests/cpu_serverargs); the harness
(tests/round_harness/drive_round_v2_pool.py) builds the worker the way the scheduler does (real
ServerArgs with --disable-overlap-schedule --page-size 1, `create_worker`, DDTreeWorkerV2's `__init__`;
DFlashWorkerV2's base `__init__`, which loads the draft model, is a stand-in) and drives real Reqs in a
real ScheduleBatch through the release's own non-overlap scheduler loop: `update_running_batch`
(`filter_batch`, `prepare_for_decode`, i.e. DFlash v2's over-allocation of KV up to `kv_allocated_len`
through `alloc_token_slots`, written into req_to_token), `run_batch` (which calls
`forward_batch_generation`) and `process_batch_result_decode` (`kv_committed_len` += accept length, finish
checks, `release_kv_cache` for finished requests), over a real ReqToTokenPool, TokenToKVPoolAllocator and
the tree cache the release builds without a radix cache. Stand-ins only for the target and draft
forwards (a successor-map target; a drafter that ranks the right token second at some depths, so
accepted paths leave the first-child chain), the draft model's KV projection and the KV buffers (one
token id per slot). Four requests finish at different rounds, by max_new_tokens or by a stop token
inside an accepted run.
Every round, in both commits (DDTREE_KV_COMMIT=move, and reorder, which rewrites req_to_token rows
instead of moving KV): the output equals the target's greedy decoding; each live request's target and
draft KV read through req_to_token at [0, kv_committed_len) is its prompt and emitted tokens; the
allocator neither leaks nor double-frees (free list without repeats or owned slots, no slot owned by
two live rows, available == total - owned, where a live request owns req_to_token[row,
:kv_allocated_len]); and once every request finished and was released, the pools are whole again.
The releases differ where it counts: 0.5.14 carries its own DFlash state (`verified_id`, and the
watermark its prepare_for_decode plans from, `cur_allocated_seq_lens_cpu`); 0.5.16-0.5.18 keep the
allocated length in a `req.kv` record, 0.5.19+ every KV field; 0.5.22+ build a disabled
UnifiedRadixCache instead of ChunkCache and release with `checkpoint=`. DDTREE_RUNTIME_RELEASES selects
other releases.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cpu_serverargs.venv_builder import runtime_releases
from tests.sglang_releases import patched_release

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "tests/round_harness/drive_round_v2_pool.py"
HELPERS = REPO / "tests" / "cpu_serverargs"  # the torchvision stand-in the harness imports
V2_RELEASES = runtime_releases(("0.5.14", "0.5.15", "0.5.18", "0.5.23"))
BUDGETS = (8, 32)
CASES = tuple(f"{mode}:{budget}" for mode in ("move", "reorder") for budget in BUDGETS)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=V2_RELEASES)
def results(request, tmp_path_factory) -> dict:
    version = request.param
    site, python = patched_release(version, tmp_path_factory.mktemp(f"v2pool-{version}"))
    env = dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{HELPERS}", TRITON_INTERPRET="1", HF_HUB_OFFLINE="1", PYTHONNOUSERSITE="1")
    env.pop("DDTREE_KV_COMMIT", None)  # each case sets its own
    proc = subprocess.run([str(python), "-W", "ignore", str(HARNESS), *CASES], capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {line["case"]: line for line in lines}


@pytest.mark.parametrize("case", CASES)
def test_rounds_commit_the_accepted_path_and_keep_the_pool_exact(results, case):
    r = results[case]
    assert "error" not in r, r.get("error")
    assert r["worker"] == "DDTreeWorkerV2" and r["reorder_blocker"] is None, r
    assert r["kv_commit"] == case.split(":")[0], r  # the commit the worker actually ran
    assert r["failures"] == [] and r["failure_count"] == 0, r["failures"]
    assert r["checked_request_rounds"] > 10 and r["checked_pool_states"] > 2 * r["rounds"], r
    assert r["equal_to_greedy"], r
    assert r["rounds_with_off_chain_paths"] > 0, r  # accepted paths that leave the first-child chain
    assert r["tokens_per_round"] > 2.0, r


@pytest.mark.parametrize("case", CASES)
def test_finished_requests_give_everything_back(results, case):
    """Requests finish at different rounds, one on a stop token inside an accepted run (its KV past the
    stop is committed, then freed); SGLang's release_kv_cache frees the committed range and the
    over-allocation, so once all are done the allocator and the request rows are whole again."""
    r = results[case]
    assert "error" not in r, r.get("error")
    assert all(r["finished"]) and r["finish_lengths_ok"], r
    assert len(set(r["finished_at_round"].values())) > 1, r
    assert r["through_stop_lens"][3] < r["output_lens"][3], r  # accepted past the stop token
    assert r["all_free_at_end"], r


@pytest.mark.parametrize("budget", BUDGETS)
def test_the_release_asks_the_reorder_fence_before_each_release(results, budget):
    """The hook the reorder's overlap fence waits in (patches/table_fence.py) is called by the
    release's own result processor once for every finished request, each time before that
    request's KV is freed, and the release then waits for the last round's table rewrite."""
    r = results[f"reorder:{budget}"]
    assert "error" not in r, r.get("error")
    hook = r["release_hook"]
    assert hook["fenced"], r
    assert hook["rids"] == sorted(r["finished_at_round"]), hook
    assert hook["before_release"] and hook["waited_for_the_rewrite"], hook


@pytest.mark.parametrize("budget", BUDGETS)
def test_both_commits_decode_the_same(results, budget):
    move, reorder = results[f"move:{budget}"], results[f"reorder:{budget}"]
    assert "error" not in move and "error" not in reorder
    assert move["outputs"] == reorder["outputs"] and move["finished_at_round"] == reorder["finished_at_round"]
