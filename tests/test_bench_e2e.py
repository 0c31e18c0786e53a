"""scripts/bench/e2e.py's coordinator and report on CPU.

The engines need a GPU, so the coordinator drives tests/bench_e2e/fake_worker.py, which speaks
scripts/bench/worker.py's protocol with made-up timings: process start-up and failure handling, the
rotated interleaving, the deadline, the output comparison with plain decoding, the goal verdicts
and the markdown + plots are what is under test here. The real engines run in the lead's GPU call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest

from scripts.bench import e2e as bench_e2e
from scripts.bench import report as bench_report

REPO = Path(__file__).resolve().parent.parent

FAKE = REPO / "tests" / "bench_e2e" / "fake_worker.py"
PROMPTS = [[i + 1] * 4 for i in range(64)]


def cfg(name: str, algo: str, budget=None, phase="pair", **fake) -> dict:
    return {"name": name, "algo": algo, "budget": budget, "phase": phase, "engine": {}, "fake": fake}


def bench(tmp_path: Path, cfgs: list[dict], deadline_s: float = 120.0):
    workers, failures = bench_e2e.start_all(cfgs, tmp_path, 30, lambda m: None, script=FAKE)
    args = Namespace(t0=time.time(), deadline_s=deadline_s, repeats=3, big_repeats=2, max_new=17, big_max_new=9,
                     big_batches=list(bench_e2e.BIG_BATCHES), batches=list(bench_e2e.BATCHES))
    b = bench_e2e.Bench(args, workers, PROMPTS, lambda m: None)
    b.failures += failures
    return b


# plain has a near-tie at prompt 3's last token (of 17), where ddtree_b32 differs; ddtree_b4 differs
# at prompt 5's last token, where plain's top-2 gap is clear: a bug
PAIR = [cfg("plain", "plain", round_s=0.001, ties=[[3, 16]]), cfg("dflash", "DFLASH", accept=4, round_s=0.001),
        cfg("ddtree_b4", "DDTREE", 4, accept=5, round_s=0.001, flip=5),
        cfg("ddtree_b32", "DDTREE", 32, accept=6, round_s=0.001, flip=3)]


def test_interleaved_repeats_and_report(tmp_path: Path) -> None:
    cfgs = PAIR + [cfg("ddtree_b64", "DDTREE", 64, fail_start=True),
                   cfg("8b_dflash", "DFLASH", phase="big", accept=1, round_s=0.002),
                   cfg("8b_ddtree", "DDTREE", 15, phase="big", accept=1, round_s=0.0021)]
    b = bench(tmp_path, cfgs)
    try:
        names = [c["name"] for c in cfgs if c["phase"] == "pair"]
        assert b.pair_phase(names, 0.0) and b.pair_phase(names, 1.0) and b.big_phase(["8b_dflash", "8b_ddtree"])
    finally:
        bench_e2e.stop_all(b.workers.values())
    assert len(b.failures) == 1 and "ddtree_b64 did not start: RuntimeError: fake start failure" in b.failures[0]
    pair = [r for r in b.records if r["phase"] == "pair" and r["temperature"] == 0]
    assert len(pair) == 4 * 3 * 3  # configs x batches x repeats
    first = [r["config"] for r in pair if r["batch"] == 1]
    assert first[:4] == ["plain", "dflash", "ddtree_b4", "ddtree_b32"]
    assert first[4:8] == ["dflash", "ddtree_b4", "ddtree_b32", "plain"]  # rotated by one per repeat
    same = {(r["config"], r["batch"]): (r.get("same_as_plain"), r.get("tie_diffs"), r.get("bug_diffs"))
            for r in pair if r["repeat"] == 0}
    assert same[("ddtree_b4", 8)] == ("7/8", 0, 1) and same[("ddtree_b32", 8)] == ("7/8", 1, 0)
    assert same[("ddtree_b32", 1)] == ("1/1", 0, 0) and same[("plain", 32)] == ("32/32", 0, 0)
    assert all("tie_diffs" not in r for r in pair if r["repeat"] > 0)
    assert all("same_as_plain" not in r for r in b.records if r.get("temperature") == 1)

    meta = {"machine": "cpu", "sglang": "0.5.15", "torch": "x", "command": "cmd", "started": "now",
            "wall_s": 1.0, "finished": ["a"], "cut": [], "method": ["- m"], "pair": ["p"], "big": ["b"],
            "failures": b.failures}
    md = bench_report.write(tmp_path / "docs", meta, b.records).read_text()
    assert "DDTREE budget 32 / DFLASH, T=0: 1.33, 1.33, 1.33 (batch 1, 8, 32); goal >= 1.3: **PASS**" in md
    assert "worst 1.05 at batch" in md  # 0.0021 / 0.002 per round, equal rounds
    assert "| 8 | ddtree_b32 | 5.67 |" in md  # 17 tokens / 3 rounds
    assert "- Greedy outputs vs plain decoding, T=0 (12 config x batch runs): 4 differences, **2 not at a " \
           "near-tie (bug)**: ddtree_b4 batch 8 (1), ddtree_b4 batch 32 (1); plain's top-2 logprob gap where " \
           "they begin: median " in md
    assert "| 7/8 (0 near-tie, 1 bug) |" in md and "| 31/32 (1 near-tie, 0 bug) |" in md
    for png in ("bench-e2e-accept.png", "bench-e2e-tokens-per-s.png"):
        assert (tmp_path / "docs" / png).stat().st_size > 1000 and f"]({png})" in md
    assert "## Failures" in md


def test_the_greedy_line_counts_the_dflash_control_beside_ddtree() -> None:
    """Differences the near-tie rule does not explain, split by method: DFLASH is SGLang's own path, so
    its count says how far the rule holds on these models; without any from DFLASH, no control clause."""
    def row(config, algo, bugs, ties=0, gaps=()):
        return {"temperature": 0, "config": config, "algo": algo, "batch": 8, "tie_diffs": ties, "bug_diffs": bugs,
                "bug_gaps": list(gaps)}

    (line,) = bench_report.greedy_check([row("dflash", "DFLASH", 3, 1, (0.05, 0.06, 0.5)),
                                         row("ddtree_b16", "DDTREE", 2, 0, (0.03, 0.04)),
                                         row("ddtree_b32", "DDTREE", 4), row("plain", "NONE", 0)])
    assert "**9 not at a near-tie (bug)** (DFLASH, SGLang's own speculative path and so the control for this " \
           "rule, has 3 of them, DDTREE 6): dflash batch 8 (3)" in line
    assert line.endswith("; plain's top-2 logprob gap where they begin: median 0.050, largest 0.500")
    (line,) = bench_report.greedy_check([row("dflash", "DFLASH", 0, 1), row("ddtree_b16", "DDTREE", 2)])
    assert "**2 not at a near-tie (bug)**: ddtree_b16 batch 8 (2)" in line


def test_differences_from_plain_are_judged_at_the_first_differing_token() -> None:
    """gpu_matrix's rule: plain's top-2 gap at the first differing token < TIE_GAP = near-tie, else bug;
    a later near-tie does not excuse an earlier clear difference."""
    assert bench_e2e.gpu_matrix.TIE_GAP == 0.02
    clear, tie = [-0.1, -1.1], [-0.1, -0.11]
    ref = {"output_ids": [[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 1, 1], [2, 2, 2]],
           "top2": [[clear] * 3, [clear, tie, clear], [clear, tie, tie], [tie, clear, clear],
                    [clear, [0.0, -0.02], clear]]}  # gap == 0.02 exactly
    got = [[1, 2, 3],  # identical
           [4, 0, 0],  # first differs at 1, a near-tie there
           [0, 0, 9],  # first differs at 0, clear there (ties later): a bug
           [0, 1, 1],  # differs at position 0, a near-tie
           [2, 0, 2]]  # gap exactly TIE_GAP is no near-tie
    assert bench_e2e.compare_with_plain(ref, got) == {"same_as_plain": "1/5", "tie_diffs": 2, "bug_diffs": 2,
                                                      "bug_gaps": [0.02, 1.0]}
    assert bench_e2e.compare_with_plain(ref, ref["output_ids"]) == {"same_as_plain": "5/5", "tie_diffs": 0,
                                                                     "bug_diffs": 0, "bug_gaps": []}


def _t0_records(judged: dict[str, tuple[str, int, int]]) -> list[dict]:
    """One first-repeat T=0 record per config at batch 8; `judged`: config -> (same, ties, bugs), where
    ties = None leaves the new fields out (a results.json from before the near-tie judgement)."""
    algo = {"plain": ("plain", None), "dflash": ("DFLASH", None), "ddtree_b8": ("DDTREE", 8)}
    out = []
    for name, (same, ties, bugs) in judged.items():
        rec = {"phase": "pair", "config": name, "algo": algo[name][0], "budget": algo[name][1], "batch": 8,
               "temperature": 0.0, "repeat": 0, "seconds": 1.0, "tokens": [16] * 8,
               "verify_ct": [0 if name == "plain" else 4] * 8,
               "same_as_plain": same}
        if ties is not None:
            rec.update(tie_diffs=ties, bug_diffs=bugs)
        out.append(rec)
    return out


REPORT_META = {"machine": "cpu", "sglang": "0.5.15", "torch": "x", "command": "cmd", "started": "now", "wall_s": 1.0,
               "finished": ["a"], "cut": [], "method": ["- m"]}
OLD_TEXT = ("`= plain`: prompts whose greedy output is identical to plain decoding's at the same batch size "
            "(first repeat; bf16 near-ties can flip a token legitimately).\n")


def test_report_without_the_judgement_renders_as_before(tmp_path: Path) -> None:
    records = _t0_records({"plain": ("8/8", None, None), "dflash": ("3/8", None, None),
                           "ddtree_b8": ("2/8", None, None)})
    md = bench_report.write(tmp_path, REPORT_META, records).read_text()
    assert "| 8 | plain | - | 128 | - | - | 8/8 |" in md and "| 8 | dflash | 4.00 | 128 | 1.00 | - | 3/8 |" in md
    assert "| 8 | ddtree_b8 | 4.00 | 128 | 1.00 | 1.00 | 2/8 |" in md
    assert OLD_TEXT in md and "Greedy outputs" not in md and "near-tie," not in md and "**near-tie**" not in md


def test_report_shows_near_ties_and_bugs(tmp_path: Path) -> None:
    records = _t0_records({"plain": ("8/8", 0, 0), "dflash": ("3/8", 5, 0), "ddtree_b8": ("2/8", 6, 0)})
    md = bench_report.write(tmp_path, REPORT_META, records).read_text()
    assert "| 8 | plain | - | 128 | - | - | 8/8 |" in md
    assert "| 8 | dflash | 4.00 | 128 | 1.00 | - | 3/8 (5 near-tie, 0 bug) |" in md
    assert "| 8 | ddtree_b8 | 4.00 | 128 | 1.00 | 1.00 | 2/8 (6 near-tie, 0 bug) |" in md
    assert "## Goals (issue 9)" in md and "- Greedy outputs vs plain decoding, T=0 (3 config x batch runs): " \
        "11 differences, all at near-ties of plain (top-2 logprob gap < 0.02)\n" in md
    assert OLD_TEXT[:-1] + " Plain's reference is an untimed run" in md and "is < 0.02" in md

    rows = bench_report.pair_rows(_t0_records({"plain": ("8/8", 0, 0), "dflash": ("7/8", 0, 1),
                                               "ddtree_b8": ("5/8", 1, 2)}))
    assert bench_report.greedy_check(rows) == [
        "- Greedy outputs vs plain decoding, T=0 (3 config x batch runs): 4 differences, **3 not at a near-tie "
        "(bug)** (DFLASH, SGLang's own speculative path and so the control for this rule, has 1 of them, DDTREE 2): "
        "dflash batch 8 (1), ddtree_b8 batch 8 (2)"]
    rows = bench_report.pair_rows(_t0_records({"plain": ("8/8", 0, 0), "dflash": ("8/8", 0, 0)}))
    assert bench_report.greedy_check(rows) == ["- Greedy outputs vs plain decoding, T=0 (2 config x batch runs): "
                                               "0 differences"]


def test_a_dying_engine_is_reported_and_the_others_go_on(tmp_path: Path) -> None:
    cfgs = [dict(c) for c in PAIR]
    cfgs[1] = cfg("dflash", "DFLASH", accept=4, die_on="dflash-8-1")
    b = bench(tmp_path, cfgs)
    try:
        assert b.pair_phase([c["name"] for c in cfgs], 0.0)
    finally:
        bench_e2e.stop_all(b.workers.values())
    assert len(b.failures) == 1 and b.failures[0].startswith("dflash: no reply")
    runs = {(r["config"], r["repeat"], r["batch"]) for r in b.records}
    assert ("dflash", 1, 1) in runs and ("dflash", 1, 8) not in runs and ("dflash", 2, 1) not in runs
    assert ("plain", 2, 32) in runs


def test_the_deadline_cuts_the_phase(tmp_path: Path) -> None:
    b = bench(tmp_path, PAIR, deadline_s=10.0)
    try:
        assert not b.pair_phase([c["name"] for c in PAIR], 0.0)
    finally:
        bench_e2e.stop_all(b.workers.values())
    assert b.records == []  # less than 15 s left: no timed run starts


def test_goals_say_miss_and_not_measured() -> None:
    def rec(config, algo, budget, accept_rounds, seconds, rep):
        return {"phase": "pair", "config": config, "algo": algo, "budget": budget, "batch": 1, "temperature": 0.0,
                "repeat": rep, "seconds": seconds, "tokens": [12], "verify_ct": [accept_rounds]}

    records = [rec("dflash", "DFLASH", None, 4, 1.0, r) for r in range(3)]
    records += [rec("ddtree_b32", "DDTREE", 32, 3, 1.1, r) for r in range(3)]
    lines = bench_report.goals(bench_report.pair_rows(records), [])
    assert "1.33" in lines[0] and "PASS" in lines[0]  # 4 / 3 tokens per round
    assert "0.91x; goal > 1: **MISS**" in lines[1]
    assert "batch 8" in lines[2] and "NOT MEASURED" in lines[2] and "NOT MEASURED" in lines[3]


def test_issue_49_goals_read_dflash_acceptance_and_the_best_budget_at_batch_1() -> None:
    def rec(config, algo, budget, rounds, seconds, rep, batch=1):
        return {"phase": "pair", "config": config, "algo": algo, "budget": budget, "batch": batch, "temperature": 0.0,
                "repeat": rep, "seconds": seconds, "tokens": [60], "verify_ct": [rounds]}

    records = [rec("dflash", "DFLASH", None, 12, 1.0, r) for r in range(3)]  # 5 tokens per round
    records += [rec("ddtree_b16", "DDTREE", 16, 10, 0.9, r) for r in range(3)]  # 1.11x
    records += [rec("ddtree_b64", "DDTREE", 64, 8, 0.75, r) for r in range(3)]  # 1.33x
    records += [rec("ddtree_b16", "DDTREE", 16, 10, 0.1, r, batch=4) for r in range(3)]  # not batch 1: no say
    lines = bench_report.strong_pair_goals(bench_report.pair_rows(records))
    assert lines[0] == "- DFLASH accepted tokens/round, batch 1, T=0: 5.00; goal >= 4.0: **PASS**"
    assert lines[1] == "- DDTREE best budget vs DFLASH tokens/s, batch 1, T=0: budget 64 at 1.33x; goal >= 1.25: **PASS**"
    slow = [dict(r, seconds=0.95) if r["config"] == "ddtree_b64" else dict(r, verify_ct=[20]) if r["algo"] == "DFLASH"
            else r for r in records]
    lines = bench_report.strong_pair_goals(bench_report.pair_rows(slow))
    assert "3.00; goal >= 4.0: **MISS**" in lines[0] and "budget 16 at 1.11x; goal >= 1.25: **MISS**" in lines[1]
    assert bench_report.strong_pair_goals([]) == [
        "- DFLASH accepted tokens/round, batch 1, T=0: **NOT MEASURED**",
        "- DDTREE best budget vs DFLASH tokens/s, batch 1, T=0: **NOT MEASURED**"]


def test_big_round_time_subtracts_the_median_prefill() -> None:
    """One slow prefill sample (the 2.14 s one below) must not turn a round negative: each run's
    prefill is the median of that engine's prefill calls at that batch."""
    def rec(algo, rep, seconds, prefill):
        return {"phase": "big", "config": algo.lower(), "algo": algo, "batch": 1, "repeat": rep, "seconds": seconds,
                "prefill_seconds": prefill, "rounds": 10, "tokens": [64], "verify_ct": [10]}

    records = [rec("DFLASH", 0, 1.10, 2.14), rec("DFLASH", 1, 1.10, 1.00), rec("DFLASH", 2, 1.12, 1.02)]
    records += [rec("DDTREE", r, 1.12, 1.00) for r in range(3)]
    (row,) = bench_report.big_rows(records)
    assert row["dflash_ms"] == pytest.approx([8.0, 8.0, 10.0]) and min(row["ratio"]) > 0
    assert row["ddtree_ms"] == pytest.approx([12.0, 12.0, 12.0])


