"""The GPU matrix at --tp-size N (issue 15's 2-GPU run), --page-size N or --attention-backend (issue 14): every engine, plain
references included, gets that setting, so DDTREE is compared with plain decoding on the same sharding
or page layout."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import gpu_engine_run  # noqa: E402
import gpu_matrix  # noqa: E402


@pytest.mark.parametrize("setting, value", [("tp_size", 2), ("page_size", 16), ("attention_backend", "flashinfer")])
def test_setting_reaches_every_engine_and_keeps_its_ports(setting: str, value: int) -> None:
    one, other = gpu_matrix.configs(), gpu_matrix.configs(**{setting: value})
    assert [c["name"] for c in one] == [c["name"] for c in other]
    assert all(setting not in c["engine"] for c in one)
    for a, b in zip(one, other):
        assert b["engine"] == {**a["engine"], setting: value}
        if not b.get("cuda_graph"):  # the CUDA-graph settings are read from the installed SGLang
            assert gpu_engine_run.engine_kwargs(b)[setting] == value
    assert {c["algo"] for c in other} == {"NONE", "DFLASH", "DDTREE"}
