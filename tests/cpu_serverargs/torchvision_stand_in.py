"""A permissive stand-in for `torchvision`, put on `sys.meta_path` before SGLang is imported.

PyPI's torchvision needs a CUDA torch and fails to import beside the CPU torch of these machines,
yet SGLang imports it at module level in files that server-argument validation pulls in. Argument
validation never calls torchvision, so every `torchvision[.x.y]` module here is an empty package
whose attributes are classes that accept any call, attribute access or subclassing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

ROOT = "torchvision"


class _AnyMeta(type):
    """Class-level attribute access yields another stand-in class (e.g. `InterpolationMode.BICUBIC`)."""

    def __getattr__(cls, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in_class(f"{cls.__name__}.{name}")


class _Any(metaclass=_AnyMeta):
    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __call__(self, *args: object, **kwargs: object) -> "_Any":
        return self

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: object) -> object:
        """A stand-in used as a field type of a pydantic model (xgrammar's `StructuralTag` in
        0.5.18's request protocol) validates anything."""
        from pydantic_core import core_schema

        return core_schema.any_schema()

    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in_class(name)


def _stand_in_class(name: str) -> type:
    return _AnyMeta(name, (_Any,), {})


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in_class(name)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: tuple[str, ...] = (ROOT,)):
        self.roots = roots

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in self.roots:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+stand.in"
        return module

    def exec_module(self, module):
        pass


def install(extra_roots: tuple[str, ...] = ()) -> None:
    """Put the finder first on `sys.meta_path` (idempotent). `extra_roots`: other absent modules
    that code under test imports at module level but never calls, stood in the same way (last, so
    an installed one wins)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    if extra_roots:
        sys.meta_path.append(_Finder(tuple(extra_roots)))