def _tokenizer_pair(tmp_path: Path) -> Path:
    """A pair folder holding only the target's tokenizer files (all the 8B-shape phase borrows)."""
    pair = tmp_path / "pair"
    (pair / "target").mkdir(parents=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (pair / "target" / f).write_text("{}")
    return pair


def _big_rec(config: str, algo: str, seconds: float, variant: str | None = None) -> dict:
    """One 8B-shape record on triton at batch 8: 10 rounds of 64 tokens in `seconds`."""
    return {"phase": "big", "config": config, "algo": algo, "batch": 8, "repeat": 0, "backend": "triton",
            "variant": variant, "seconds": seconds, "prefill_seconds": 0.0, "rounds": 10, "verify_ct": [10],
            "tokens": [64]}


def test_big_shape_configs_have_equal_verify_width(tmp_path: Path) -> None:
    pair = _tokenizer_pair(tmp_path)
    d, t = bench_e2e.big_configs(tmp_path / "big", pair)
    draft = json.loads((tmp_path / "big" / "draft" / "config.json").read_text())
    assert d["engine"]["speculative_algorithm"] == "DFLASH" and t["engine"]["speculative_ddtree_budget"] + 1 == \
        draft["block_size"] == draft["dflash_config"]["block_size"]
    assert max(draft["dflash_config"]["target_layer_ids"]) < draft["num_target_layers"] - 1
    assert d["engine"]["load_format"] == "dummy" and t["engine"]["cuda_graph_max_bs_decode"] == 64


def test_eager_stage_variant_runs_beside_the_default_ddtree_but_not_in_the_goals(tmp_path: Path) -> None:
    pair = tmp_path / "pair"
    cfgs = {c["name"]: c for c in bench_e2e.pair_configs(pair, (64,))}
    g = cfgs["ddtree_b64_eager_stage"]
    assert g["env"] == {"DDTREE_GRAPH_TREE_STAGE": "0"} and g["variant"] == "eager stage"
    assert "env" not in cfgs["ddtree_b64"]
    assert g["engine"]["speculative_ddtree_budget"] == 64

    def rec(config, algo, budget, variant, seconds):
        return {"phase": "pair", "config": config, "algo": algo, "budget": budget, "variant": variant, "batch": 1,
                "temperature": 0.0, "repeat": 0, "seconds": seconds, "tokens": [64], "verify_ct": [32]}

    rows = bench_report.pair_rows([rec("dflash", "DFLASH", None, None, 1.0), rec("ddtree_b64", "DDTREE", 64, None, 2.0),
                                   rec("ddtree_b64_eager_stage", "DDTREE", 64, "eager stage", 0.5)])
    assert [r["config"] for r in rows] == ["dflash", "ddtree_b64", "ddtree_b64_eager_stage"]
    (line,) = [x for x in bench_report.goals(rows, []) if "batch 1" in x and "tokens/s" in x]
    assert "0.50" in line and "MISS" in line  # the default ddtree_b64 (0.5x), not the eager-stage variant (2x)


def test_pair_budgets_and_kv_pool_are_chosen(tmp_path: Path) -> None:
    """--budgets 16 32 --pair-tokens 16384 (a pair widened to the 8B shape): one DDTREE engine per budget
    named, every engine's pool that size."""
    cfgs = bench_e2e.pair_configs(tmp_path / "pair", budgets=(16, 32), tokens=16384)
    assert [c["name"] for c in cfgs] == ["plain", "dflash", "ddtree_b16", "ddtree_b32"]
    assert {c["engine"]["max_total_tokens"] for c in cfgs} == {16384}
    assert len(bench_e2e.pair_configs(tmp_path / "pair")) == 2 + len(bench_e2e.BUDGETS)


def test_a_budget_group_without_plain_and_its_batches_size_the_engines(tmp_path: Path) -> None:
    cfgs = bench_e2e.pair_configs(tmp_path / "pair", budgets=(64, 128), batches=(1, 4, 16), plain=False)
    assert [c["name"] for c in cfgs] == ["dflash", "ddtree_b64", "ddtree_b128"]
    assert {c["engine"]["cuda_graph_max_bs_decode"] for c in cfgs} == {16}
    assert {c["engine"]["max_running_requests"] for c in cfgs} == {16}


def test_prompts_come_from_the_pairs_own_held_out_windows(tmp_path: Path) -> None:
    """scripts/train/pair.py's prompts.json (a mixed corpus's held-out text) wins over the stdlib windows where it
    holds enough prompts of the asked length."""
    (tmp_path / "prompts.json").write_text(json.dumps([[i] * 20 for i in range(70)]))
    assert bench_e2e.prompts_from(tmp_path, 64, 16) == [[i] * 16 for i in range(64)]


def _trained_pair(tmp_path: Path) -> Path:
    """What main() checks of a trained pair (the fake engines load nothing), with 64 prompts of 8 tokens."""
    pair = tmp_path / "pair"
    for sub in ("target", "draft"):
        (pair / sub).mkdir(parents=True)
        (pair / sub / "model.safetensors").write_text("x")
    (pair / "prompts.json").write_text(json.dumps([[i + 2] * 8 for i in range(64)]))
    (pair / "manifest.json").write_text(json.dumps({
        "command": "train_pair.py", "seed": 0, "seconds": 1, "device": "cpu", "python": "3", "sizes": {
            "target_layers": 8, "hidden": 256, "vocab": 4096, "draft_layers": 4, "block": 16,
            "target_layer_ids": [1, 3, 5, 6]}, "params": {"target": 1e6, "draft": 1e5},
        "target": {"steps_done": 1, "held_out_loss": 1.0}, "draft": {"steps_done": 1},
        "files": {"train": 1}, "tokens": {"train": 1}, "held_out_estimate": {"error": "none computed"}}))
    return pair


def test_main_benches_the_asked_batches_without_plain(tmp_path: Path, monkeypatch, capsys) -> None:
    pair = _trained_pair(tmp_path)
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["bench_e2e.py", "--pair", str(pair), "--out", str(out), "--work",
                                      str(tmp_path / "work"), "--repeats", "2", "--max-new", "9", "--prompt-len", "8",
                                      "--deadline-s", "60", "--worker", str(FAKE), "--phases", "pair0",
                                      "--budgets", "64", "--batches", "1", "4", "--no-plain"])
    with pytest.raises(SystemExit) as done:
        bench_e2e.main()
    assert done.value.code == 0, capsys.readouterr().out[-3000:]
    records = json.loads((out / "results.json").read_text())["records"]
    assert {(r["config"], r["batch"]) for r in records} == {(c, b) for c in ("dflash", "ddtree_b64") for b in (1, 4)}
    assert len(records) == 2 * 2 * 2


