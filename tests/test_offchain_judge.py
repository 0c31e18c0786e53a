"""The GPU matrix's off-chain verdicts (scripts/offchain/judge.py through gpu_matrix.summarise) on
synthetic engine results: a correct run passes, and each rule fails on its own violation."""

from __future__ import annotations

import copy

import pytest


from scripts.gpu import matrix as gpu_matrix
from scripts.offchain.oracle import continuation

NAMES = ("plain_offchain", "dflash_offchain_cg", "ddtree_b8_offchain_cg")


@pytest.fixture(scope="module")
def cfgs() -> list[dict]:
    return [c for c in gpu_matrix.configs(("offchain",)) if c["name"] in NAMES]


@pytest.fixture(scope="module")
def offchain(cfgs: list[dict]) -> tuple[dict, None]:
    expected, error = gpu_matrix.offchain_expectations(cfgs)
    assert error is None
    return expected, error


@pytest.fixture
def results(cfgs: list[dict], offchain) -> dict[str, dict]:
    """What correct engines would report: plain = the rule, spec rows = the analytic acceptance."""
    ids = [continuation(p, cfgs[0]["max_new"]) for p in cfgs[0]["prompts"]]
    out = {}
    for cfg in cfgs:
        res = {"name": cfg["name"], "ok": True, "batch_ids": copy.deepcopy(ids), "single_ids": copy.deepcopy(ids)}
        if cfg["algo"] != "NONE":
            res["meta"] = [{"spec_accept_length": v} for v in offchain[0][cfg["name"]]["per_request"]]
        out[cfg["name"]] = res
    return out


def _verdicts(cfgs, results, offchain) -> tuple[dict, str]:
    summary, table = gpu_matrix.summarise(cfgs, results, offchain)
    return {n: r["verdict"] for n, r in summary["rows"].items()}, table


def test_a_correct_run_passes_and_prints_the_offchain_table(cfgs, results, offchain) -> None:
    verdicts, table = _verdicts(cfgs, results, offchain)
    assert verdicts == {"plain_offchain": "REFERENCE", "dflash_offchain_cg": "PASS", "ddtree_b8_offchain_cg": "PASS"}
    assert "| config | verdict | batch = plain |" in table  # the existing table, unchanged
    assert "Off-chain oracle" in table and "| ddtree_b8_offchain_cg | PASS |" in table


def test_one_token_off_plain_fails(cfgs, results, offchain) -> None:
    results["ddtree_b8_offchain_cg"]["single_ids"][3][10] += 1
    verdicts, table = _verdicts(cfgs, results, offchain)
    assert verdicts["ddtree_b8_offchain_cg"] == "FAIL"
    assert "differs from plain at {'run': 'single', 'prompt': 3, 'pos': 10}" in table


def test_acceptance_off_the_analytic_value_fails(cfgs, results, offchain) -> None:
    for m in results["ddtree_b8_offchain_cg"]["meta"]:
        m["spec_accept_length"] *= 1.03
    verdicts, table = _verdicts(cfgs, results, offchain)
    assert verdicts["ddtree_b8_offchain_cg"] == "FAIL" and "vs analytic" in table


def test_one_request_off_within_tolerance_passes_with_a_note(cfgs, results, offchain) -> None:
    results["ddtree_b8_offchain_cg"]["meta"][0]["spec_accept_length"] *= 1.05
    verdicts, table = _verdicts(cfgs, results, offchain)
    assert verdicts["ddtree_b8_offchain_cg"] == "PASS" and "note, ddtree_b8_offchain_cg" in table


def test_ddtree_not_above_dflash_fails(cfgs, results, offchain) -> None:
    results["dflash_offchain_cg"]["meta"] = results["ddtree_b8_offchain_cg"]["meta"]
    verdicts, table = _verdicts(cfgs, results, offchain)
    assert verdicts["ddtree_b8_offchain_cg"] == "FAIL" and "not fewer than DDTREE" in table


def test_a_target_that_breaks_its_rule_fails_every_row(cfgs, results, offchain) -> None:
    for cfg in cfgs:
        results[cfg["name"]]["batch_ids"][0][5] = 3
    verdicts, table = _verdicts(cfgs, results, offchain)
    assert verdicts == {"plain_offchain": "FAIL", "dflash_offchain_cg": "FAIL", "ddtree_b8_offchain_cg": "FAIL"}
    assert "ORACLE BROKEN" in table


def test_a_missing_engine_result_is_an_error(cfgs, results, offchain) -> None:
    del results["ddtree_b8_offchain_cg"]
    verdicts, table = _verdicts(cfgs, results, offchain)
    assert verdicts["ddtree_b8_offchain_cg"] == "ERROR" and "not run (deadline)" in table
