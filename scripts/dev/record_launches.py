"""Record every Triton launch a set of CPU (interpreted) tests makes: kernel, argument types, constexprs.

`scripts/dev/compile_kernels_sm90.py` compiles what this records, so each kernel is lowered with the argument
types and constexpr combinations its launcher really passes. Run with TRITON_INTERPRET=1 (the
default here on a machine without CUDA); pytest runs in this process, with the hook installed.

usage: python -m scripts.dev.record_launches OUT.json -- PYTEST_ARGS...
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.int64: "i64",
           torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "i1",
           torch.uint64: "u64", torch.uint32: "u32"}


def _arg(value, constexpr: bool):
    """("constexpr", value) or (type string, None) for one launch argument."""
    if constexpr or value is None:
        return "constexpr", value
    if isinstance(value, torch.Tensor):
        return "*" + _DTYPES[value.dtype], None
    if isinstance(value, TensorDescriptor):  # Triton's own spelling of a host-side descriptor's type
        return f"tensordesc<{_DTYPES[value.base.dtype]}{list(value.block_shape)}>", None
    if isinstance(value, bool):
        return "i1", None
    if isinstance(value, int):
        return ("i32" if -2**31 <= value < 2**31 else "i64"), None
    if isinstance(value, float):
        return "fp32", None
    raise TypeError(f"unrecorded argument type {type(value).__name__}")


def install(launches: list[dict]) -> None:
    original = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        import inspect

        params = inspect.signature(self.fn).parameters
        options = {k: kwargs[k] for k in ("num_warps", "num_stages") if k in kwargs}
        values = dict(zip(self.arg_names, args)) | {k: v for k, v in kwargs.items() if k in params}
        sig, consts = {}, {}
        for name, p in params.items():
            is_const = "constexpr" in str(p.annotation)
            kind, value = _arg(values.get(name, p.default), is_const)
            sig[name] = kind
            if kind == "constexpr":
                consts[name] = value
        launches.append({"module": self.fn.__module__, "kernel": self.fn.__name__, "signature": sig,
                         "constexprs": consts, "options": options})
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run


def main() -> int:
    if "--" not in sys.argv[1:]:
        raise SystemExit(__doc__)
    out = Path(sys.argv[1])
    launches: list[dict] = []
    install(launches)
    rc = pytest.main(sys.argv[sys.argv.index("--") + 1:])
    unique = {json.dumps(x, sort_keys=True): x for x in launches}
    out.write_text(json.dumps(list(unique.values()), indent=1))
    print(f"{len(launches)} launches, {len(unique)} distinct, written to {out}")
    return int(rc)


if __name__ == "__main__":
    sys.exit(main())
