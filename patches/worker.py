"""Entry point the patched `SpeculativeAlgorithm.create_worker` calls for DDTREE.

DDTree subclasses the installed SGLang's DFlash classes, so the DDTree worker differs per DFlash
worker family. One adapter per family (`adapters.ADAPTERS`), chosen by what the installed SGLang
ships, and used only once `contract.problems` finds that it fits the installed release:
- spec-v2 (`dflash_worker_v2.DFlashWorkerV2`, SGLang 0.5.14+): `worker_v2.DDTreeWorkerV2`.
- v1 (`dflash_worker.DFlashWorker`, SGLang 0.5.11-0.5.13): `worker_v1.DDTreeWorkerV1`.
"""

from __future__ import annotations

import importlib
from typing import Any


class UnsupportedSGLangError(RuntimeError):
    """The installed SGLang has no DDTree adapter for its DFlash worker, or the adapter does not fit."""


def worker_class(server_args: Any) -> type:
    """The DDTree worker class for the installed SGLang (`create_worker` returns a class)."""
    from . import contract

    root = contract.site_root()
    adapter = contract.adapter_for(root)
    if adapter is None:
        raise UnsupportedSGLangError(
            f"DDTREE needs SGLang's DFlash worker, and SGLang {_sglang_version()} has none."
        )
    # Before importing the adapter: a release whose worker contract drifted is refused here,
    # at start, with one message, instead of failing inside a batch.
    drift = contract.problems(adapter, root)
    if drift:
        raise UnsupportedSGLangError(contract.refusal(drift, _sglang_version()))
    return getattr(importlib.import_module(adapter.module), adapter.name)


def _sglang_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return "unknown version"
