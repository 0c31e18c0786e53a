"""Does DDTree's worker fit the patched SGLang's worker contract? A warning for `apply`.

The server checks this when it creates the DDTree worker and refuses DDTREE where the adapter does
not fit; running the same check (the `contract` drop-in, read from the patched tree, importing no
SGLang) right after `apply` names such a release at once, instead of first at server start.
"""

from __future__ import annotations

import importlib.util
import sys

from ddtree_patch.dropins import DROPIN_ROOT
from ddtree_patch.model import Install

_MODULE = "_ddtree_patch_worker_contract"


def contract_warnings(install: Install) -> tuple[str, ...]:
    path = install.package_dir / DROPIN_ROOT / "contract.py"
    if not path.is_file():
        return ()
    spec = importlib.util.spec_from_file_location(_MODULE, path)
    assert spec is not None and spec.loader is not None
    contract = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE] = contract  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(contract)
        root = install.package_dir.parent
        adapter = contract.adapter_for(root)
        if adapter is None:
            return (f"DDTREE has no worker adapter for the DFlash worker of SGLang {install.version}: "
                    "the server will refuse DDTREE at start",)
        found = contract.problems(adapter, root)
    except (OSError, SyntaxError, ValueError) as error:  # the patch is written: its check cannot undo that
        return (f"the worker-contract check could not read the patched SGLang ({type(error).__name__}: {error}); "
                "the server runs it again when it starts DDTREE",)
    finally:
        del sys.modules[_MODULE]
    return (contract.refusal(found, install.version),) if found else ()
