"""DDTreeWorkerV1's decode round through SGLang's own v1 DFlash path (0.5.11-0.5.13), on a CPU.

A real install of each release, patched by `apply`, runs in its CPU venv (tests/cpu_serverargs); the harness
(tests/round_harness/drive_round_v1.py) builds the worker the way the scheduler does (real
ServerArgs, `create_worker`, DFlashWorker's `__init__`) and runs `forward_batch_generation` on a
real ScheduleBatch of real Reqs, with stand-ins only for the target and draft models and the KV
buffers. Checks: output equals greedy decoding of the target, each round's committed KV (target and
draft) holds the accepted path in position order, the allocator neither leaks nor double-frees,
the accept counters (per request and in the result) add up,
a request that reaches max_new_tokens inside a round stops there, and the widths. With a frequency
penalty (greedy, and sampled with per-request seeds) the output must equal sequential decoding of
the target with that penalty, which leaves the absorbing token the unpenalised target repeats; a
batch with a custom logit processor is refused with the reason before the round touches it.
DDTREE_RUNTIME_RELEASES selects other v1 releases (0.5.12.post1, 0.5.13.post1).
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
HELPERS = REPO / "tests" / "cpu_serverargs"  # the torchvision stand-in the harness imports
V1_RELEASES = runtime_releases(("0.5.11", "0.5.12", "0.5.13"))
BUDGETS = (0, 1, 7, 8, 32)
PAGED = ("paged:4:8", "paged:4:32", "paged:16:8")  # page:budget
REORDER = ("reorder:1:8", "reorder:1:32", "reorder:4:8")  # DDTREE_KV_COMMIT=reorder, page:budget

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=V1_RELEASES)
def results(request, tmp_path_factory) -> dict:
    version = request.param
    site, python = patched_release(version, tmp_path_factory.mktemp(f"v1round-{version}"))
    env = dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{HELPERS}", TRITON_INTERPRET="1", HF_HUB_OFFLINE="1")
    cases = [*map(str, BUDGETS), *PAGED, *REORDER, "sampled:8", "graph:8", "penalized:8", "penalized-sampled:8",
             "custom-processor", "refusal", "auto"]
    proc = subprocess.run([str(python), "-W", "ignore", str(REPO / "tests/round_harness/drive_round_v1.py"), *cases],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {line.get("case", "refusal"): line for line in lines}


@pytest.mark.parametrize("case", PAGED)
def test_paged_round_frees_whole_pages_only(results, case):
    """A paged free takes whole pages: freeing a slot of the last committed token's page would
    give the request's own KV away (the allocator check), and the next round would overwrite it."""
    r = results[case]
    assert r["page_size"] == int(case.split(":")[1])
    assert r["equal_to_greedy"] and r["commit_ok"], r
    assert r["rounds_with_off_chain_paths"] > 0, r


@pytest.mark.parametrize("case", REORDER)
def test_reordering_commit_moves_no_kv_and_keeps_every_slot_once(results, case):
    """DDTREE_KV_COMMIT=reorder at page size 1: req_to_token's row points at the accepted nodes'
    slots (the committed-KV check reads KV through it), the freed tail is the rest of the range
    (the allocator check); at page size 4 the move runs instead."""
    r = results[case]
    assert r["kv_commit"] == ("reorder" if r["page_size"] == 1 else "move"), r
    assert r["equal_to_greedy"] and r["commit_ok"], r
    assert r["rounds_with_off_chain_paths"] > 0, r


@pytest.mark.parametrize("case", [*map(str, BUDGETS), *PAGED, *REORDER, "sampled:8", "graph:8"])
def test_each_round_prepares_one_verify_input_and_no_chain_mask(results, case):
    """DFlash's chain verify input is never prepared: no `block` slots allocated and freed again,
    no causal mask built by a per-request loop (the harness's backend asks for one, as Triton
    does); the tree's input is the round's one allocation, without DFlash's mask."""
    r = results[case]
    assert r["verify_prepares"] == [False] * r["rounds"], r["verify_prepares"]