def test_auto_adds_a_ddtree_engine_with_budget_auto(tmp_path: Path) -> None:
    cfgs = bench_e2e.pair_configs(tmp_path / "pair", budgets=(16, 32), auto=True)
    assert [c["name"] for c in cfgs] == ["plain", "dflash", "ddtree_b16", "ddtree_b32", "ddtree_auto"]
    auto = cfgs[-1]
    assert (auto["algo"], auto["budget"], auto["variant"]) == ("DDTREE", None, "auto budget")
    assert auto["engine"] == dict(cfgs[2]["engine"], speculative_ddtree_budget="auto")  # else as budget 16's
    assert "ddtree_auto" not in [c["name"] for c in bench_e2e.pair_configs(tmp_path / "pair", budgets=(16,))]
    assert not any("disable_cuda_graph" in c["engine"] for c in cfgs)  # graphs stay on unless asked


def test_no_cuda_graph_reaches_every_engine(tmp_path: Path, monkeypatch, capsys) -> None:
    """--auto --no-cuda-graph: plain, DFLASH, the fixed budgets and auto all start eager (side by side
    under one setting), auto's rows land in the report, and the 8B shape's engines take it too."""
    pair = _trained_pair(tmp_path)
    out, work = tmp_path / "out", tmp_path / "work"
    monkeypatch.setattr(sys, "argv", ["bench_e2e.py", "--pair", str(pair), "--out", str(out), "--work", str(work),
                                      "--repeats", "1", "--max-new", "9", "--prompt-len", "8", "--deadline-s", "60",
                                      "--worker", str(FAKE), "--phases", "pair0", "--budgets", "16", "--batches", "1",
                                      "--auto", "--no-cuda-graph"])
    with pytest.raises(SystemExit) as done:
        bench_e2e.main()
    assert done.value.code == 0, capsys.readouterr().out[-3000:]
    engines = {p.stem: json.loads(p.read_text())["engine"] for p in work.glob("*.json")}
    assert set(engines) == {"plain", "dflash", "ddtree_b16", "ddtree_auto"}
    assert all(e["disable_cuda_graph"] is True for e in engines.values())
    results = json.loads((out / "results.json").read_text())
    assert {r["config"] for r in results["records"]} == set(engines)
    assert any("CUDA graphs off in every engine" in m for m in results["meta"]["method"])
    big = bench_e2e.big_configs(tmp_path / "big", _tokenizer_pair(tmp_path / "t"), cuda_graph=False)
    assert all(c["engine"]["disable_cuda_graph"] is True for c in big)


