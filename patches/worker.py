"""Entry point the patched `SpeculativeAlgorithm.create_worker` calls for DDTREE.

DDTree subclasses the installed SGLang's DFlash worker, so the DDTree worker differs per DFlash
worker family. One adapter per family, chosen by what the installed SGLang ships:
- spec-v2 (`dflash_worker_v2.DFlashWorkerV2`, SGLang 0.5.14+; proven on 0.5.15): `worker_v2`, once
  `contract.problems` finds that it fits the installed release's worker contract.
- v1 (`dflash_worker.DFlashWorker`, SGLang 0.5.11-0.5.13): no adapter yet, refused clearly.
"""

from __future__ import annotations

import importlib.util
from typing import Any


class UnsupportedSGLangError(RuntimeError):
    """The installed SGLang has no DDTree adapter for its DFlash worker."""


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def worker_class(server_args: Any) -> type:
    """The DDTree worker class for the installed SGLang (`create_worker` returns a class)."""
    if _has_module("sglang.srt.speculative.dflash_worker_v2"):
        from sglang.srt.speculative.ddtree import contract

        # Before importing the adapter: a release whose worker contract drifted is refused here,
        # at start, with one message, instead of failing inside a batch.
        drift = contract.problems(contract.V2, contract.site_root())
        if drift:
            raise UnsupportedSGLangError(contract.refusal(drift, _sglang_version()))
        from sglang.srt.speculative.ddtree.worker_v2 import DDTreeWorkerV2

        return DDTreeWorkerV2
    if _has_module("sglang.srt.speculative.dflash_worker"):
        raise UnsupportedSGLangError(
            f"DDTREE does not support SGLang {_sglang_version()} yet: its DFlash worker is the v1 "
            "DFlashWorker, and DDTREE ships an adapter only for DFlashWorkerV2 (SGLang 0.5.14+)."
        )
    raise UnsupportedSGLangError(
        f"DDTREE needs SGLang's DFlash worker, and SGLang {_sglang_version()} has none."
    )


def _sglang_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return "unknown version"
