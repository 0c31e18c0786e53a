"""gpu_turns.Turns: the timed engines of the GPU matrix take the GPU one run at a time, round-robin,
and a missing peer costs a bounded wait and is reported, never a run out of turn."""

from __future__ import annotations

import threading
import time
from pathlib import Path


from scripts.gpu import matrix as gpu_matrix
from scripts.gpu.turns import Turns


def _engines(folder: Path, count: int, runs: int, present: int | None = None, timeout_s: float = 10.0):
    """`present` of `count` engines (threads) each time `runs` runs; returns (order of runs, most
    runs at once, each engine's interleaved flag)."""
    order, active, most, lock = [], [0], [0], threading.Lock()
    flags = {}

    def engine(i: int) -> None:
        turns = Turns(folder, i, count, timeout_s=timeout_s)
        time.sleep(0.01 * (count - i))  # arrive out of order
        turns.ready()
        for run in range(runs):
            turns.take(run)
            with lock:
                active[0] += 1
                most[0] = max(most[0], active[0])
                order.append(i)
            time.sleep(0.003)
            with lock:
                active[0] -= 1
            turns.give(run)
        turns.finish(runs)
        flags[i] = turns.interleaved

    threads = [threading.Thread(target=engine, args=(i,)) for i in range(count if present is None else present)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return order, most[0], flags


def test_engines_take_turns_run_by_run(tmp_path):
    order, most, flags = _engines(tmp_path, count=3, runs=4)
    assert order == [0, 1, 2] * 4 and most == 1
    assert flags == {0: True, 1: True, 2: True}


def test_a_missing_engine_costs_a_bounded_wait_and_is_reported(tmp_path):
    """Two of three engines come: they wait `timeout_s` for the third, then run without turns, say so,
    and stop moving the counter (so none of them believes it is in turn when it is not)."""
    start = time.monotonic()
    order, _, flags = _engines(tmp_path, count=3, runs=2, present=2, timeout_s=0.3)
    assert time.monotonic() - start < 10
    assert sorted(order) == [0, 0, 1, 1] and flags == {0: False, 1: False}
    assert not (tmp_path / "turn").exists()


def test_one_engine_alone_needs_no_peer(tmp_path):
    order, _, flags = _engines(tmp_path, count=1, runs=3, timeout_s=0.3)
    assert order == [0, 0, 0] and flags == {0: True}


def test_the_matrix_gives_every_timed_engine_its_turn_and_says_how_they_ran(tmp_path):
    timed = [c for c in gpu_matrix.configs(("base",), eager_stage=True) if c.get("bench")]
    assert [c["name"] for c in timed] == ["dflash_struct_cg", "ddtree_b8_struct_cg", gpu_matrix.EAGER_STAGE]
    (tmp_path / "turns").mkdir()
    (tmp_path / "turns" / "turn").write_text("7")  # a previous run's counter is cleared
    turned = gpu_matrix.take_turns(timed, tmp_path / "turns")
    assert [c["bench"]["turns"] for c in turned] == [{"dir": str(tmp_path / "turns"), "index": i, "count": 3}
                                                     for i in range(3)]
    assert not (tmp_path / "turns").exists() and all("turns" not in c["bench"] for c in timed)
    plain = {"ok": True, "batch_ids": [], "single_ids": [], "meta": []}
    for interleaved, said in ((True, "taking turns run by run"), (False, "NOT interleaved")):
        bench = {"ms_per_round": 2.0, "ms_per_round_all": [2.0] * 9, "spec_accept_length": 4.0,
                 "interleaved": interleaved}
        results = {"plain_struct": plain, **{c["name"]: dict(plain, bench=bench) for c in turned}}
        cfgs = [c for c in gpu_matrix.configs(("base",), eager_stage=True) if c["name"] == "plain_struct"] + turned
        summary, table = gpu_matrix.summarise(cfgs, results, ({}, None))
        assert summary["bench"]["interleaved"] is interleaved and said in table and "median of 9 runs" in table