def _auto_records() -> list[dict]:
    """T=0, 3 repeats, each repeat twice as slow as the one before (paired ratios cancel it, exactly in floats). Batch 1: auto 1.25 %
    slower than the best fixed budget (16), faster than DFLASH; batch 4: slower than both; batch 8: auto alone."""
    seconds = {1: {"dflash": 1.0, "ddtree_b16": 0.8, "ddtree_b32": 0.9, "ddtree_auto": 0.81},
               4: {"dflash": 1.0, "ddtree_b16": 0.9, "ddtree_b32": 0.7, "ddtree_auto": 1.05}, 8: {"ddtree_auto": 1.0}}
    algo = {"dflash": ("DFLASH", None, None), "ddtree_b16": ("DDTREE", 16, None), "ddtree_b32": ("DDTREE", 32, None),
            "ddtree_auto": ("DDTREE", None, "auto budget")}
    return [{"phase": "pair", "config": c, "algo": algo[c][0], "budget": algo[c][1], "variant": algo[c][2],
             "batch": b, "temperature": 0.0, "repeat": rep, "seconds": s * 2 ** rep, "tokens": [64],
             "verify_ct": [16]} for b, per in seconds.items() for c, s in per.items() for rep in range(3)]


def test_auto_rows_follow_the_fixed_budgets_and_the_plots_skip_them(tmp_path: Path) -> None:
    rows = bench_report.pair_rows(_auto_records())
    assert [r["config"] for r in rows if r["batch"] == 1] == ["dflash", "ddtree_b16", "ddtree_b32", "ddtree_auto"]
    assert bench_report.plots(rows, tmp_path) == ["bench-e2e-accept.png", "bench-e2e-tokens-per-s.png"]
    md = bench_report.write(tmp_path / "docs", REPORT_META, _auto_records()).read_text()
    assert "| 1 | ddtree_b32 | 4.00 |" in md.split("| 1 | ddtree_auto |")[0]  # auto's row after the fixed ones
    assert "## Goals (issue 48, budget auto)" in md


