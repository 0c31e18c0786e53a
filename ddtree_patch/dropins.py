"""The modules `apply` adds to SGLang: `patches/` and `kernels/`, under `srt/speculative/ddtree/`."""

from __future__ import annotations

from pathlib import Path

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
