"""The GPU matrix at --tp-size N (issue 15's 2-GPU run), --page-size N or --attention-backend (issue 14): every engine, plain
references included, gets that setting, so DDTREE is compared with plain decoding on the same sharding
or page layout; --kv-commit reorder the DDTREE engines' move-free commit."""

from __future__ import annotations


import pytest


from scripts.gpu import engine_run as gpu_engine_run
from scripts.gpu import matrix as gpu_matrix


@pytest.mark.parametrize("setting, value", [("tp_size", 2), ("page_size", 16), ("attention_backend", "flashinfer")])
def test_setting_reaches_every_engine_and_keeps_its_ports(setting: str, value: int) -> None:
    one, other = gpu_matrix.configs(), gpu_matrix.configs(**{setting: value})
    assert [c["name"] for c in one] == [c["name"] for c in other]
    assert all(setting not in c["engine"] for c in one)
    for a, b in zip(one, other):
        assert b["engine"] == {**a["engine"], setting: value}
        if not b.get("cuda_graph"):  # the CUDA-graph settings are read from the installed SGLang
            assert gpu_engine_run.engine_kwargs(b)[setting] == value
    assert {c["algo"] for c in other} == {"NONE", "DFLASH", "DDTREE"}


def test_eager_stage_row_is_the_timed_ddtree_with_the_graphs_off() -> None:
    """--eager-stage: one more timed engine, the timed DDTREE but for DDTREE_GRAPH_TREE_STAGE=0; the
    summary puts its round time beside DFLASH's."""
    plain = {c["name"]: c for c in gpu_matrix.configs(("base",))}
    cfgs = {c["name"]: c for c in gpu_matrix.configs(("base",), eager_stage=True)}
    assert gpu_matrix.EAGER_STAGE not in plain and set(cfgs) - set(plain) == {gpu_matrix.EAGER_STAGE}
    e, t = cfgs[gpu_matrix.EAGER_STAGE], cfgs["ddtree_b8_struct_cg"]
    assert e["env"] == {"DDTREE_GRAPH_TREE_STAGE": "0"} and "env" not in t
    assert {k: v for k, v in e.items() if k not in ("name", "env", "engine")} == \
        {k: v for k, v in t.items() if k not in ("name", "engine")}
    bench = lambda ms: {"ms_per_round": ms, "ms_per_round_all": [ms], "spec_accept_length": 4.0}  # noqa: E731
    results = {"plain_struct": {"ok": True, "batch_ids": [], "single_ids": [], "meta": []}}
    rows = {"dflash_struct_cg": 2.0, "ddtree_b8_struct_cg": 2.2, gpu_matrix.EAGER_STAGE: 3.0}
    for name, ms in rows.items():
        results[name] = dict(results["plain_struct"], bench=bench(ms))
    only = [cfgs[n] for n in ("plain_struct", *rows)]
    summary, table = gpu_matrix.summarise(only, results, ({}, None))
    assert summary["bench"]["eager_stage_ratio"] == 1.5 and "tree stage eager" in table


def test_reorder_commit_runs_every_engine_without_overlap_and_ddtree_with_the_commit(tmp_path, monkeypatch) -> None:
    """--kv-commit reorder: plain and DFLASH references lose the overlap scheduler too (same schedule),
    only DDTREE engines get DDTREE_KV_COMMIT=reorder, and a DDTREE engine whose log lacks the reorder
    line fails its row (it would have moved KV instead)."""
    move, reorder = gpu_matrix.configs(), gpu_matrix.configs(kv_commit="reorder")
    assert [c["name"] for c in move] == [c["name"] for c in reorder]
    for a, b in zip(move, reorder):
        assert b["engine"]["disable_overlap_schedule"] is True
        if b["algo"] == "DDTREE":
            assert b["env"]["DDTREE_KV_COMMIT"] == "reorder" and b["log_must"] == [gpu_matrix.REORDER_LOG]
            assert "log_level" not in b["engine"]  # the line is a warning: the engines' own level shows it
        else:
            assert "DDTREE_KV_COMMIT" not in b.get("env", {}) and "log_must" not in b
    for sub in ("configs", "results", "logs"):
        (tmp_path / sub).mkdir()
    cfg = dict(next(c for c in reorder if c["algo"] == "DDTREE"), name="fake")
    # An engine run that passes but logs the move: its row must fail.
    (tmp_path / "fake_engine_run.py").write_text(
        "import json, sys\njson.dump({'ok': True}, open(sys.argv[2], 'w'))\nprint('DDTREE KV commit: move')\n")
    monkeypatch.setattr(gpu_matrix, "ENGINE_MODULE", "fake_engine_run")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    res = gpu_matrix.run_one(cfg, tmp_path, timeout_s=60)
    assert not res["ok"] and "lacks 'DDTREE KV commit: reorder'" in res["error"]


