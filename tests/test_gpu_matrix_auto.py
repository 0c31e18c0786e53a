"""The GPU matrix's `--auto-budget` rows (`--speculative-ddtree-budget auto`, issue 48): each copies a
fixed-budget row's engine and prompts with budget "auto", and must log what shows `auto` ran as
intended (the ladder, the per-round choices, with CUDA graphs the widths given a verify graph)."""

from __future__ import annotations



from scripts.gpu import engine_run as gpu_engine_run
from scripts.gpu import matrix as gpu_matrix


def test_auto_rows_copy_their_fixed_rows_and_must_log_the_ladder_and_the_choices() -> None:
    plain = {c["name"]: c for c in gpu_matrix.configs()}
    rows = {c["name"]: c for c in gpu_matrix.configs(auto_budget=True)}
    auto = {n: c for n, c in rows.items() if n not in plain}
    assert sorted(auto) == ["ddtree_auto_offchain_cg", "ddtree_auto_rand_cg", "ddtree_auto_rand_eager",
                            "ddtree_auto_struct_cg", "ddtree_auto_struct_eager"]
    for name, row in auto.items():
        fixed = plain[name.replace("_auto_", "_b64_" if "offchain" in name else "_b8_")]
        assert {k: row[k] for k in ("target", "draft", "prompts", "max_new", "cuda_graph")} == \
            {k: fixed[k] for k in ("target", "draft", "prompts", "max_new", "cuda_graph")}
        assert "bench" not in row and row["env"]["DDTREE_AUTO_LOG_EVERY"] == "4"
        assert row["budget"] == "auto"
        if not row["cuda_graph"]:  # the CUDA-graph settings are read from the installed SGLang
            assert gpu_engine_run.engine_kwargs(row)["speculative_ddtree_budget"] == "auto"
        if "offchain" in name:  # cap 0: the target's own width only, so budget 64 every round
            assert row["env"]["DDTREE_AUTO_GRAPH_MEM_GB"] == "0" and row["analytic_budget"] == 64
            assert row["log_must"] == [gpu_matrix.AUTO_LADDER_LOG, gpu_matrix.AUTO_WIDTHS_LOG,
                                       gpu_matrix.AUTO_GRAPHED_LOG]
            continue
        graphs = [gpu_matrix.AUTO_WIDTHS_LOG] if row["cuda_graph"] else []
        assert row["log_must"] == [gpu_matrix.AUTO_LADDER_LOG, gpu_matrix.AUTO_CHOSEN_LOG, *graphs]
        assert "DDTREE_AUTO_GRAPH_MEM_GB" not in row["env"] and "analytic_budget" not in row
    assert len({c["engine"]["port"] for c in rows.values()}) == len(rows)  # every engine its own port


def test_on_the_v1_worker_only_the_ladder_line_is_required() -> None:
    """0.5.11-0.5.13 verify the widest budget every round: no per-round line to require."""
    rows = gpu_matrix.auto_configs(gpu_matrix.base_configs(), chooses_per_round=False)
    assert rows and all(r["log_must"] == [gpu_matrix.AUTO_LADDER_LOG] for r in rows)
