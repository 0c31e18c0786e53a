"""`budget_ladder`: the `auto` ladder and the per-round chooser, as plain Python (no SGLang, no torch)."""

from __future__ import annotations

import pytest

from patches.budget_ladder import (
    MAX_BUDGET_ENV,
    PLAIN,
    PLAIN_ENV,
    Ladder,
    WidthChooser,
    batch_bucket,
    build_ladder,
    is_auto,
    max_budget_setting,
    plain_setting,
    budget_width,
)


def width_of(block: int):
    return lambda b: max(b + 1, block)


def test_the_ladder_starts_at_the_block_and_stops_at_the_cap():
    """Below block - 1 a budget verifies the block's width anyway (trimmed, with that reason); above
    the cap (DDTREE_AUTO_MAX_BUDGET, default 64) trimmed with the cap named."""
    ladder = build_ladder(16, None, 64, 2047)
    assert ladder.budgets == (15, 16, 32, 64)
    reasons = dict(ladder.trimmed)
    assert set(reasons) == {4, 8, 128, 256}
    assert "draft block's width 16 like budget 15" in reasons[4]
    assert MAX_BUDGET_ENV in reasons[128]
    assert build_ladder(8, None, 256, 2047).budgets == (7, 8, 16, 32, 64, 128, 256)
    assert build_ladder(8, None, 256, 100).budgets == (7, 8, 16, 32, 64)  # the tree build's limit
    line = ladder.describe()
    assert line.startswith("DDTREE auto budget ladder: 15, 16, 32, 64; trimmed: 4, 8 (") and "; 128, 256 (" in line


def test_a_topk_cap_trims_budgets_the_draft_cannot_fill():
    """topk 2 over 2 draft positions holds 2 + 4 = 6 prefixes: budget 8 cannot be filled."""
    ladder = build_ladder(3, 2, 64, 2047)
    assert ladder.budgets == (2, 4)
    assert "more nodes than topk 2 gives over 2 draft positions" in dict(ladder.trimmed)[8]


def test_auto_spelling_and_the_cap_setting():
    assert is_auto("auto") and is_auto(" AUTO ") and not is_auto(32) and not is_auto("32") and not is_auto(None)
    assert max_budget_setting({}) == 64
    assert max_budget_setting({MAX_BUDGET_ENV: "128"}) == 128
    for bad in ("0", "-4", "lots"):
        with pytest.raises(ValueError, match=MAX_BUDGET_ENV):
            max_budget_setting({MAX_BUDGET_ENV: bad})


def test_the_plain_rung_leads_the_ladder_and_verifies_one_token():
    ladder = build_ladder(16, None, 64, 2047, plain=True)
    assert ladder.budgets == (PLAIN, 15, 16, 32, 64)
    assert ladder.describe().startswith("DDTREE auto budget ladder: 0 (plain decoding), 15, 16, 32, 64; trimmed:")
    assert [budget_width(b, 16) for b in ladder.budgets] == [1, 16, 17, 33, 65]
    assert not plain_setting({}) and plain_setting({PLAIN_ENV: "1"}) and not plain_setting({PLAIN_ENV: "0"})
    with pytest.raises(ValueError, match=PLAIN_ENV):
        plain_setting({PLAIN_ENV: "sometimes"})


def test_batch_buckets_are_powers_of_two():
    assert [batch_bucket(bs) for bs in (1, 2, 3, 4, 5, 8, 9, 33)] == [1, 2, 4, 4, 8, 8, 16, 64]


LADDER = Ladder((7, 16, 32, 64))
GAINS = [3.0, 4.0, 4.6, 5.0]  # S_b per ladder budget: wider trees accept more, with diminishing returns


def cost(bs: int, budget: int) -> float:
    """Seconds per round: wide trees are nearly free at batch 1 and dear at batch 64."""
    return 1.0 + bs * (budget + 1) / 1024.0


def run(chooser: WidthChooser, bs: int, rounds: int, accepted_ratio: float = 1.0) -> list[int]:
    """`rounds` rounds at batch `bs`, each fed back at once (the worker feeds them a round or two late)."""
    chosen = []
    for _ in range(rounds):
        b = chooser.choose(bs)
        chooser.observe_gains(GAINS)
        predicted = GAINS[LADDER.budgets.index(b)]
        chooser.observe_round(bs, b, predicted, accepted_ratio * predicted, cost(bs, b))
        chosen.append(b)
    return chosen


def best_by_table(bs: int, ratio: float = 1.0) -> int:
    return max(LADDER.budgets, key=lambda b: (1 + ratio * GAINS[LADDER.budgets.index(b)]) / cost(bs, b))


