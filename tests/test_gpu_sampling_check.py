"""The GPU sampling check's CPU-side parts: which settings run where, and its homogeneity test
(a sample against itself passes, a 3 %-biased one fails) on the off-chain target's shape."""

from __future__ import annotations

import random

import pytest

from scripts.gpu import sampling_check as check


def test_offchain_runs_its_settings_at_t3():
    got = check.select_settings(None, offchain=True)
    assert list(got) == ["T=3", "top_p=0.9", "repetition=1.3", "frequency=0.5", "presence=0.5", "logit_bias"]
    assert all(v["temperature"] == 3.0 for v in got.values())
    assert "top_p=0.9" in check.select_settings(None, offchain=False)
    assert check.SETTINGS["T=1"]["temperature"] == 1.0  # the table itself is untouched


def test_numerics_sensitive_settings_run_only_when_named():
    assert "top_k=20" not in check.select_settings(None, offchain=False)
    assert "top_k=50,top_p=0.8,min_p=0.05" not in check.select_settings(None, offchain=False)
    assert "top_k=2000,top_p=0.8,min_p=0.05" in check.select_settings(None, offchain=False)
    assert list(check.select_settings(["top_k=20", "T=1"], offchain=False)) == ["T=1", "top_k=20"]


def test_offchain_refuses_a_selection_with_nothing_left():
    with pytest.raises(SystemExit, match="off-chain runs only"):
        check.select_settings(["min_p=0.2"], offchain=True)


def _offchain_draws(n: int, rng: random.Random, moved: float = 0.0) -> list[int]:
    """Draws from the off-chain target at T=3 (token 7 at 78.7 %, 511 others tied), with `moved`
    of the mass put on token 100 (what the biased DDTREE run does to its first child)."""
    out = []
    for _ in range(n):
        if rng.random() < moved:
            out.append(100)
        elif rng.random() < 0.787:
            out.append(7)
        else:
            out.append(rng.choice([t for t in range(512) if t != 7]))
    return out


def test_homogeneity_passes_the_same_law_and_fails_a_3_percent_bias():
    rng = random.Random(0)
    threshold = 1e-3 / 20
    plain = _offchain_draws(20000, rng)
    p_same, _ = check.homogeneity(plain, _offchain_draws(20000, rng), threshold)
    p_biased, _ = check.homogeneity(plain, _offchain_draws(20000, rng, moved=0.03), threshold)
    assert p_same > threshold and p_biased < threshold


def test_power_is_stated_for_a_3_percent_shift_and_that_shift_is_found():
    """The stated power (TV 0.03 moved towards the likelier coarse bins) is high on the off-chain shape
    at 20k draws, and such a shift is in fact detected: a sampler that emits the rule token 3 % more."""
    rng = random.Random(1)
    threshold = 1e-3 / 20
    plain = _offchain_draws(20000, rng)
    shifted = [7 if rng.random() < 0.03 / 0.213 and t != 7 else t for t in _offchain_draws(20000, rng)]
    p, power = check.homogeneity(plain, shifted, threshold)
    assert power > 0.8
    assert p < threshold


def test_tv_power_grows_with_the_sample():
    p = [0.787] + [0.213 / 4] * 4
    assert check.tv_power(p, 2000, 2000, 5e-5) < check.tv_power(p, 20000, 20000, 5e-5) < 1.0