@pytest.mark.parametrize("budget", BUDGETS)
def test_round_matches_greedy_and_commits_the_path(results, budget):
    r = results[str(budget)]
    assert r["worker"] == "DDTreeWorkerV1" and r["kv_commit"] == "move"
    assert r["equal_to_greedy"] and r["commit_ok"], r
    assert r["finished"] == [False, True, False] or budget == 0, r  # budget 0 emits 1 token a round
    assert r["output_lens"][1] <= 17
    if budget == 0:
        assert r["tokens_per_round"] == 1.0
    else:
        assert r["tokens_per_round"] > 1.0
    if budget >= 7:  # room for second-ranked children: accepted paths leave the first-child chain
        assert r["rounds_with_off_chain_paths"] > 0, r


@pytest.mark.parametrize("budget, verify_width, pinned_block", [(0, 8, None), (1, 8, None), (7, 8, None),
                                                                 (8, 9, 8), (32, 33, 8)])
def test_widths(results, budget, verify_width, pinned_block):
    r = results[str(budget)]
    assert r["verify_width"] == [verify_width] and r["widths"][:2] == [verify_width, pinned_block]
    assert r["draft_runner_width"] == 8 and r["block_size"] == 8  # the drafter keeps its block


def test_a_wider_tree_accepts_more(results):
    per_round = [results[str(b)]["tokens_per_round"] for b in (0, 1, 7, 32)]
    assert per_round == sorted(per_round) and per_round[-1] > per_round[1], per_round


def test_the_graphed_tree_stage_replays_the_eager_rounds(results):
    """The tree stage replayed from a (stand-in) graph, one capture per batch size (3 requests,
    then 2 once the second finishes): the same outputs as the eager stage, KV committed alike."""
    graphed, eager = results["graph:8"], results["8"]
    assert graphed["outputs"] == eager["outputs"] and graphed["commit_ok"], graphed
    assert graphed["graph_captures"] == 2 and graphed["graph_replays"] == graphed["rounds"], graphed
    assert eager["graph_captures"] == 0


def test_a_sampled_round_commits_what_it_emits(results):
    r = results["sampled:8"]  # temperature 1: the posterior samples; the committed KV must follow it
    assert r["commit_ok"] and r["finished"] == [False, True, False] and r["tokens_per_round"] > 1.0, r


@pytest.mark.parametrize("case", ["penalized:8", "penalized-sampled:8"])
def test_penalties_count_each_path_and_change_the_output(results, case):
    """Frequency penalty 2: the target's absorbing token 300 loses to the rest once emitted five times, so
    the output equals penalised sequential decoding (counted along every node's own path, plus
    the request's earlier output) and is not the unpenalised greedy chain."""
    r = results[case]
    assert r["equal_to_reference"] and r["commit_ok"], r
    assert not r["equal_to_greedy"], r  # the penalty changed which token some node emitted
    assert r["finished"] == [False, True, False] and r["tokens_per_round"] > 1.0, r


def test_sampling_ddtree_cannot_reproduce_is_refused_before_the_round(results):
    r = results["custom-processor"]
    assert r["refusal"] and "custom logit processors" in r["refusal"] and r["untouched"], r


def test_flashinfer_graphs_without_the_mask_are_refused(results):
    assert "captured without the tree mask" in results["refusal"]["refusal"]


def test_auto_runs_the_widest_budget_of_its_ladder(results):
    """`--speculative-ddtree-budget auto` on the v1 worker: resolved from the release's own CLI to the
    widths of the ladder's widest budget (64 -> 65 over the 8-token drafter), every round verifies that
    budget (the per-round choice is the spec-v2 worker's), and the output is greedy decoding's."""
    r = results["auto"]
    assert r["worker"] == "DDTreeWorkerV1" and r["verify_width"] == [65] and r["widths"][:2] == [65, 8], r
    assert r["equal_to_greedy"] and r["commit_ok"] and r["tokens_per_round"] > 1.0, r