def test_issue_48_goals_compare_auto_with_the_best_fixed_budget_and_dflash() -> None:
    assert bench_report.auto_budget_goals(_auto_records()) == [
        "- DDTREE budget auto / the best fixed budget (16) tokens/s, batch 1, T=0: 0.99x; goal >= 0.97: **PASS**",
        "- DDTREE budget auto / DFLASH tokens/s, batch 1, T=0: 1.23x; goal >= 1.0: **PASS**",
        "- DDTREE budget auto / the best fixed budget (32) tokens/s, batch 4, T=0: 0.67x; goal >= 0.97: **MISS**",
        "- DDTREE budget auto / DFLASH tokens/s, batch 4, T=0: 0.95x; goal >= 1.0: **MISS**",
        "- DDTREE budget auto / the best fixed budget tokens/s, batch 8, T=0: **NOT MEASURED**",
        "- DDTREE budget auto / DFLASH tokens/s, batch 8, T=0: **NOT MEASURED**"]
    without = [r for r in _auto_records() if r["config"] != "ddtree_auto"]
    assert bench_report.auto_budget_goals(without) == [
        "- DDTREE budget auto / the best fixed budget and / DFLASH, tokens/s: **NOT MEASURED**"]


def test_big_phase_pairs_dflash_and_ddtree_per_attention_backend(tmp_path: Path) -> None:
    """--big-backends triton flashinfer: one DFLASH and one DDTREE engine per backend, and the report
    keeps each backend's ratios (and its goal line) apart."""
    pair = _tokenizer_pair(tmp_path)
    cfgs = bench_e2e.big_configs(tmp_path / "big", pair, ("triton", "flashinfer"))
    assert [(c["name"], c["engine"]["attention_backend"]) for c in cfgs] == [
        ("8b_dflash", "triton"), ("8b_ddtree", "triton"),
        ("8b_dflash_flashinfer", "flashinfer"), ("8b_ddtree_flashinfer", "flashinfer")]

    def rec(algo, backend, seconds):
        return {"phase": "big", "config": algo, "algo": algo, "batch": 8, "repeat": 0, "backend": backend,
                "seconds": seconds, "prefill_seconds": 0.0, "rounds": 10, "tokens": [64], "verify_ct": [10]}

    rows = bench_report.big_rows([rec("DFLASH", "flashinfer", 0.1), rec("DDTREE", "flashinfer", 0.2),
                                  rec("DFLASH", "triton", 0.1), rec("DDTREE", "triton", 0.1)])
    assert [(r["backend"], r["ratio"]) for r in rows] == [("triton", [1.0]), ("flashinfer", [2.0])]
    lines = bench_report.goals([], rows)
    assert any("(triton attention): worst 1.00" in x and "PASS" in x for x in lines)
    assert any("(flashinfer attention): worst 2.00" in x and "MISS" in x for x in lines)


def test_a_verify_tile_is_one_more_ddtree_engine_paired_with_the_same_dflash(tmp_path: Path) -> None:
    """--big-verify-tiles M16N64w4: a third triton engine with DDTREE_VERIFY_TILE in its own
    environment; its rows and goal line pair it with triton's DFLASH, apart from the default DDTREE."""
    pair = _tokenizer_pair(tmp_path)
    cfgs = bench_e2e.big_configs(tmp_path / "big", pair, ("triton", "flashinfer"), ("M16N64w4",))
    assert [(c["name"], c.get("variant"), c.get("env")) for c in cfgs] == [
        ("8b_dflash", None, None), ("8b_ddtree", None, None),
        ("8b_ddtree_tile_M16N64w4", "verify tile M16N64w4", {"DDTREE_VERIFY_TILE": "M16N64w4"}),
        ("8b_dflash_flashinfer", None, None), ("8b_ddtree_flashinfer", None, None)]
    assert cfgs[2]["engine"] == cfgs[1]["engine"]  # only the environment differs

    rows = bench_report.big_rows([_big_rec("8b_dflash", "DFLASH", 0.1), _big_rec("8b_ddtree", "DDTREE", 0.12),
                                  _big_rec("8b_ddtree_tile_M16N64w4", "DDTREE", 0.105, "verify tile M16N64w4")])
    assert [(r["variant"], r["ratio"]) for r in rows] == [(None, [pytest.approx(1.2)]),
                                                           ("verify tile M16N64w4", [pytest.approx(1.05)])]
    assert rows[1]["dflash_ms"] == rows[0]["dflash_ms"]
    lines = bench_report.goals([], rows)
    assert any("(triton attention): worst 1.20" in x and "MISS" in x for x in lines)
    assert any("(triton attention, DDTREE verify tile M16N64w4): worst 1.05" in x and "PASS" in x for x in lines)
    assert "| triton, verify tile M16N64w4 | 8 |" in "\n".join(bench_report.big_table(rows))


