"""`auto_budget`: the runtime side of `--speculative-ddtree-budget auto` on the CPU (stub SGLang):
the prefix of the widest tree is the tree of each smaller budget, the predicted gains are read from
it, the ladder keeps only the widths with a verify graph while CUDA graphs are on, and the statistics of a
finished round reach the chooser."""

from __future__ import annotations

import logging
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture(scope="module")
def ab(dropin):
    return dropin("auto_budget")


@pytest.fixture(scope="module")
def ts(dropin):
    return dropin("tree_stage")


def build(ts, logits, budget):
    head = types.SimpleNamespace(weight=torch.eye(logits.shape[-1]), tp_size=1)
    return ts.TreeStage(head, budget, None, budget + 1, graphs=False).from_logits(logits).tree


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_prefix_of_the_widest_tree_is_each_smaller_budget_s_tree(ab, ts, seed):
    """Best-first pop order: the first b + 1 nodes of the budget-64 tree, links past the cut dropped,
    are exactly the tree built at budget b (its own topk b), field by field."""
    logits = torch.randn(3, 7, 50, generator=torch.Generator().manual_seed(seed)) * 3
    widest = build(ts, logits, 64)
    for b in (1, 4, 7, 16, 32, 63, 64):
        got, want = ab.prefix_tree(widest, b + 1), build(ts, logits, b)
        for name, a, w in zip(want._fields, got, want):
            assert torch.equal(a, w), (b, name)


def test_the_gain_of_a_budget_is_the_sum_of_its_nodes_path_probabilities(ab, ts):
    logits = torch.randn(2, 7, 50, generator=torch.Generator().manual_seed(5)) * 3
    tree = build(ts, logits, 32)
    gains = ab.ladder_gains(tree.logprob, torch.tensor([3, 15, 31]))
    want = [float(tree.logprob[:, 1 : b + 1].exp().sum(dim=1).mean()) for b in (4, 16, 32)]
    assert gains.tolist() == pytest.approx(want, rel=1e-5)
    assert gains.tolist() == sorted(gains.tolist())


def test_with_cuda_graphs_auto_verifies_only_the_widths_with_a_graph(ab, dropin, caplog):
    """Graphs on: only budgets whose verify width has a target graph (widths 8 and 9, budgets 7 and
    8, not captured: trimmed with the capture's reason, in the one start-up line); graphs off: the
    ladder, less what --chunked-prefill-size excludes."""
    ladder = dropin("budget_ladder").build_ladder(8, None, 64, 2047)
    with caplog.at_level(logging.INFO):
        graphed = ab.AutoBudget.for_worker(ladder, 8, "cpu", graph_widths={17, 33, 65}, token_cap=8192,
                                           trimmed=[(8, "graph memory cap reached")])
    assert graphed.ladder.budgets == (16, 32, 64)
    assert "7 (no target verify graph at its width (graph memory cap reached;" in caplog.text
    assert "8 (no target verify graph at its width (not captured;" in caplog.text
    only_own = ab.AutoBudget.for_worker(ladder, 8, "cpu", graph_widths={65}, token_cap=None)
    assert only_own.ladder.budgets == (64,)
    eager = ab.AutoBudget.for_worker(ladder, 8, "cpu", graph_widths=None, token_cap=20)
    assert eager.ladder.budgets == (7, 8, 16)
    assert "32, 64 (its verify exceeds --chunked-prefill-size 20 tokens)" in eager.ladder.describe()
    assert ab.AutoBudget.for_worker(ladder, 8, "cpu", graph_widths=None, token_cap=-1).ladder.budgets == ladder.budgets


