"""Permissive stand-in modules for GPU-only packages that SGLang imports at module level.

Extends tests/cpu_serverargs/torchvision_stand_in.py (torchvision) to `sgl_kernel`, SGLang's CUDA
kernel package, which the scheduler's import chain pulls in (memory_pool_host) but a CPU round
never calls. Install before importing SGLang; tests/cpu_serverargs must be on PYTHONPATH.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

import torchvision_stand_in

ROOTS = ("sgl_kernel",)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if not any(fullname == root or fullname.startswith(root + ".") for root in ROOTS):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = torchvision_stand_in._StandInModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+stand.in"
        return module

    def exec_module(self, module):
        pass


def install() -> None:
    """torchvision's and sgl_kernel's stand-ins first on `sys.meta_path` (idempotent)."""
    torchvision_stand_in.install()
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
