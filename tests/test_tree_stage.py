"""`tree_stage.TreeStage`: when it may replay a graph, and, on a GPU, that a real CUDA-graph replay
gives the eager stage's trees for new features every round (the CPU rounds through a stand-in
graph are in tests/test_ddtree_round.py)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import gpu_matrix  # noqa: E402


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


def test_head_chunks_from_the_environment(ts, monkeypatch, caplog):
    monkeypatch.delenv(ts.HEAD_ENV, raising=False)
    assert ts.TreeStage.wanted_head_chunks() == 0  # the default: one GEMM
    for value, chunks in (("", 0), ("0", 0), ("8", 8), (" 16 ", 16), ("eight", 0), ("-1", 0), ("2.5", 0)):
        monkeypatch.setenv(ts.HEAD_ENV, value)
        assert ts.TreeStage.wanted_head_chunks() == chunks, value
    assert "'eight' is not a chunk count" in caplog.text


def test_head_chunks_only_where_the_interleaved_head_applies(ts, caplog):
    """Kept (and announced) for an unsharded head with 1 <= K <= 256; dropped with a warning for a sharded
    head (its top-K merges across ranks), K > 256 and budget 0."""
    assert ts.TreeStage(head(64, 8), 8, 4, 9, graphs=True, head_chunks=4).head_chunks == 4
    assert ts.HEAD_LOG.format(chunks=4) in caplog.text
    assert ts.HEAD_LOG.format(chunks=4).startswith(gpu_matrix.HEAD_CHUNKS_LOG.format(chunks=4))  # what the bench looks for
    assert ts.TreeStage(head(64, 8), 8, 4, 9, graphs=True).head_chunks == 0
    for lm, budget, topk in ((head(64, 8, tp_size=2), 8, 4), (head(600, 8), 300, None), (head(64, 8), 0, None)):
        caplog.clear()
        assert ts.TreeStage(lm, budget, topk, budget + 1, graphs=True, head_chunks=4).head_chunks == 0
        assert f"{ts.HEAD_ENV}=4 ignored" in caplog.text


def test_head_chunks_build_the_same_trees(ts):
    """With the head in chunks (the torch reference on the CPU; the Triton path is tests/test_kernels_head_topk.py)
    the stage builds the one-GEMM stage's trees, eagerly and through a stand-in graph."""
    class StandIn:
        def capture(self, fn, static):
            self.fn, self.static = fn, static
            self.out = fn(static)
            return self.out

        def replay(self):
            fresh = self.fn(self.static)
            for mine, new in zip((*self.out.tree, *self.out.padded), (*fresh.tree, *fresh.padded)):
                mine.copy_(new)

    lm = head(300, 16)
    plain = ts.TreeStage(lm, 24, 8, 30, graphs=False)
    for chunked in (ts.TreeStage(lm, 24, 8, 30, graphs=False, head_chunks=3),
                    ts.TreeStage(lm, 24, 8, 30, graphs=True, graph_factory=StandIn, head_chunks=3)):
        for r in range(2):
            features = torch.randn(3, 7, 16, generator=torch.Generator().manual_seed(r)) * 3
            got, want = chunked(features), plain(features)
            for a, b in zip((*got.tree, *got.padded), (*want.tree, *want.padded)):
                assert torch.equal(a, b)


def test_cpu_features_run_eagerly_without_a_stand_in(ts):
    """No CUDA and no graph factory: the stage is the eager one (nothing captured)."""
    stage = ts.TreeStage(head(64, 8), 8, 4, 12, graphs=True)
    features = torch.randn(2, 7, 8)
    got = stage(features)
    want = stage.from_logits(features @ stage.lm_head.weight.T)
    assert all(torch.equal(a, b) for a, b in zip(got.padded, want.padded)) and not stage._entries
    assert got.padded.tokens.shape == (2, 12) and got.tree.tokens.shape == (2, 9)


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
@pytest.mark.parametrize("head_chunks", [0, 8])
def test_cuda_graph_replay_equals_eager_round_after_round(ts, head_chunks):
    """Also with the head in chunks and its scans on a side stream (head_chunks=8; the eager stage then runs
    the same chunks: another split count may round the LSE, and so a near-tied tree, otherwise)."""
    vocab, hidden, bs, depth = 151936, 256, 4, 15
    lm = head(vocab, hidden, "cuda")
    lm.weight = lm.weight.to(torch.bfloat16)
    graphed = ts.TreeStage(lm, 32, 8, 33, graphs=True, head_chunks=head_chunks)
    eager = ts.TreeStage(lm, 32, 8, 33, graphs=False, head_chunks=head_chunks)
    for r in range(3):
        features = torch.randn(bs, depth + 1, hidden, device="cuda", dtype=torch.bfloat16)[:, 1:] * (1 + r)
        got, want = graphed(features), eager(features)
        for a, b in zip((*got.tree, *got.padded), (*want.tree, *want.padded)):
            assert torch.equal(a, b), r
    assert len(graphed._entries) == 1