def test_big_eager_stage_is_one_more_ddtree_engine_with_the_graphs_off(tmp_path: Path) -> None:
    """--big-eager-stage: a DDTREE engine on triton whose environment turns the tree stage's CUDA graph
    off; the report pairs it with the same DFLASH under its own goal line."""
    pair = _tokenizer_pair(tmp_path)
    cfgs = bench_e2e.big_configs(tmp_path / "big", pair, ("triton",), (), eager_stage=True)
    assert [(c["name"], c.get("variant"), c.get("env")) for c in cfgs] == [
        ("8b_dflash", None, None), ("8b_ddtree", None, None),
        ("8b_ddtree_eager_stage", "eager stage", {"DDTREE_GRAPH_TREE_STAGE": "0"})]
    assert cfgs[2]["engine"] == cfgs[1]["engine"]
    assert "8b_ddtree_eager_stage" not in [c["name"] for c in bench_e2e.big_configs(tmp_path / "b2", pair)]

    rows = bench_report.big_rows([_big_rec("8b_dflash", "DFLASH", 0.1), _big_rec("8b_ddtree", "DDTREE", 0.1),
                                  _big_rec("8b_ddtree_eager_stage", "DDTREE", 0.13, "eager stage")])
    lines = bench_report.goals([], rows)
    assert any("(triton attention, DDTREE eager stage): worst 1.30" in x and "MISS" in x for x in lines)
    assert any("(triton attention): worst 1.00" in x and "PASS" in x for x in lines)


def test_big_reorder_is_one_more_ddtree_engine_that_must_log_the_reorder(tmp_path: Path) -> None:
    """--big-reorder: a DDTREE engine on triton with DDTREE_KV_COMMIT=reorder, paired with the same
    DFLASH; an engine whose log lacks the reorder line (its release fell back to the move) is a failure."""
    pair = _tokenizer_pair(tmp_path)
    cfgs = bench_e2e.big_configs(tmp_path / "big", pair, ("triton",), (), reorder=True)
    assert [(c["name"], c.get("variant"), c.get("env")) for c in cfgs] == [
        ("8b_dflash", None, None), ("8b_ddtree", None, None),
        ("8b_ddtree_reorder", "reorder commit", {"DDTREE_KV_COMMIT": "reorder"})]
    assert cfgs[2]["engine"] == cfgs[1]["engine"] and cfgs[2]["log_must"] == "DDTREE KV commit: reorder"
    assert "disable_overlap_schedule" not in cfgs[2]["engine"]  # timed as users run it: overlap on, fenced
    assert "DDTREE_KV_COMMIT=reorder python" in bench_e2e.command_line({"DDTREE_KV_COMMIT": "reorder"}, [])

    class W:
        def __init__(self, cfg: dict, text: str) -> None:
            self.cfg, self.name, self.log = cfg, cfg["name"], tmp_path / f"{cfg['name']}.log"
            self.log.write_text(text)

    ran = W(cfgs[2], "[2026] WARNING kv_commit.py: DDTREE KV commit: reorder\n")
    assert bench_e2e.missing_log_lines([W(cfgs[1], ""), ran]) == []
    fell_back = W(cfgs[2], "DDTREE_KV_COMMIT=reorder is not fenced ...: DDTREE moves the accepted KV instead\n")
    (why,) = bench_e2e.missing_log_lines([fell_back])
    assert why.startswith("8b_ddtree_reorder: its engine log lacks 'DDTREE KV commit: reorder'")


@pytest.mark.parametrize("argv, why", [(["--big-verify-tiles", "M24N64w4"], "expected M<BLOCK_M>"),
                                       (["--big-batches", "3"], "--big-batches takes")])
def test_bad_big_options_are_refused(tmp_path: Path, monkeypatch, argv: list[str], why: str) -> None:
    monkeypatch.setattr(sys, "argv", ["bench_e2e.py", "--pair", str(tmp_path), "--phases", "big",
                                      "--out", str(tmp_path / "o"), *argv])
    with pytest.raises(SystemExit, match=why):
        bench_e2e.main()


