"""scripts/bench/calibrated_tree.py: the calibrated-drafter model of DDTREE's acceptance."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from scripts.bench import calibrated_tree as ct  # noqa: E402


def test_the_fitted_first_choice_reproduces_dflash_s_acceptance():
    q = ct.fit_first_choice(7.79, 15)
    assert ct.chain_tau(q, 15) == pytest.approx(7.79, abs=1e-9)
    with pytest.raises(ValueError):
        ct.fit_first_choice(17.0, 15)


def test_a_small_tree_by_hand():
    """Depth 2, q 0.6, all the rest on rank 2: paths 0.6, 0.4 (depth 1), 0.36, 0.24 (depth 2); the
    best 3-node tree holds 0.6, 0.4, 0.36 -> tau 2.36; 2 nodes: 0.6, 0.4 -> 2.0 (not the chain's 1.96)."""
    assert ct.tree_tau(0.6, 0.0, 3, 2, 3) == pytest.approx(2.36, abs=1e-5)
    assert ct.tree_tau(0.6, 0.0, 2, 2, 3) == pytest.approx(2.0, abs=1e-5)


def test_wider_trees_accept_more_and_a_flat_tail_less():
    q = ct.fit_first_choice(7.79, 15)
    taus = [ct.tree_tau(q, 0.5, b, 15, 64) for b in (15, 32, 64, 128)]
    assert taus[0] == pytest.approx(7.79, abs=1e-4)  # the best 15-node tree of a strong drafter is its chain
    assert taus == sorted(taus) and taus[-1] > taus[0] + 2
    assert ct.tree_tau(q, 0.3, 64, 15, 64) > ct.tree_tau(q, 0.9, 64, 15, 64)


def test_the_cli_prints_the_table_and_json(capsys):
    assert ct.main(["--budgets", "15", "32", "--tails", "0.5", "--json"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"][0]["tau"]["15"] == pytest.approx(7.79, abs=1e-3) and doc["paper"]["ddtree_tau"] == 10.73
    with pytest.raises(SystemExit):
        ct.main(["--dflash-tau", "40"])