def test_reorder_under_overlap_keeps_the_overlap_scheduler() -> None:
    """--kv-commit reorder-overlap: the fenced commit under the default scheduler, so no engine loses
    overlap, and DDTREE engines still must log the reorder."""
    move, fenced = gpu_matrix.configs(), gpu_matrix.configs(kv_commit="reorder-overlap")
    assert [c["name"] for c in move] == [c["name"] for c in fenced]
    for a, b in zip(move, fenced):
        assert "disable_overlap_schedule" not in b["engine"]
        if b["algo"] == "DDTREE":
            assert b["env"]["DDTREE_KV_COMMIT"] == "reorder" and b["log_must"] == [gpu_matrix.REORDER_LOG]
        else:
            assert b == a


def test_two_switches_give_ddtree_engines_both_and_both_lines_to_log(tmp_path) -> None:
    """--kv-commit reorder-overlap --mask-in-place (as run on the H200, docs/evidence/logs/gpu-2026-12-05b.txt): only DDTREE
    engines get both switches, and a graphed one must log both lines; a log missing either fails the row."""
    plain, both = gpu_matrix.configs(), gpu_matrix.configs(kv_commit="reorder-overlap", mask_in_place=True)
    mask = gpu_matrix.MASK_IN_PLACE_LOG
    for a, b in zip(plain, both):
        if b["algo"] == "DDTREE":
            assert b["env"] == {**a.get("env", {}), "DDTREE_KV_COMMIT": "reorder", "DDTREE_MASK_IN_PLACE": "1"}
            assert b["log_must"] == [gpu_matrix.REORDER_LOG, *([mask] if b.get("cuda_graph") else [])]
        else:
            assert b == a
    cfg = next(c for c in both if c["algo"] == "DDTREE" and c.get("cuda_graph"))
    log = tmp_path / "engine.log"
    for text, missing in ((f"{gpu_matrix.REORDER_LOG}\n{mask} in the attention backend's graph buffer\n", None),
                          (f"{gpu_matrix.REORDER_LOG}\n", mask), (f"{mask}\n", gpu_matrix.REORDER_LOG), ("", gpu_matrix.REORDER_LOG)):
        log.write_text(text)
        assert gpu_matrix.missing_log_line(cfg, log) == missing
    assert gpu_matrix.missing_log_line(cfg, tmp_path / "absent.log") == gpu_matrix.REORDER_LOG


def test_mask_in_place_is_asked_of_every_ddtree_engine_and_logged_by_those_with_graphs() -> None:
    """--mask-in-place: DDTREE engines get DDTREE_MASK_IN_PLACE=1; the graph buffer exists only with CUDA
    graphs, so only those engines must log that they built the mask there (the line tree_verify writes)."""
    plain, switched = gpu_matrix.configs(), gpu_matrix.configs(mask_in_place=True)
    graphed = 0
    for a, b in zip(plain, switched):
        if b["algo"] != "DDTREE":
            assert b == a
            continue
        assert b["env"]["DDTREE_MASK_IN_PLACE"] == "1"
        assert b["log_must"] == ([gpu_matrix.MASK_IN_PLACE_LOG] if b.get("cuda_graph") else [])
        graphed += bool(b.get("cuda_graph"))
    assert graphed