@pytest.mark.parametrize("missing", ["manifest.json", "draft/model.safetensors"])
def test_missing_pair_fails_loudly(tmp_path: Path, missing: str, monkeypatch) -> None:
    for f in ("target/model.safetensors", "draft/model.safetensors", "manifest.json"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("x")
    (tmp_path / missing).unlink()
    monkeypatch.setattr(sys, "argv", ["bench_e2e.py", "--pair", str(tmp_path), "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="missing: run scripts/train/pair.py"):
        bench_e2e.main()


def test_the_8b_phase_alone_trains_only_a_tokenizer(tmp_path: Path, monkeypatch) -> None:
    """A big-only call on a cold machine has no pair: it gets train_pair's tokenizer, not a
    'missing pair' exit (the 8B shape's weights are dummies)."""
    trained = []
    monkeypatch.setattr(bench_e2e.stdlib_corpus, "load", lambda: Namespace(train=["x = 1"]))
    monkeypatch.setattr(bench_e2e.stdlib_corpus, "train_tokenizer",
                        lambda texts, vocab, chars: trained.append((vocab, chars)) or "tok")
    monkeypatch.setattr(bench_e2e.stdlib_corpus, "save_tokenizer",
                        lambda tok, path: (path.mkdir(parents=True), (path / "tokenizer.json").write_text(tok)))
    root = bench_e2e.tokenizer_only_pair(tmp_path / "t")
    assert bench_e2e.tokenizer_only_pair(tmp_path / "t") == root
    assert trained == [bench_e2e.PAIR_TOKENIZER]  # once, with train_pair's vocab and text length
    assert (root / "target" / "tokenizer.json").read_text() == "tok"

    reached = []

    def stop(pair, count, length):
        reached.append(pair)
        raise SystemExit("prompts")

    monkeypatch.setattr(bench_e2e, "tokenizer_only_pair", lambda root: root)
    monkeypatch.setattr(bench_e2e, "prompts_from", stop)
    monkeypatch.setattr(sys, "argv", ["bench_e2e.py", "--pair", str(tmp_path / "none"), "--phases", "big",
                                      "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w")])
    with pytest.raises(SystemExit, match="prompts"):
        bench_e2e.main()
    assert reached == [tmp_path / "w" / "tokenizer-only"]


def _cli(engine: dict) -> list[str]:
    """Engine kwargs as launch_server flags (the paths are the probe's own arguments)."""
    argv = []
    for key, value in engine.items():
        if key in ("model_path", "speculative_draft_model_path") or value is False:
            continue
        argv += [f"--{key.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return argv


@pytest.mark.heavy
def test_every_engine_config_resolves_on_patched_sglang(release_site, tmp_path: Path) -> None:
    """All nine engine configurations pass SGLang 0.5.15's own ServerArgs resolution once patched,
    with the verify widths the report claims (DDTREE budget b verifies b+1; 8B: both verify 16)."""
    import os
    import shutil
    import subprocess

    from tests.cpu_serverargs.venv_builder import ensure_venv
    from tests.sglang_releases import release_metadata

    site = tmp_path / "site"
    shutil.copytree(release_site("0.5.15"), site)
    python = ensure_venv("0.5.15", release_metadata(site, "0.5.15"))
    done = subprocess.run([sys.executable, "-m", "ddtree_patch", "apply", "--target", str(site)],
                          capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    pair = tmp_path / "pair"
    for sub, arch, extra in (("target", "Qwen3ForCausalLM", {}),
                             ("draft", "DFlashDraftModel", {"num_hidden_layers": 2, "block_size": 16,
                                                            "num_target_layers": 6,
                                                            "dflash_config": {"mask_token_id": 1, "block_size": 16,
                                                                              "target_layer_ids": [1, 3, 4]}})):
        (pair / sub).mkdir(parents=True)
        cfg = dict(bench_e2e.BIG_TARGET, vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=6,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64, architectures=[arch])
        cfg.update(extra)
        (pair / sub / "config.json").write_text(json.dumps(cfg))
        for f in ("tokenizer.json", "tokenizer_config.json"):
            (pair / sub / f).write_text("{}")
    widths = {}
    for cfgs in (bench_e2e.pair_configs(pair), bench_e2e.big_configs(tmp_path / "big", pair)):
        engine = cfgs[-1]["engine"]
        done = subprocess.run(
            [str(python), str(REPO / "tests" / "cpu_serverargs" / "probe.py"), "--target", engine["model_path"],
             "--draft", engine["speculative_draft_model_path"],
             "--cases", json.dumps({c["name"]: _cli(c["engine"]) for c in cfgs})],
            capture_output=True, text=True, timeout=900,
            env={**os.environ, "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        for name, case in json.loads(done.stdout)["cases"].items():
            assert "error" not in case, (name, case)
            widths[name] = case["resolved"]["speculative_num_draft_tokens"]
    assert widths == {"plain": None, "dflash": 16, "ddtree_b4": 16, "ddtree_b8": 16, "ddtree_b16": 17,
                      "ddtree_b32": 33, "ddtree_b64": 65, "8b_dflash": 16, "8b_ddtree": 16}


def test_main_end_to_end_with_stand_in_engines(tmp_path: Path, monkeypatch, capsys) -> None:
    """The whole command on CPU: pair check, prompts from held-out stdlib files through the pair's
    tokenizer, nine engine processes, three phases, report files; exit 0 when nothing failed."""

    pair = tmp_path / "pair"
    for sub in ("target", "draft"):
        (pair / sub).mkdir(parents=True)
        (pair / sub / "model.safetensors").write_text("x")
    from scripts.train import stdlib_corpus

    tok = stdlib_corpus.train_tokenizer(stdlib_corpus.load(max_files=30, held_out_every=3).train, 300, 200_000)
    tok.save(str(pair / "target" / "tokenizer.json"))
    (pair / "target" / "tokenizer_config.json").write_text("{}")
    (pair / "manifest.json").write_text(json.dumps({
        "command": "train_pair.py", "seed": 0, "seconds": 1, "device": "cpu", "python": "3", "sizes": {
            "target_layers": 6, "hidden": 256, "vocab": 4096, "draft_layers": 2, "block": 16,
            "target_layer_ids": [1, 3, 4]}, "params": {"target": 1e6, "draft": 1e5},
        "target": {"steps_done": 1, "held_out_loss": 1.0}, "draft": {"steps_done": 1},
        "files": {"train": 1}, "tokens": {"train": 1}, "held_out_estimate": {"error": "none computed"}}))
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["bench_e2e.py", "--pair", str(pair), "--out", str(out), "--work",
                                      str(tmp_path / "work"), "--repeats", "2", "--big-repeats", "1",
                                      "--max-new", "9", "--big-max-new", "5", "--deadline-s", "120",
                                      "--worker", str(FAKE)])
    with pytest.raises(SystemExit) as done:
        bench_e2e.main()
    assert done.value.code == 0, capsys.readouterr().out[-3000:]
    md = (out / "benchmarks.md").read_text()
    assert "Phases finished: trained pair T=0, trained pair T=1, 8B shape; not finished" in md and "): none." in md
    assert "## Trained pair, T=1" in md and "| 64 |" in md and "Offline acceptance estimate failed" in md
    assert "- `dflash: WARNING dflash_worker_v2.py: falling back to greedy argmax verification.`" in md
    records = json.loads((out / "results.json").read_text())["records"]
    assert {r["config"] for r in records} == {"plain", "dflash", "ddtree_b4", "ddtree_b8", "ddtree_b16", "ddtree_b32",
                                              "ddtree_b64", "8b_dflash", "8b_ddtree"}

    monkeypatch.setattr(sys, "argv", sys.argv + ["--phases", "big", "--out", str(tmp_path / "big-only")])
    with pytest.raises(SystemExit) as done:
        bench_e2e.main()
    assert done.value.code == 0
    records = json.loads((tmp_path / "big-only" / "results.json").read_text())["records"]
    assert {r["config"] for r in records} == {"8b_dflash", "8b_ddtree"}
    assert "Phases finished: 8B shape;" in (tmp_path / "big-only" / "benchmarks.md").read_text()


def test_worker_watchdog_reports_a_dead_engine_child(tmp_path: Path) -> None:
    """An engine child process that dies makes bench_worker reply with the error and exit, instead
    of the coordinator waiting out a timeout (SGLang's Engine can wait forever on a dead scheduler)."""
    import os
    import subprocess

    script = tmp_path / "dies.py"
    script.write_text(
        "import multiprocessing, os, sys, time\n"
        "from scripts.bench import worker as bench_worker\nimport threading\n"
        "def child():\n    os._exit(3)\n"
        "if __name__ == '__main__':\n"
        "    bench_worker.watch_children(int(sys.argv[1]), 'x', threading.Event())\n"
        "    multiprocessing.Process(target=child, name='scheduler_0').start()\n"
        "    time.sleep(30)\n")
    r, w = os.pipe()
    t0 = time.time()
    proc = subprocess.run([sys.executable, str(script), str(w)], pass_fds=(w,), timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    os.close(w)
    reply = json.loads(os.read(r, 65536).decode().splitlines()[0])
    assert proc.returncode == 1 and time.time() - t0 < 20
    assert reply == {"ready": False, "name": "x", "error": "engine child process died: scheduler_0 (exit 3)"}


def test_the_command_names_the_runtime_switches_that_reach_the_engines() -> None:
    env = {"BENCH_COMMAND": "RIG=$PWD/.gpurig BUDGET_S=560 bash scripts/bench_e2e.sh --phases big",
           "DDTREE_VERIFY_TILE": "M16N64w4", "DDTREE_GRAPH_TREE_STAGE": ""}
    assert bench_e2e.command_line(env, []) == \
        "DDTREE_VERIFY_TILE=M16N64w4 RIG=$PWD/.gpurig BUDGET_S=560 bash scripts/bench_e2e.sh --phases big"
    assert bench_e2e.command_line({}, ["--phases", "big"]) == "python -m scripts.bench.e2e --phases big"


def test_bench_widened_trains_widens_benches_and_packs_one_file(tmp_path: Path) -> None:
    """scripts/bench_widened.sh with a stand-in bundle and a stand-in python3 on PATH that logs its
    calls: train (capped), widen, then bench_e2e's pair phase on the widened pair with the script's
    defaults and the caller's options after them; everything lands in $OUT/bench.tgz."""
    import tarfile

    env, calls = _stand_ins(tmp_path)
    env["TRAIN_CAPS"] = "30 20"
    out = tmp_path / "out"
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "ddtree_b16.log").write_text("engine log\n")
    done = subprocess.run(["bash", str(REPO / "scripts" / "bench_widened.sh"), "--repeats", "5"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = calls.read_text().splitlines()
    assert lines[0] == f"-m ddtree_patch apply --target {tmp_path / 'site'}"
    assert lines[1] == f"-m scripts.train.pair {tmp_path / 'pair'} --set target_cap_s=30 --set draft_cap_s=20"
    assert lines[2] == f"-m scripts.train.widen {tmp_path / 'pair'} {tmp_path / 'wide'} --no-check"
    bench = lines[3].split()
    assert bench[:4] == ["-m", "scripts.bench.e2e", "--pair", str(tmp_path / "wide")]
    assert " --phases pair0 --budgets 16 32 --repeats 3 --pair-tokens 16384 " in lines[3]
    assert bench[-2:] == ["--repeats", "5"]  # the caller's options come last, so they win
    with tarfile.open(out / "bench.tgz") as t:
        assert {"bench/benchmarks.md", "bench/ddtree_b16.log", "train.log", "widen.log"} <= set(t.getnames())
    assert not (out / "bench").exists()


def _stand_ins(tmp_path: Path) -> tuple[dict, Path]:
    """A stand-in bundle and python3 (logging its calls) for scripts/bench_widened.sh."""
    rig, bin_dir = tmp_path / "rig", tmp_path / "bin"
    (rig / "scripts").mkdir(parents=True)
    (rig / "scripts" / "env.sh").write_text("return 0\n")
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    (bin_dir / "python3").write_text(f"""#!/bin/bash
echo "$*" >> {calls}
case "$1 $2" in
  "-m scripts.train.pair") mkdir -p "$3" && echo '{{}}' > "$3/manifest.json" ;;
  "-m scripts.train.widen") mkdir -p "$4" && echo '{{}}' > "$4/manifest.json" ;;
  "-m scripts.bench.e2e") shift 2; while [ "$1" != --out ]; do shift; done; mkdir -p "$2" && echo report > "$2/benchmarks.md" ;;
esac
""")
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RIG": str(rig), "OUT": str(tmp_path / "out"),
           "SITE": str(tmp_path / "site"), "HOME": str(tmp_path), "PAIR": str(tmp_path / "pair"),
           "WIDE": str(tmp_path / "wide"), "WORK": str(tmp_path / "work")}
    return env, calls


def test_bench_widened_benches_budget_groups_beside_dflash_and_reuses_a_pair(tmp_path: Path) -> None:
    """BUDGET_GROUPS: one bench_e2e run per group, plain in the first only, each reporting in bench/g<i>;
    TRAIN_ARGS reach scripts.train.pair; REUSE=1 with a pair and a widened pair on hand trains nothing."""
    import tarfile

    env, calls = _stand_ins(tmp_path)
    env.update(BUDGET_GROUPS="32;16 64", TRAIN_ARGS="--preset strong --set seed_note=1")
    done = subprocess.run(["bash", str(REPO / "scripts" / "bench_widened.sh"), "--batches", "1", "4"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = calls.read_text().splitlines()
    assert lines[1].endswith("--set draft_cap_s=60 --preset strong --set seed_note=1")
    benches = [x for x in lines if x.startswith("-m scripts.bench.e2e ")]
    assert len(benches) == 2
    assert " --budgets 32 --repeats 3 " in benches[0] and "--no-plain" not in benches[0]
    assert " --budgets 16 64 --repeats 3 " in benches[1] and benches[1].endswith("--no-plain --batches 1 4")
    with tarfile.open(tmp_path / "out" / "bench.tgz") as t:
        assert {"bench/g1/benchmarks.md", "bench/g2/benchmarks.md", "train.log", "widen.log"} <= set(t.getnames())

    calls.unlink()
    env.update(REUSE="1", BUDGET_GROUPS="128")
    done = subprocess.run(["bash", str(REPO / "scripts" / "bench_widened.sh")], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = calls.read_text().splitlines()
    assert [x.split()[1] for x in lines] == ["ddtree_patch", "scripts.bench.e2e"] and " --budgets 128 " in lines[1]
