"""Does DDTree's worker fit the patched SGLang's worker contract? A warning for `apply`.

The server checks this when it creates the DDTree worker and refuses DDTREE where the adapter does
not fit; running the same check (the `contract` drop-in, read from the patched tree, importing no
SGLang) right after `apply` names such a release at once, instead of first at server start.
"""

from __future__ import annotations

import importlib
import sys
import types

from ddtree_patch.dropins import DROPIN_ROOT
from ddtree_patch.model import Install

_PACKAGE = "_ddtree_patch_worker_contract"


def contract_warnings(install: Install) -> tuple[str, ...]:
    folder = install.package_dir / DROPIN_ROOT
    if not (folder / "contract.py").is_file():
        return ()
    # The drop-in folder as a package of its own, its __init__ not run: `contract` and the adapter
    # table it imports (`.adapters`) load from there, and nothing else of the runtime does.
    package = types.ModuleType(_PACKAGE)
    package.__path__ = [str(folder)]
    sys.modules[_PACKAGE] = package  # where the import (and dataclasses, while a class is built) look it up
    try:
        contract = importlib.import_module(f"{_PACKAGE}.contract")
        root = install.package_dir.parent
        adapter = contract.adapter_for(root)
        if adapter is None:
            return (f"DDTREE has no worker adapter for the DFlash worker of SGLang {install.version}: "
                    "the server will refuse DDTREE at start",)
        found = contract.problems(adapter, root)
    except (ImportError, OSError, SyntaxError, ValueError) as error:
        # The patch is written: its check cannot undo that.
        return (f"the worker-contract check could not read the patched SGLang ({type(error).__name__}: {error}); "
                "the server runs it again when it starts DDTREE",)
    finally:
        for name in [n for n in sys.modules if n == _PACKAGE or n.startswith(f"{_PACKAGE}.")]:
            del sys.modules[name]
    return (contract.refusal(found, install.version),) if found else ()
