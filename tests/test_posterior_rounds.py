"""`scripts/investigations/posterior_rounds.py`: the reference's draws per row under the posterior's knobs."""

from __future__ import annotations


import pytest

torch = pytest.importorskip("torch")

from scripts.investigations import posterior_rounds  # noqa: E402

from kernels import posterior  # noqa: E402


def test_a_finer_floor_unit_saves_draws_on_flat_top_k_rows() -> None:
    """Flat rows, top-k 2000 of 8192: no floor at units of 256 (32 units < k), so most first draws
    are rejected; units of 2 (4096 >= k) start above a floor and mostly keep the first draw."""
    logits = torch.randn(4, 4, 8192, generator=torch.Generator().manual_seed(0)) * 0.3
    uniform = posterior.uniform_torch
    coarse, coarse_rounds = posterior_rounds.draws_per_row(logits, 2000, 1.0, 256, 8, 8)
    fine, _ = posterior_rounds.draws_per_row(logits, 2000, 1.0, 2, 1, 8)
    assert coarse > 1.5 and coarse_rounds >= 2
    assert 1.0 <= fine < coarse
    assert posterior.uniform_torch is uniform  # the counting wrapper is gone


def test_unfiltered_rows_draw_once() -> None:
    logits = torch.randn(2, 3, 1000, generator=torch.Generator().manual_seed(1))
    assert posterior_rounds.draws_per_row(logits, -1, 1.0, 256, 8, 8) == (1.0, 1)
