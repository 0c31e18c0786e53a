"""DDTreeWorkerV2 driven through each release's real `Scheduler.run_batch`, on a CPU.

0.5.18-0.5.23 pin a torch the GPU machine lacks, so this is where their worker contract is run, not
only read: the release's own `run_batch` calls the worker with the keywords that release passes
(`pp_proxy_tensors=` without overlap, `on_publish=` / `grammar_barrier=` with it), and writes the
result back into a real `ScheduleBatch` that the next round starts from. 0.5.14 carries a different
DFlash state (`verified_id`, a verify-done event, the reserved KV watermark): the rounds show that
the adapter hands back that release's shape. Each release is installed
with `pip install --no-deps --target`, patched with `apply`, and driven by
tests/round_harness/scheduler_path.py in a subprocess of its CPU venv (venv_builder), as
test_serverargs_behaviour.py does; GPU-only parts are drive_round's stand-ins.
DDTREE_RUNTIME_RELEASES selects other releases (below).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest
from packaging.version import Version

from tests.cpu_serverargs.venv_builder import runtime_releases
from tests.sglang_releases import patched_release

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "tests" / "round_harness" / "scheduler_path.py"
HELPERS = REPO / "tests" / "cpu_serverargs"  # the torchvision stand-in the harness imports
# The releases CI drives; DDTREE_RUNTIME_RELEASES=0.5.16,0.5.19,... replaces them for a local run.
RELEASES = runtime_releases(("0.5.14", "0.5.18", "0.5.23"))
ROUNDS = 6  # scheduler_path.ROUNDS


class Patched(NamedTuple):
    version: str
    site: Path
    python: Path


@pytest.fixture(scope="module", params=RELEASES)
def patched(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Patched:
    version = request.param
    site, python = patched_release(version, tmp_path_factory.mktemp(f"sglang-{version}"))
    return Patched(version, site, python)


def _drive(python: Path, site: Path, cwd: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{HELPERS}", "PYTHONNOUSERSITE": "1", "HF_HUB_OFFLINE": "1",
           "TRITON_INTERPRET": "1"}
    done = subprocess.run([str(python), str(HARNESS)], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def report(patched: Patched, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _drive(patched.python, patched.site, tmp_path_factory.mktemp("drive"))


@pytest.mark.slow
def test_run_batch_serves_ddtree_rounds(patched: Patched, report: dict) -> None:
    assert report["worker_class"] == "DDTreeWorkerV2", report.get("worker_class_error")
    for mode, published in (("plain", 0), ("overlap", ROUNDS)):
        result = report["modes"][mode]
        assert "error" not in result, f"{mode} on {patched.version}:\n{result.get('error')}"
        assert result["equal_to_greedy"], result
        assert result["tokens_per_round"] > 1.0, result
        assert result["final_seq_lens"] == result["expected_seq_lens"], result
        assert result["published"] == published, result  # on_publish once per round with overlap
    assert "on_publish" in report["modes"]["overlap"]["keywords"]
    if Version(patched.version) >= Version("0.5.19"):
        assert report["modes"]["plain"]["keywords"] == ["pp_proxy_tensors"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["logprobs", "logprobs_overlap"])
def test_log_probs_reach_each_request_as_plain_decoding_s(patched: Patched, report: dict, mode: str) -> None:
    """return_logprob with top_logprobs_num and token_ids_logprob, at temperatures below 1: on
    0.5.18+ the release's own result processor hands each request, for every emitted token, plain
    decoding's log-prob (the log-softmax of the target's row after the previous token, over the
    temperature), its top-k and the ids asked for; on 0.5.14 (no speculative log-prob helper) the
    round is refused with the capability's message."""
    from patches.capabilities import CAPABILITIES

    result = report["modes"][mode]
    if Version(patched.version) < Version("0.5.18"):
        assert result == {"refused": CAPABILITIES["logprobs"].refusal}, result
        return
    assert "error" not in result, result.get("error")
    assert result["equal_to_greedy"] and result["tokens_per_round"] > 1, result  # more than one token a round
    assert result["logprobs_match"] == {"token": True, "top": True, "token_ids": True}, result


