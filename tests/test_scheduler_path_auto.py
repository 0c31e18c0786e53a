"""`--speculative-ddtree-budget auto` through each release's real `Scheduler.run_batch`, on a CPU.

The release is installed, patched with `apply`, and driven by tests/round_harness/scheduler_path.py
(`auto` modes) in a subprocess of its CPU venv, as tests/test_scheduler_path.py does: the release
resolves `auto` from its own CLI, the worker is built on that config, and rounds of a changing
verify width run through run_batch into a real `ScheduleBatch`. GPU-only parts are stand-ins
(drive_round's); the round timings of the batch-size case come from a table.
DDTREE_RUNTIME_RELEASES selects other releases.
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
HARNESS = REPO / "tests" / "round_harness" / "scheduler_path.py"
HELPERS = REPO / "tests" / "cpu_serverargs"  # the torchvision stand-in the harness imports
RELEASES = runtime_releases(("0.5.15", "0.5.23"))
BLOCK = 8  # the tiny drafter's block: budget b verifies max(b + 1, 8) tokens; plain decoding (0) one


def width(budget: int) -> int:
    return 1 if budget == 0 else max(budget + 1, BLOCK)


@pytest.fixture(scope="module", params=RELEASES)
def report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    site, python = patched_release(request.param, tmp_path_factory.mktemp(f"sglang-{request.param}"))
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{HELPERS}", "PYTHONNOUSERSITE": "1", "HF_HUB_OFFLINE": "1",
           "TRITON_INTERPRET": "1", "DDTREE_AUTO_PLAIN": "1"}  # the plain rung (off by default) in the worker's ladder
    done = subprocess.run([str(python), str(HARNESS), "auto"], capture_output=True, text=True, env=env,
                          cwd=tmp_path_factory.mktemp("drive"), timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _ok(result: dict) -> dict:
    assert "error" not in result, result["error"]
    return result


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["auto_forced", "auto_forced_overlap"])
def test_any_sequence_of_widths_gives_plain_decoding_s_output(report: dict, mode: str) -> None:
    """The chooser forced through an adversarial order of budgets (what any acceptance estimate,
    however wrong, could pick): each round verifies its budget's width (the tree's prefix, or the
    root alone for plain decoding; the target backend's width follows it and is restored), and the
    output is the target's greedy decoding."""
    result = _ok(report["modes"][mode])
    forced = result["forced"]
    assert result["ladder"] == [0, 7, 8, 16, 32] == sorted(set(forced))  # every budget, in jumps both ways
    assert [b for _, b in result["chosen"]] == forced
    assert result["widths"] == [[width(b)] * 2 for b in forced]
    assert result["server_width_after"] == 33
    assert result["equal_to_greedy"] and result["tokens_per_round"] > 1, result


@pytest.mark.slow
def test_the_chosen_width_changes_with_the_batch_size(report: dict) -> None:
    """The real chooser, with round costs from a table where a wide verify is free at batch 1 and,
    at batch 3, dearer than every token a tree could emit: after timing each budget, batch 1 decodes
    with a tree and batch 3 plainly (no draft pass), on the same worker, each round verifying what
    was chosen, and the output stays greedy."""
    result = _ok(report["modes"]["auto_costs"])
    chosen = result["chosen"]  # (batch size, budget): 20 rounds at batch 1, then 20 at batch 3
    assert [bs for bs, _ in chosen] == [1] * 20 + [3] * 20
    warm_up = [b for _, b in chosen[:15]]
    assert warm_up == [0, 0, 0, 7, 7, 7, 8, 8, 8, 16, 16, 16, 32, 32, 32]  # every budget timed thrice, narrowest first
    at_1, at_3 = {b for _, b in chosen[15:20]}, {b for _, b in chosen[35:]}
    assert at_1 and min(at_1) > 0 and at_3 == {0}, str(chosen)  # trees at batch 1, plain decoding at batch 3
    assert [w for w, _ in result["widths"]] == [width(b) for _, b in result["chosen"]]
    assert result["equal_to_greedy"], result


@pytest.mark.slow
def test_auto_resolves_to_the_widest_budget_s_widths_and_respects_cuda_graphs(report: dict) -> None:
    """`--speculative-ddtree-budget auto` from the release's own CLI: KV reservation and the target's
    widths are the widest budget's (64 -> 65), the draft runner keeps the block; with CUDA graphs on
    the worker builds a target verify graph runner per narrower width (8, 9, 17, 33: budgets 7, 8,
    16, 32), each with its own backend built while the server args and the published config say
    that width, so the whole ladder keeps graphs; with --disable-cuda-graph no runner is built."""
    graphed, eager = _ok(report["construct_auto"]), _ok(report["construct_auto_eager"])
    for built in (graphed, eager):
        assert (built["verify_width"], built["budget"], built["topk"]) == (65, 64, 64)
        assert built["init_server_args_width"] == 8 and built["record_width_after"] == 65
        assert built["release_runner_takes_width"] and built["target_own_restored"]
        assert built["server_args_width_after_capture"] == built["record_width_after"]
        assert built["published_after_capture"] == built["published_after"]
    assert graphed["auto_ladder"] == eager["auto_ladder"] == [0, 7, 8, 16, 32, 64]
    assert eager["graphs_built"] == [] and "round_backends" not in eager
    widths = [1, 8, 9, 17, 33]
    assert [g["width"] for g in graphed["graphs_built"]] == widths, graphed["graphs_built"]
    for g in graphed["graphs_built"]:
        assert g["backend_width"] == g["width"] and g["runner_backend_is_its_own"], g
        # Where the config is published (0.5.17+) the width is published there, else set on the args.
        assert (g["published"] if g["published"] is not None else g["server_width"]) == g["width"], g
    assert graphed["round_backends"] == {str(w): [w, w] for w in widths + [65]}
    assert graphed["target_own_after_rounds"]
