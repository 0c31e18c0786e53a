"""bench_kernels' judgement of draws that differ from the torch reference: only a draw whose two
tokens have (almost) no mass between them is a float32 boundary case; greedy rows never are."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import bench_kernels  # noqa: E402


def test_boundary_draws_tell_rounding_from_a_wrong_token():
    x = torch.zeros(2, 1, 8)
    x[0, 0, 3] = -30.0  # token 3 holds ~1e-13 of the mass: 2 vs 4 is a boundary case
    temp = torch.tensor([1.0, 0.0])
    ref = torch.tensor([[2], [5]])
    assert bench_kernels.boundary_draws(x, temp, ref, ref.clone()) == (0, 0)
    assert bench_kernels.boundary_draws(x, temp, ref, torch.tensor([[4], [5]])) == (1, 1)
    assert bench_kernels.boundary_draws(x, temp, ref, torch.tensor([[3], [5]])) == (1, 1)  # adjacent
    assert bench_kernels.boundary_draws(x, temp, ref, torch.tensor([[6], [5]])) == (1, 0)  # 3 tokens between
    assert bench_kernels.boundary_draws(x, temp, ref, torch.tensor([[2], [6]])) == (1, 0)  # greedy row
