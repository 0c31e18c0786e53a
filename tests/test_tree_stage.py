"""`tree_stage.TreeStage`: when it may replay a graph, and, on a GPU, that a real CUDA-graph replay
gives the eager stage's trees for new features every round (the CPU rounds through a stand-in
graph are in tests/test_ddtree_round.py)."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture(scope="module")
def ts(dropin):
    return dropin("tree_stage")


def head(vocab: int, hidden: int, device: str = "cpu", tp_size: int = 1):
    g = torch.Generator(device="cpu").manual_seed(0)
    weight = (torch.randn(vocab, hidden, generator=g) / hidden**0.5).to(device)
    return types.SimpleNamespace(weight=weight, tp_size=tp_size)


def test_graphs_only_when_asked_and_the_head_is_whole(ts, monkeypatch):
    assert ts.TreeStage(head(64, 8), 8, 4, 9, graphs=True).graphed
    assert not ts.TreeStage(head(64, 8), 8, 4, 9, graphs=False).graphed
    sharded = head(64, 8, tp_size=2)
    assert not ts.TreeStage(sharded, 8, 4, 9, graphs=True).graphed
    monkeypatch.delenv(ts.ENV, raising=False)
    assert ts.TreeStage.wanted()  # the default
    for value, wanted in (("", True), ("0", False), (" 0", False), ("1", True)):
        monkeypatch.setenv(ts.ENV, value)
        assert ts.TreeStage.wanted() is wanted
    monkeypatch.delenv(ts.ENV)
    assert not ts.TreeStage.wanted(default=False)  # the v1 adapter's default: eager
    monkeypatch.setenv(ts.ENV, "1")
    assert ts.TreeStage.wanted(default=False)


def test_cpu_features_run_eagerly_without_a_stand_in(ts):
    """No CUDA and no graph factory: the stage is the eager one (nothing captured)."""
    stage = ts.TreeStage(head(64, 8), 8, 4, 12, graphs=True)
    features = torch.randn(2, 7, 8)
    got = stage(features)
    want = stage.from_logits(features @ stage.lm_head.weight.T)
    assert all(torch.equal(a, b) for a, b in zip(got.padded, want.padded)) and not stage._entries
    assert got.padded.tokens.shape == (2, 12) and got.tree.tokens.shape == (2, 9)


def test_a_root_only_tree_reads_no_logits(ts):
    """Budget 0: the stage gives the root-only tree padded to the width without the head's GEMM
    (a head whose weight cannot be read would fail it)."""
    class NoWeight:
        tp_size = 1

        @property
        def weight(self):
            raise AssertionError("budget 0 read the lm_head")

    got = ts.TreeStage(NoWeight(), 0, None, 8, graphs=False)(torch.randn(3, 7, 8))
    assert got.tree.tokens.shape == (3, 1) and got.padded.tokens.shape == (3, 8)
    assert got.tree.first_child.tolist() == [[-1]] * 3


def test_a_failed_capture_runs_that_shape_eagerly_and_keeps_serving(ts, caplog):
    """A capture that fails (out of memory for one more graph) leaves that batch size eager, is not
    retried every round, and other shapes still get their graphs."""
    class FailingAtBatch3:
        captures = 0

        def capture(self, fn, static):
            type(self).captures += 1
            if static.shape[0] == 3:
                raise torch.OutOfMemoryError("CUDA out of memory (stand-in)")
            self.fn, self.static, self.out = fn, static, fn(static)
            return self.out

        def replay(self):
            pass

    stage = ts.TreeStage(head(64, 8), 8, 4, 12, graphs=True, graph_factory=FailingAtBatch3)
    for _ in range(2):
        features = torch.randn(3, 7, 8)
        got = stage(features)
        want = stage.from_logits(features @ stage.lm_head.weight.T)
        assert all(torch.equal(a, b) for a, b in zip(got.padded, want.padded))
    assert FailingAtBatch3.captures == 1 and stage._entries[((3, 7, 8), torch.float32)] is None
    assert "runs the stage eagerly" in caplog.text
    stage(torch.randn(2, 7, 8))
    assert FailingAtBatch3.captures == 2 and stage._entries[((2, 7, 8), torch.float32)] is not None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graph_replay_equals_eager_round_after_round(ts):
    vocab, hidden, bs, depth = 151936, 256, 4, 15
    lm = head(vocab, hidden, "cuda")
    lm.weight = lm.weight.to(torch.bfloat16)
    graphed = ts.TreeStage(lm, 32, 8, 33, graphs=True)
    eager = ts.TreeStage(lm, 32, 8, 33, graphs=False)
    for r in range(3):
        features = torch.randn(bs, depth + 1, hidden, device="cuda", dtype=torch.bfloat16)[:, 1:] * (1 + r)
        got, want = graphed(features), eager(features)
        for a, b in zip((*got.tree, *got.padded), (*want.tree, *want.padded)):
            assert torch.equal(a, b), r
    assert len(graphed._entries) == 1