def test_a_finished_round_feeds_the_chooser(ab, dropin, ts):
    ladder = dropin("budget_ladder").Ladder((7, 16, 32))
    auto = ab.AutoBudget(ladder, 8, "cpu")
    logits = torch.randn(2, 7, 50, generator=torch.Generator().manual_seed(7)) * 3
    tree = build(ts, logits, 32)
    budget = auto.choose(2)
    assert budget == 7  # untimed: the narrowest first
    auto.finish(2, budget, tree, torch.tensor([2, 4]))
    auto.choose(2)  # collects the finished round first
    chooser = auto.chooser
    assert chooser.costs.samples(2, 7) == 1 and chooser.gains == pytest.approx(
        ab.ladder_gains(tree.logprob, torch.tensor([6, 15, 31])).tolist())
    assert chooser.calibration.observed[7] == pytest.approx(3.0)
    assert chooser.calibration.predicted[7] == pytest.approx(chooser.gains[0])


def test_the_backend_verifies_the_round_s_width_and_gets_its_own_back(ab):
    backend = types.SimpleNamespace(num_draft_tokens=65)
    with ab.verify_width(backend, 17):
        assert backend.num_draft_tokens == 17
    assert backend.num_draft_tokens == 65
    with pytest.raises(RuntimeError), ab.verify_width(backend, 9):
        raise RuntimeError("verify failed")
    assert backend.num_draft_tokens == 65
    other = object()  # a backend without that attribute (0.5.23 reads the verify input's width)
    with ab.verify_width(other, 9):
        pass


def test_a_one_budget_ladder_neither_times_nor_collects(ab, dropin, ts):
    """CUDA graphs on leave one budget: every round gets it, with no event, copy or statistic per round."""
    auto = ab.AutoBudget(dropin("budget_ladder").Ladder((64,)), 8, "cpu")
    auto.clock = None  # a round that timed itself would fail here
    logits = torch.randn(2, 7, 50, generator=torch.Generator().manual_seed(9)) * 3
    tree = build(ts, logits, 64)
    for _ in range(3):
        assert auto.choose(2) == 64
        auto.finish(2, 64, tree, torch.tensor([1, 2]))
    assert not auto._pending and auto.chooser.gains is None and auto._rounds == 3


def test_a_plain_round_reports_its_time_and_no_gain(ab, dropin, ts):
    """Budget 0 builds no tree: its round queues only its time; a tree round's gains lead with
    plain's 0 so the chooser's gains stay one per ladder budget."""
    bl = dropin("budget_ladder")
    auto = ab.AutoBudget(bl.Ladder((bl.PLAIN, 7, 16)), 8, "cpu")
    assert auto.width(bl.PLAIN) == 1 and auto.width(7) == 8
    assert auto.choose(2) == bl.PLAIN  # untimed: the narrowest first
    auto.finish(2, bl.PLAIN, None, torch.tensor([0, 0]))
    assert auto.choose(2) == bl.PLAIN and auto.chooser.costs.samples(2, bl.PLAIN) == 1
    assert auto.chooser.gains is None and not auto.chooser.calibration.predicted
    auto.finish(2, bl.PLAIN, None, torch.tensor([0, 0]))
    assert auto.choose(2) == bl.PLAIN
    auto.finish(2, bl.PLAIN, None, torch.tensor([0, 0]))
    assert auto.choose(2) == 7
    tree = build(ts, torch.randn(2, 7, 50, generator=torch.Generator().manual_seed(3)) * 3, 16)
    auto.finish(2, 7, tree, torch.tensor([1, 2]))
    auto.choose(2)
    assert auto.chooser.gains[0] == 0.0 and len(auto.chooser.gains) == 3
    assert list(auto.chooser.calibration.predicted) == [7]
    assert auto.chooser.calibration.predicted[7] == pytest.approx(auto.chooser.gains[1])  # budget 7's own gain


def test_with_cuda_graphs_the_plain_rung_needs_a_width_one_graph(ab, dropin):
    ladder = dropin("budget_ladder").build_ladder(8, None, 16, 2047, plain=True)
    assert ab.AutoBudget.for_worker(ladder, 8, "cpu", graph_widths={1, 8, 9, 17}, token_cap=None).ladder.budgets == (0, 7, 8, 16)
    without = ab.AutoBudget.for_worker(ladder, 8, "cpu", graph_widths={8, 9, 17}, token_cap=None).ladder
    assert without.budgets == (7, 8, 16) and "0 (no target verify graph at its width" in without.describe()
