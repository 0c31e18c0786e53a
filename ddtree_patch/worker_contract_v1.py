"""Does DDTREE's v1 adapter fit the installed SGLang's v1 DFlash worker? Static (ast), no import.

The adapter (`srt/speculative/ddtree/worker_v1.py`, dropped in by `apply`) subclasses
`DFlashWorker` and `DFlashVerifyInput` and overrides a few of their methods. It fits a release when
- every override accepts every parameter its base method takes there (same name, a default
  wherever the base has one, positional where the base's is) and requires nothing more,
- every call the release makes to an overridden method (DFlash's own calls, the scheduler's calls to
  its model / draft worker) binds to the override,
- every `super().m(...)` call of the adapter binds to the base's `m`, and every base attribute the
  adapter reads is set or defined by the base class.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ADAPTER = "sglang/srt/speculative/ddtree/worker_v1.py"
# Our class -> (the release file defining its base, the base class).
BASES = {
    "DDTreeWorkerV1": ("sglang/srt/speculative/dflash_worker.py", "DFlashWorker"),
    "DDTreeVerifyInputV1": ("sglang/srt/speculative/dflash_info.py", "DFlashVerifyInput"),
}
# Where the release calls an overridden method: DFlash's own files (any receiver), and the
# scheduler's calls to its model / draft worker.
SCHEDULER_DIR = "sglang/srt/managers"
SCHEDULER_RECEIVERS = ("self.model_worker", "self.draft_worker")


@dataclass(frozen=True)
class Params:
    """A `def`'s parameters (self dropped): positional names in order, keyword-only names."""

    positional: tuple[str, ...]
    required_positional: int
    keyword_only: tuple[str, ...]
    required_keyword: frozenset[str]
    var_positional: bool
    var_keyword: bool

    @classmethod
    def of(cls, fn: ast.FunctionDef) -> "Params":
        a = fn.args
        positional = [p.arg for p in a.posonlyargs + a.args][1:]
        required = len(positional) - len(a.defaults)
        kw_required = {p.arg for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is None}
        return cls(tuple(positional), required, tuple(p.arg for p in a.kwonlyargs), frozenset(kw_required),
                   a.vararg is not None, a.kwarg is not None)

    def accepts(self, n_positional: int, keywords: set[str], splat: bool = False) -> list[str]:
        """Why a call with these arguments would not bind (empty: it binds)."""
        problems = []
        if n_positional > len(self.positional) and not self.var_positional:
            problems.append(f"takes {len(self.positional)} positional arguments, the call passes {n_positional}")
        named = set(self.positional[n_positional:]) | set(self.keyword_only)
        extra = sorted(k for k in keywords if k not in named)
        if extra and not self.var_keyword:
            problems.append(f"does not accept {', '.join(extra)}")
        if not splat:
            missing = [p for p in self.positional[n_positional:self.required_positional] if p not in keywords]
            missing += sorted(k for k in self.required_keyword if k not in keywords)
            if missing:
                problems.append(f"requires {', '.join(missing)}, which the call does not pass")
        return problems


def override_drift(base: Params, over: Params) -> list[str]:
    """Why `over` cannot stand in for `base` (empty: it can)."""
    if over.var_positional and over.var_keyword:
        return []  # passes everything through
    problems = over.accepts(base.required_positional, set(base.required_keyword))
    for i, name in enumerate(base.positional):
        if i < len(over.positional) and over.positional[i] == name:
            if base.required_positional <= i < over.required_positional:
                problems.append(f"{name} has a default in the base but not in the override")
        elif not over.var_positional:
            problems.append(f"positional parameter {i + 1} is {name!r} in the base")
    for name in base.keyword_only:
        if name in over.keyword_only or name in over.positional:
            if name not in base.required_keyword and name in over.required_keyword:
                problems.append(f"{name} has a default in the base but not in the override")
        elif not over.var_keyword:
            problems.append(f"does not accept keyword {name!r}")
    if base.var_positional and not over.var_positional:
        problems.append("does not accept the base's *args")
    if base.var_keyword and not over.var_keyword:
        problems.append("does not accept the base's **kwargs")
    return sorted(set(problems))


def _classes(path: Path) -> dict[str, ast.ClassDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def _defined_names(cls: ast.ClassDef) -> set[str]:
    """Methods, class-level fields and every `self.x = ...` target of a class."""
    names = set(_methods(cls))
    for node in ast.walk(cls):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return names


def _call_shape(call: ast.Call) -> tuple[int, set[str], bool]:
    splat = any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)
    positional = sum(not isinstance(a, ast.Starred) for a in call.args)
    return positional, {k.arg for k in call.keywords if k.arg}, splat


def _calls(path: Path, names: set[str], receivers: tuple[str, ...] | None) -> list[tuple[str, ast.Call]]:
    """(method, call) for every `<receiver>.<method>(...)` in `path` (any receiver when None)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names
                and (receivers is None or ast.unparse(node.func.value) in receivers)):
            found.append((node.func.attr, node))
    return found


def _release_calls(site: Path, names: set[str]) -> list[tuple[str, str, ast.Call]]:
    """(file, method, call) for each call of an overridden method in DFlash's files and the scheduler."""
    found = []
    for base_file, _ in BASES.values():
        found += [(base_file, m, c) for m, c in _calls(site / base_file, names, None)]
    for path in sorted((site / SCHEDULER_DIR).rglob("*.py")):
        found += [(str(path.relative_to(site)), m, c) for m, c in _calls(path, names, SCHEDULER_RECEIVERS)]
    return found


def check_v1(site: Path) -> list[str]:
    """Drift of the dropped-in v1 adapter against the release installed at `site` (empty: it fits)."""
    ours = _classes(site / ADAPTER)
    drift: list[str] = []
    overridden: dict[str, Params] = {}
    for name, (base_file, base_name) in BASES.items():
        base_cls = _classes(site / base_file).get(base_name)
        if base_cls is None:
            drift.append(f"{base_file}: no class {base_name}")
            continue
        base_methods, our_methods = _methods(base_cls), _methods(ours[name])
        for method, fn in our_methods.items():
            if method not in base_methods:
                continue
            over = Params.of(fn)
            if method != "__init__":
                overridden[method] = over
            for problem in override_drift(Params.of(base_methods[method]), over):
                drift.append(f"{name}.{method} vs {base_name}.{method}: {problem}")
        for node in ast.walk(ours[name]):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Call) and ast.unparse(node.func.value) == "super()"):
                method = node.func.attr
                if method not in base_methods:
                    drift.append(f"{name}: super().{method} is not defined by {base_name}")
                    continue
                for problem in Params.of(base_methods[method]).accepts(*_call_shape(node)):
                    drift.append(f"{name}: super().{method}(...) line {node.lineno}: {base_name}.{method} {problem}")
        base_names = _defined_names(base_cls) | {"__init__"}
        own = _defined_names(ours[name])
        for node in ast.walk(ours[name]):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                    and isinstance(node.value, ast.Name) and node.value.id == "self"
                    and node.attr not in own and node.attr not in base_names):
                drift.append(f"{name} reads self.{node.attr}, which {base_name} does not define")
    for path, method, call in _release_calls(site, set(overridden)):
        for problem in overridden[method].accepts(*_call_shape(call)):
            drift.append(f"{path}:{call.lineno} calls {method}: the override {problem}")
    return sorted(set(drift))
