"""The modules `apply` adds to SGLang: `patches/` and `kernels/`, under `srt/speculative/ddtree/`."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from ddtree_patch.model import AddedFile

DROPIN_ROOT = "srt/speculative/ddtree"
SOURCES = {"patches": DROPIN_ROOT, "kernels": f"{DROPIN_ROOT}/kernels"}


def _source_dir(name: str) -> Path:
    """An installed wheel carries them as ddtree_patch/<name>; a checkout (or editable install)
    has them beside the package. The wheel layout is tried first: in site-packages, a folder
    beside the package is some other distribution's."""
    here = Path(__file__).resolve().parent
    installed = here / name
    return installed if installed.is_dir() else here.parent / name


def dropin_files() -> list[AddedFile]:
    files: list[AddedFile] = []
    for name, destination in SOURCES.items():
        for source in sorted(_source_dir(name).glob("*.py")):
            files.append(AddedFile(f"{destination}/{source.name}", source.read_bytes()))
    return files


CAPABILITIES_MODULE = "capabilities.py"  # in patches/: the runtime's own declaration of what it implements


def capabilities_path() -> Path:
    return _source_dir("patches") / CAPABILITIES_MODULE


@cache
def capabilities() -> ModuleType:
    """The capability table the runtime ships, loaded from the very file `apply` drops in."""
    spec = importlib.util.spec_from_file_location("ddtree_patch._runtime_capabilities", capabilities_path())
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module
