"""`kv_commit`: which commit a server runs (DDTREE_KV_COMMIT, page size), and that the move and the
reordering commit leave the same KV behind every position a reader reaches through req_to_token."""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tests.kernels_env import INTERPRETED  # noqa: E402,F401  (before the drop-in's kernels are decorated)


@pytest.fixture(scope="module")
def kc(dropin):
    return dropin("kv_commit")


@pytest.mark.parametrize("page_size, overlap, unfenced, reason", [
    (1, False, None, None), (16, False, None, "needs --page-size 1 (got 16)"),
    (1, True, "no hook", "is not fenced against the overlap scheduler: no hook (needs --disable-overlap-schedule)"),
    (1, True, None, None),  # fenced (patches/table_fence.py)
    (1, False, "no hook", None),  # without overlap nothing needs the fence
    (16, True, None, "needs --page-size 1 (got 16)"), (None, False, None, "needs --page-size 1 (got None)"),
])
def test_where_reordering_cannot_run(kc, page_size, overlap, unfenced, reason):
    blocker = kc.reorder_blocker(page_size, overlap, unfenced)
    assert blocker == reason


@pytest.mark.parametrize("value, blocked, mode", [(None, False, "move"), ("", False, "move"), ("move", False, "move"),
                                                  ("reorder", False, "reorder"), (" Reorder ", False, "reorder"),
                                                  ("reorder", True, "move"), ("move", True, "move")])
def test_mode(kc, monkeypatch, caplog, value, blocked, mode):
    """Reorder where asked and nothing blocks it; else the move, with a warning naming the reason."""
    if value is None:
        monkeypatch.delenv(kc.ENV, raising=False)
    else:
        monkeypatch.setenv(kc.ENV, value)
    blocker = kc.reorder_blocker(16, False, None) if blocked else None
    with caplog.at_level(logging.WARNING):
        assert kc.commit_mode(blocker) == mode
    assert ("needs --page-size 1 (got 16): DDTREE moves the accepted KV instead" in caplog.text) == (
        value == "reorder" and blocked)


@pytest.mark.parametrize("mode, level", [("move", logging.INFO), ("reorder", logging.WARNING)])
def test_the_opt_in_commit_announces_itself_at_the_default_level(kc, caplog, mode, level):
    """SGLang's default log level is warning: a server (and bench_e2e's --big-reorder) sees that the
    opt-in reorder ran; the default move stays at info."""
    with caplog.at_level(logging.INFO):
        kc.KVCommit(Pool(4), mode)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(level, f"DDTREE KV commit: {mode}")]


def test_an_unknown_mode_is_refused_by_name(kc, monkeypatch):
    monkeypatch.setenv(kc.ENV, "swap")
    with pytest.raises(ValueError, match="DDTREE_KV_COMMIT='swap': expected one of move, reorder"):
        kc.commit_mode(None)
    with pytest.raises(ValueError, match="KV commit mode 'swap'"):
        kc.KVCommit(Pool(4), "swap")


class Pool:
    """SGLang's `move_kv_cache` contract: slot src[i]'s KV onto dst[i], in place (one value a slot)."""

    def __init__(self, slots: int) -> None:
        self.kv = torch.arange(slots, dtype=torch.float32) * 10

    def move_kv_cache(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        self.kv[dst] = self.kv[src]


@pytest.mark.parametrize("mode", ["move", "reorder"])
def test_both_commits_put_the_path_behind_its_positions(kc, monkeypatch, mode):
    """Requests at pool rows 2 and 0, prefixes 3 and 1, verify width 6: through the table, positions
    prefix .. prefix + len read the accepted nodes' KV either way; the move leaves the table as it
    was, the reorder leaves the KV where the verify wrote it and the row's slots the same set."""
    monkeypatch.setenv(kc.ENV, mode)
    pool = Pool(64)
    table = torch.zeros(3, 12, dtype=torch.int32)
    table[2, 3:9] = torch.tensor([10, 11, 12, 13, 14, 15], dtype=torch.int32)
    table[0, 1:7] = torch.tensor([20, 21, 22, 23, 24, 25], dtype=torch.int32)
    before_table, before_kv = table.clone(), pool.kv.clone()
    req, prefix = torch.tensor([2, 0]), torch.tensor([3, 1])
    cache_loc = torch.tensor([[10, 11, 12, 13, 14, 15], [20, 21, 22, 23, 24, 25]])
    accepted, accept_len = torch.tensor([[0, 2, 4], [0, 1, -1]]), torch.tensor([2, 1])
    commit = kc.KVCommit(pool, kc.commit_mode(None))
    assert commit.mode == mode
    slots = commit(table, req, prefix, accepted, accept_len, cache_loc, 5)
    assert slots.dtype == torch.int64 and slots.shape == (2, 6)
    reads = [pool.kv[table[2, 3:6].long()] / 10, pool.kv[table[0, 1:3].long()] / 10]
    assert [r.tolist() for r in reads] == [[10, 12, 14], [20, 21]]
    assert slots[0, :3].tolist() == table[2, 3:6].tolist() and slots[1, :2].tolist() == table[0, 1:3].tolist()
    if mode == "move":
        assert torch.equal(table, before_table) and slots.tolist() == cache_loc.tolist()
    else:
        assert torch.equal(pool.kv, before_kv)
        assert slots.tolist() == [[10, 12, 14, 11, 13, 15], [20, 21, 22, 23, 24, 25]]
        assert sorted(table[2, 3:9].tolist()) == list(range(10, 16))
        assert torch.equal(table[1], before_table[1])
