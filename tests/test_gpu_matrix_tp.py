"""The GPU matrix at --tp-size N (issue 15's 2-GPU run) or --page-size N (issue 14): every engine, plain
references included, gets that setting, so DDTREE is compared with plain decoding on the same sharding
or page layout."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import gpu_engine_run  # noqa: E402
import gpu_matrix  # noqa: E402


def test_tp_size_reaches_every_engine_and_keeps_its_ports() -> None:
    one, two = gpu_matrix.configs(), gpu_matrix.configs(tp_size=2)
    assert [c["name"] for c in one] == [c["name"] for c in two]
    assert all("tp_size" not in c["engine"] for c in one)
    for a, b in zip(one, two):
        assert b["engine"] == {**a["engine"], "tp_size": 2}
        if not b.get("cuda_graph"):  # the CUDA-graph settings are read from the installed SGLang
            assert gpu_engine_run.engine_kwargs(b)["tp_size"] == 2
    assert {c["algo"] for c in two} == {"NONE", "DFLASH", "DDTREE"}


def test_page_size_reaches_every_engine() -> None:
    one, paged = gpu_matrix.configs(), gpu_matrix.configs(page_size=16)
    assert [c["name"] for c in one] == [c["name"] for c in paged]
    assert all("page_size" not in c["engine"] for c in one)
    for a, b in zip(one, paged):
        assert b["engine"] == {**a["engine"], "page_size": 16}
        if not b.get("cuda_graph"):
            assert gpu_engine_run.engine_kwargs(b)["page_size"] == 16