@pytest.mark.slow
def test_the_reorder_commit_under_overlap_is_fenced_by_the_release_s_own_barrier(patched: Patched, report: dict) -> None:
    """With DDTREE_KV_COMMIT=reorder under overlap (0.5.15+), rounds through run_batch stay greedy
    with every verify range holding its slots once; each round records its event right after the
    table's rewrite (before the draft-KV write, which is no hazard to the scheduler); after each round
    the release's own `_apply_war_barrier` waits for that event (not the verify's earlier read-done
    event), and so does the worker's release hook, which the release's result processor calls before
    it releases a finished request's KV."""
    if patched.version == "0.5.14":
        assert "overlap_reorder" not in report["modes"]
        pytest.skip("0.5.14 keeps the move under overlap (asserted in the construct test)")
    result = report["modes"]["overlap_reorder"]
    assert "error" not in result, result.get("error")
    assert result["equal_to_greedy"] and result["slots_kept_once"], result
    assert result["final_seq_lens"] == result["expected_seq_lens"], result
    assert result["fences"] == {"placed_after_the_rewrite": True, "barrier_waits_for_it": True,
                                "release_waits_for_it": True}, result
    assert report["release_hook_called"], report


@pytest.mark.slow
def test_each_round_hands_back_the_release_s_draft_state(patched: Patched, report: dict) -> None:
    """0.5.14: the seed as `verified_id`, the watermark its prepare_for_decode reserved carried as
    `cur_allocated_seq_lens_cpu`, and `verify_done` recorded after the round's last work (the draft-KV
    write), every round, with and without overlap; 0.5.15+: `bonus_tokens`, nothing more."""
    for mode in ("plain", "overlap"):
        result = report["modes"][mode]
        assert "error" not in result, result.get("error")
        if patched.version == "0.5.14":
            assert result["seed_field"] == "verified_id", result
            assert result["carried"] == {"verify_done_recorded_last": True, "cur_allocated_is_reserved": True}, result
        else:
            assert (result["seed_field"], result["carried"]) == ("bonus_tokens", {}), result


@pytest.mark.slow
def test_the_draft_runner_is_built_at_the_block_while_the_target_keeps_the_verify_width(patched: Patched, report: dict) -> None:
    """Budget 32 over an 8-token drafter: DFlash's constructor and graph capture see width 8 (in the
    server-args copy it gets, and in the published config bags its runners read from 0.5.17 on);
    the record and the published config keep the verify width 33 afterwards."""
    built = report["construct"]
    assert "error" not in built, built.get("error")
    assert (built["verify_width"], built["budget"], built["topk"]) == (33, 32, 32)
    assert built["init_server_args_width"] == 8
    assert built["record_width_after"] == 33
    # The move-free KV commit reads the resolved overlap flag: allowed with --disable-overlap-schedule
    # at page size 1; under the (default) overlap scheduler only where the release lets the worker
    # fence it (patches/table_fence.py): not 0.5.14, whose scheduler skips its WAR barrier for DFlash.
    no_overlap = report["construct_no_overlap"]
    assert "error" not in no_overlap, no_overlap.get("error")
    assert no_overlap["reorder_blocker"] is None and no_overlap["verify_width"] == 33
    reorder = report["construct_reorder"]
    assert "error" not in reorder, reorder.get("error")
    if patched.version == "0.5.14":
        assert "skips its WAR barrier for DFlash (needs --disable-overlap-schedule)" in built["reorder_blocker"], built
        assert (reorder["kv_commit_mode"], reorder["fenced"]) == ("move", False), reorder
    else:
        assert built["reorder_blocker"] is None, built
        assert (built["kv_commit_mode"], built["fenced"]) == ("move", False), built  # the default: no fence needed
        assert (reorder["kv_commit_mode"], reorder["fenced"]) == ("reorder", True), reorder
    if Version(patched.version) < Version("0.5.17"):  # no published config bags: the server-args copy is all there is
        assert built["init_published_width"] is built["graphs_published_width"] is built["published_after"] is None
    else:
        assert built["init_published_width"] == built["graphs_published_width"] == 8
        assert built["published_after"] == 33


@pytest.mark.slow
def test_the_pre_contract_worker_fails_there(patched: Patched, tmp_path: Path) -> None:
    """The worker as it was before (entry point taking only `on_publish`): refused by the contract
    check at creation, and, driven anyway, broken by the release's own call (0.5.19 on: 0.5.23 in CI)."""
    if Version(patched.version) < Version("0.5.19"):
        pytest.skip("0.5.19 on passes pp_proxy_tensors= on the plain path")
    site = tmp_path / "site"
    shutil.copytree(patched.site, site, symlinks=True)
    worker = site / "sglang/srt/speculative/ddtree/worker_v2.py"
    text = worker.read_text()
    start = text.index("        on_publish: Optional[Callable] = None,")
    worker.write_text(text[:start] + "        on_publish: Optional[Callable] = None,\n"
                      + text[text.index("    ) -> GenerationBatchResult:"):])
    report = _drive(patched.python, site, tmp_path)
    assert f"does not fit the worker contract of SGLang {patched.version}" in report.get("worker_class_error", ""), report
    assert "unexpected keyword argument 'pp_proxy_tensors'" in report["modes"]["plain"].get("error", ""), report
