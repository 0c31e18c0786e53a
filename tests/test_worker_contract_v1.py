"""DDTREE's v1 adapter against the v1 DFlash worker of each release that ships it (0.5.11-0.5.13).

Static (ast): `apply` drops the adapter into a real release, `check_v1` compares the overrides with
the release's base methods and every call the release makes to them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from ddtree_patch.worker_contract_v1 import ADAPTER, Params, check_v1, override_drift

V1_RELEASES = ("0.5.11", "0.5.12", "0.5.13")


def _params(source: str) -> Params:
    return Params.of(ast.parse(source).body[0])


@pytest.mark.parametrize(
    "base, override, problem",
    [
        ("def f(self, a, *, b=1): pass", "def f(self, a, *, b=1): pass", None),
        ("def f(self, a, *, b=1): pass", "def f(self, a, *args, **kwargs): pass", None),
        ("def f(self, a, *, b=1): pass", "def f(self, a): pass", "does not accept keyword 'b'"),
        ("def f(self, a, *, b=1): pass", "def f(self, a, *, b): pass", "b has a default in the base"),
        ("def f(self, a, c=2): pass", "def f(self, a): pass", "positional parameter 2 is 'c'"),
        ("def f(self, a): pass", "def f(self, x): pass", "positional parameter 1 is 'a'"),
        ("def f(self, a): pass", "def f(self, a, *, extra): pass", "requires extra"),
        ("def f(self, **kw): pass", "def f(self): pass", "does not accept the base's **kwargs"),
    ],
)
def test_override_drift(base, override, problem):
    found = override_drift(_params(base), _params(override))
    if problem is None:
        assert found == []
    else:
        assert any(problem in p for p in found), found


def test_a_call_binds_or_says_why():
    params = _params("def f(self, a, b=1, *, c): pass")
    assert params.accepts(1, {"c"}) == []
    assert params.accepts(3, {"c"}) == ["takes 2 positional arguments, the call passes 3"]
    assert params.accepts(1, {"c", "d"}) == ["does not accept d"]
    assert params.accepts(0, {"c"}) == ["requires a, which the call does not pass"]


def _applied(site: Path) -> Path:
    subprocess.run([sys.executable, "-m", "ddtree_patch", "apply", "--target", str(site)], check=True,
                   capture_output=True, text=True)
    return site


@pytest.mark.slow
@pytest.mark.parametrize("version", V1_RELEASES)
def test_the_v1_adapter_fits_the_release(fresh_release, version):
    assert check_v1(_applied(fresh_release(version))) == []


@pytest.mark.slow
def test_drift_is_reported(fresh_release):
    site = _applied(fresh_release("0.5.12"))
    adapter = site / ADAPTER
    text = adapter.read_text()
    text = text.replace("self, *, hidden_states: torch.Tensor, lm_head: Any, chunk_size: int = 256",
                        "self, *, hidden_states: torch.Tensor, lm_head: Any")
    text = text.replace("def verify(\n        self, *, batch: ScheduleBatch, logits_output: Any, page_size: int\n    )",
                        "def verify(self, *, batch: ScheduleBatch, logits_output: Any)")
    text = text.replace("self.use_compact_draft_cache", "self.use_compact_cache")
    adapter.write_text(text)
    drift = "\n".join(check_v1(site))
    assert "_greedy_sample_from_vocab_parallel_head: does not accept keyword 'chunk_size'" in drift
    assert "verify vs DFlashVerifyInput.verify: does not accept keyword 'page_size'" in drift
    assert "dflash_worker.py" in drift and "calls verify: the override does not accept page_size" in drift
    assert "reads self.use_compact_cache, which DFlashWorker does not define" in drift
