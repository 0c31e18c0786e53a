"""The modules `apply` adds to SGLang: `patches/` and `kernels/`, under `srt/speculative/ddtree/`."""

from __future__ import annotations

from pathlib import Path

from ddtree_patch.model import AddedFile

DROPIN_ROOT = "srt/speculative/ddtree"
SOURCES = {"patches": DROPIN_ROOT, "kernels": f"{DROPIN_ROOT}/kernels"}


def _source_dir(name: str) -> Path:
    here = Path(__file__).resolve().parent
    checkout = here.parent / name  # a source checkout or an editable install
    return checkout if checkout.is_dir() else here / name  # an installed wheel


def dropin_files() -> list[AddedFile]:
    files: list[AddedFile] = []
    for name, destination in SOURCES.items():
        for source in sorted(_source_dir(name).glob("*.py")):
            files.append(AddedFile(f"{destination}/{source.name}", source.read_bytes()))
    return files
