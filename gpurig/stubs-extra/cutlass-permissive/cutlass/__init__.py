"""A stand-in for NVIDIA's CUTLASS DSL (`cutlass`, from nvidia-cutlass-dsl) on the GPU rig, for the MLA rows.

SGLang's DeepSeek-V3 model imports modules that build CuTe DSL kernels for Blackwell at module level;
the rig has no `cutlass` package, so the model does not import and SGLang falls back to its
Transformers implementation, which cannot serve an MLA target (the 2026-12-07 arch run). An H100 on the
triton backend never runs those kernels, so every name here is a placeholder: attribute access,
subscripts and subclassing give placeholders, a decorator gives its function back, and `cutlass.x.y`
imports as an empty placeholder module. What runs must not reach one: a placeholder called with
ordinary arguments raises, so a kernel path taken by mistake fails loudly instead of computing garbage.
Only the arch suite's MLA rows put this folder on PYTHONPATH, and only where `cutlass` is absent.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class Placeholder:
    """Any CUTLASS DSL object: a type, a constant, a decorator, a dialect."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> "Placeholder":
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Placeholder(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:  # @dsl_user_op, @cute.jit, @cute.kernel
            return args[0]
        if not args or all(isinstance(a, (bool, int, float, str)) for a in args):  # Int64(0x10), cute.jit()
            return Placeholder(f"{self._name}(...)")
        raise RuntimeError(f"{self._name}: the CUTLASS DSL is not installed on this machine (rig stand-in)")

    def __getitem__(self, item) -> "Placeholder":  # annotations: cutlass.Constexpr[int]
        return Placeholder(f"{self._name}[...]")

    def __mro_entries__(self, bases) -> tuple:  # class Foo(cute.Struct)
        return (object,)

    def __or__(self, other) -> "Placeholder":  # flags: A | B
        return self

    __ror__ = __or__

    def __repr__(self) -> str:
        return f"<cutlass stand-in {self._name}>"


def __getattr__(attr: str) -> Placeholder:
    if attr.startswith("__"):
        raise AttributeError(attr)
    return Placeholder(f"cutlass.{attr}")


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Placeholder:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Placeholder(f"{self.__name__}.{attr}")


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import cutlass.a.b` gives a module whose every name is a placeholder."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(__name__ + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec) -> types.ModuleType:
        module = _PlaceholderModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


if not any(isinstance(f, _Submodules) for f in sys.meta_path):
    sys.meta_path.insert(0, _Submodules())