def test_the_chosen_budget_follows_the_batch_size_through_the_cost_table():
    """Once every budget is timed, each batch bucket settles on the budget with the most expected
    tokens per second: the widest at batch 1, 32 at batch 4, the narrowest at batch 64 (the table's own
    optima)."""
    assert (best_by_table(1), best_by_table(4), best_by_table(64)) == (64, 32, 7)  # the table is as described
    chooser = WidthChooser(LADDER, width_of(8), explore_every=0)
    early = run(chooser, 1, 12)
    assert early == [7, 7, 7, 16, 16, 16, 32, 32, 32, 64, 64, 64]  # each budget timed thrice first, narrowest first
    assert set(run(chooser, 1, 20)) == {64}
    run(chooser, 64, 12)
    assert set(run(chooser, 64, 20)) == {7}
    run(chooser, 4, 12)
    assert set(run(chooser, 4, 20)) == {32}
    assert set(run(chooser, 1, 5)) == {64}  # the buckets keep their own costs


def test_an_over_confident_drafter_narrows_the_choice():
    """Observed acceptance a tenth of the tree's prediction: the calibrated expectation picks a
    narrower budget at batch 4 than the uncalibrated one would."""
    assert (best_by_table(4), best_by_table(4, 0.1)) == (32, 16)
    honest, overconfident = (WidthChooser(LADDER, width_of(8), explore_every=0) for _ in range(2))
    assert set(run(honest, 4, 30)[12:]) == {32}
    assert set(run(overconfident, 4, 30, accepted_ratio=0.1)[12:]) == {16}
    assert overconfident.calibration.ratio(64) == pytest.approx(0.1)


def test_a_settled_bucket_retries_a_rung_one_or_two_away_now_and_then():
    chooser = WidthChooser(LADDER, width_of(8), explore_every=4)
    chosen = run(chooser, 1, 12 + 16)[12:]
    assert chosen.count(64) == 12 and chosen.count(32) == 2 and chosen.count(16) == 2  # every 4th round, in turn


def test_one_slow_first_round_does_not_decide():
    """The widest budget's first timed round is ten times slow (a warm-up): the median of three
    timings forgets it, and the bucket still settles on the widest."""
    chooser = WidthChooser(LADDER, width_of(8), explore_every=0)
    seen = set()

    def slow_once(bs, b):
        first = b not in seen
        seen.add(b)
        return cost(bs, b) * (10 if first and b == 64 else 1)

    for _ in range(30):
        b = chooser.choose(1)
        chooser.observe_gains(GAINS)
        predicted = GAINS[LADDER.budgets.index(b)]
        chooser.observe_round(1, b, predicted, predicted, slow_once(1, b))
    assert chooser.choose(1) == 64


def test_a_duplicate_rung_cannot_hide_the_next_one():
    """Ladder 15, 16, 32 with 32 once mis-timed as slow: exploring two rungs away re-times 32, and
    the bucket moves to it."""
    ladder = Ladder((15, 16, 32))
    gains = [10.0, 10.0, 11.0]
    chooser = WidthChooser(ladder, width_of(16), min_samples=1, explore_every=4)
    chosen = []
    for i in range(40):
        b = chooser.choose(1)
        chooser.observe_gains(gains)
        predicted = gains[ladder.budgets.index(b)]
        chooser.observe_round(1, b, predicted, predicted, 5.0 if (b == 32 and i < 3) else 1.0)
        chosen.append(b)
    assert chosen[-8:].count(32) >= 6


def test_the_token_cap_keeps_wide_verifies_out_of_large_batches():
    """bs x width above the cap (--chunked-prefill-size) is never chosen; the narrowest always may be."""
    chooser = WidthChooser(LADDER, width_of(8), token_cap=1024)
    assert chooser.allowed(1) == [7, 16, 32, 64]
    assert chooser.allowed(31) == [7, 16, 32] and chooser.allowed(32) == [7, 16] and chooser.allowed(64) == [7]
    assert chooser.allowed(1000) == [7]
    assert set(run(chooser, 64, 10)) == {7}


def test_a_budget_never_run_borrows_the_overall_calibration():
    chooser = WidthChooser(LADDER, width_of(8))
    assert chooser.calibration.ratio(32) == 1.0
    chooser.observe_round(1, 7, 2.0, 1.0, None)
    assert chooser.calibration.ratio(32) == pytest.approx(0.5) and chooser.costs.samples(1, 7) == 0


def test_plain_wins_where_every_tree_costs_more_than_it_gains():
    """A plain round emits one token and calibrates nothing; at a batch where a tree round costs more
    than (1 + its gain) plain rounds, plain is chosen, and where trees are cheap, a tree is."""
    ladder = Ladder((PLAIN, 7, 16))
    chooser = WidthChooser(ladder, lambda b: budget_width(b, 8), explore_every=0)
    chooser.observe_gains([0.0, 1.0, 1.2])
    cost = {(1, PLAIN): 1.0, (1, 7): 1.2, (1, 16): 1.5, (64, PLAIN): 1.0, (64, 7): 2.5, (64, 16): 3.0}
    for bs in (1, 64):
        for budget in ladder.budgets:
            for _ in range(3):
                chooser.observe_round(bs, budget, 1.0 if budget else 0.0, 1.0 if budget else 0.0, cost[bs, budget])
    assert PLAIN not in chooser.calibration.predicted
    assert chooser.expected_tokens(PLAIN) == 1.0
    assert chooser.choose(1) == 7 and chooser.choose(64) == PLAIN
