"""Ask an installed SGLang how it resolves speculative-decoding server arguments; print JSON.

Runs INSIDE a CPU venv built by `venv_builder` (never in the test process), with the SGLang
release under test on PYTHONPATH. Each case is a list of extra CLI arguments, parsed by SGLang's
own `prepare_server_args` and resolved the way a launch resolves them (`resolve_once()` where the
release has it, `__post_init__` before), with `--device cuda` so DFlash's platform gate passes on
a CPU machine. A case reports the resolved speculative settings, or the error SGLang raised.
SGLang is imported once; each case then runs in a forked child, so no case sees global state
(environment, registries, caches) that an earlier case's resolution left behind.

    python probe.py --target fixtures/models/tiny-qwen3 --draft fixtures/models/tiny-dflash-draft \
        --cases '{"dflash": ["--speculative-algorithm", "DFLASH"]}'
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import io
import json
import os
import sys
import traceback
from typing import Any, Callable

import torchvision_stand_in

# Settings that say how speculative decoding will run; `speculative_*` fields are added to these.
EXTRA_FIELDS = ("disable_overlap_schedule", "max_running_requests", "device", "page_size")
ALGORITHM_NAMES = ("DFLASH", "DDTREE")


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return str(value)


def _error(exc: BaseException) -> dict[str, str]:
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc))[-4000:],
    }


def _resolve(base_argv: list[str], extra_argv: list[str]) -> dict[str, Any]:
    from sglang.srt.server_args import prepare_server_args

    log = io.StringIO()
    try:
        # argparse reports a bad choice by printing and exiting: keep that text as the error.
        with contextlib.redirect_stderr(log):
            server_args = prepare_server_args(base_argv + extra_argv)
            resolve_once = getattr(server_args, "resolve_once", None)
            if resolve_once is not None:
                resolve_once()
    except (Exception, SystemExit) as exc:
        error = _error(exc)
        error["stderr"] = log.getvalue()[-4000:]
        return {"error": error}
    values = _resolved_values(server_args)
    wanted = [name for name in values if name.startswith("speculative_")] + [
        name for name in EXTRA_FIELDS if name in values
    ]
    return {"resolved": {name: _jsonable(values[name]) for name in sorted(wanted)}}


def _resolved_values(server_args: Any) -> dict[str, Any]:
    """Field values after resolution: 0.5.19+ keep raw inputs on the record and resolve lazily."""
    resolved_dict = getattr(server_args, "resolved_dict", None)
    if resolved_dict is not None:
        return resolved_dict()
    return {field.name: getattr(server_args, field.name) for field in dataclasses.fields(server_args)}


def _in_child(case: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run `case` in a forked child and return its JSON result."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            result = case()
        except BaseException as exc:  # noqa: BLE001 - the child must always report
            result = {"error": _error(exc)}
        with os.fdopen(write_end, "w") as out:
            json.dump(result, out)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as inp:
        data = inp.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"error": {"type": "ChildDied", "message": f"wait status {status}", "traceback": ""}}
    return json.loads(data)


def _from_string(name: str) -> dict[str, Any]:
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    try:
        algorithm = SpeculativeAlgorithm.from_string(name)
    except Exception as exc:
        return {"ok": False, "error": _error(exc)}
    predicates = {
        predicate: bool(getattr(algorithm, predicate)())
        for predicate in ("is_dflash", "is_dflash_family", "is_ddtree")
        if callable(getattr(algorithm, predicate, None))
    }
    return {"ok": True, "name": getattr(algorithm, "name", str(algorithm)), **predicates}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="target model folder (config.json)")
    parser.add_argument("--draft", required=True, help="DFlash draft model folder (config.json)")
    parser.add_argument(
        "--cases", required=True, help='JSON object: case name -> list of extra CLI arguments'
    )
    args = parser.parse_args(argv)

    torchvision_stand_in.install(("xgrammar",))  # 0.5.17+ import it (function-call parsing); resolution never calls it
    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # SGLang's own prints must not mix with the JSON
        report = _report(args.target, args.draft, json.loads(args.cases))
    json.dump(report, stdout, indent=1, sort_keys=True)
    stdout.write("\n")
    return 0


def _report(target: str, draft: str, cases: dict[str, list[str]]) -> dict[str, Any]:
    import sglang
    import sglang.srt.server_args  # noqa: F401 - imported once, before the children fork

    base_argv = [
        "--model-path", target,
        "--speculative-draft-model-path", draft,
        "--device", "cuda",
    ]  # fmt: skip
    return {
        "sglang_version": getattr(sglang, "__version__", None),
        "sglang_file": sglang.__file__,
        "from_string": {name: _from_string(name) for name in ALGORITHM_NAMES},
        "cases": {
            name: _in_child(functools.partial(_resolve, base_argv, list(extra)))
            for name, extra in cases.items()
        },
    }


if __name__ == "__main__":
    sys.exit(main())
