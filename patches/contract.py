"""Does a DDTree worker adapter (adapters.py) fit the installed SGLang's worker contract? Read from source.

SGLang changes how it calls the speculative worker between releases (0.5.17 added
`grammar_barrier=`, 0.5.19 `pp_proxy_tensors=`), and DDTree's adapters subclass DFlash's classes
and use their internals. A check of member names misses a new keyword, so this reads the release's
own source (`ast`, importing nothing: it runs in a CPU tree without torch as well as in the server)
and checks each class of an adapter (v2: the worker; v1: the worker and its verify input) against
the DFlash class it subclasses:
- every method the class overrides accepts every parameter the base's method takes, with the
  same optionality, and requires nothing the base does not;
- every call the release makes to an overridden method binds to the override: the scheduler's
  (`srt/managers/`) and DFlash's calls on the names it holds such an object by (`model_worker`,
  `verify_input`, ...), and the base class's own `self.m(...)` calls; positional count and every
  keyword, including the keys of a `**kwargs` dict built in the calling function;
- every hook (an override through which DDTree changes the round) is still called by the release:
  one it no longer calls would leave DDTree silently bypassed;
- every base method the class calls (`self.x(...)` it does not define, `super().x(...)`) exists
  and accepts the arguments given;
- every `self.<attr>` the class reads and does not set is set or defined by the base (or the
  base's own bases), not reached through the base's `__getattr__` delegation;
- every attribute the class reads or sets on a DFlash state object it holds by a known name
  (`Adapter.state`, e.g. `draft_input`) is one that state class defines;
- a stand-in (`Adapter.stands_in`: a class the adapter puts in place of its base's module-level
  name while one release function runs) is still built by that function through that name.
A release guard (`NAME = release_takes(Base.method, "param")` at the adapter module's top level)
lets one adapter follow a signature that differs between releases: the guard is evaluated on the
release's source exactly as `release_takes` evaluates it at run time, and the branch of an
`if NAME:` / `x if NAME else y` that this release does not run is not checked against it.
The server runs `problems` when it creates the DDTree worker and refuses DDTREE with one message;
`ddtree-patch apply` runs it on the patched tree and prints the same findings as a warning.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from .adapters import ADAPTERS, Adapter

CALLER_DIR = "sglang/srt/managers"  # the scheduler's modules, which call the speculative worker


GUARD = "release_takes"  # the one call a release guard may be built from


def release_takes(method: Callable[..., Any], param: str) -> bool:
    """A release guard: does this release's `method` take a parameter named `param`?

    The contract evaluates the same test on the release's source (`_guards`), so the adapter's
    branch for this release is the one checked.
    """
    return param in inspect.signature(method).parameters


def site_root() -> Path:
    """The folder holding the `sglang` package this module was dropped into."""
    return Path(__file__).resolve().parents[4]


def module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def adapter_for(root: Path) -> Adapter | None:
    """The adapter whose base class the install at `root` ships, if DDTree has one."""
    return next((a for a in ADAPTERS if module_file(root, a.base_module) is not None), None)


# --- signatures ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    name: str
    positional: bool  # can be passed by position
    keyword: bool  # can be passed by name
    has_default: bool


@dataclass(frozen=True)
class Signature:
    params: tuple[Param, ...]
    varargs: bool
    varkw: bool

    @classmethod
    def of(cls, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Signature:
        a = fn.args
        positional = a.posonlyargs + a.args
        first_default = len(positional) - len(a.defaults)
        params = [
            Param(arg.arg, True, i >= len(a.posonlyargs), i >= first_default)
            for i, arg in enumerate(positional)
        ]
        params += [
            Param(arg.arg, False, True, default is not None)
            for arg, default in zip(a.kwonlyargs, a.kw_defaults)
        ]
        decorators = {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}
        if "staticmethod" not in decorators and params and params[0].positional:
            params = params[1:]  # self / cls
        return cls(tuple(params), a.vararg is not None, a.kwarg is not None)

    @property
    def positional(self) -> list[Param]:
        return [p for p in self.params if p.positional]

    def by_name(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name and p.keyword), None)

    def accepts_keyword(self, name: str) -> bool:
        return self.varkw or self.by_name(name) is not None

    def accepts_positional(self, count: int) -> bool:
        return self.varargs or count <= len(self.positional)


def overrides_fit(adapter: Signature, base: Signature) -> list[str]:
    """How `adapter` fails to accept what callers of `base` may pass (empty: it fits)."""
    problems, matched = [], set()
    own_positional = adapter.positional
    for i, p in enumerate(base.positional):
        mine = adapter.by_name(p.name) if p.keyword else None
        if mine is None and i < len(own_positional):
            mine = own_positional[i]  # the base's name differs (e.g. `model_worker_batch`)
        if mine is None and not (adapter.varargs or (p.keyword and adapter.varkw)):
            problems.append(f"takes no parameter for the base's `{p.name}`")
        elif mine is not None:
            matched.add(mine.name)
            if p.has_default and not mine.has_default:
                problems.append(f"requires `{mine.name}`, which the base's `{p.name}` makes optional")
    for p in base.params:
        if p.positional:
            continue
        mine = adapter.by_name(p.name)
        if mine is None and not adapter.varkw:
            problems.append(f"takes no keyword `{p.name}`, which the base takes")
        elif mine is not None:
            matched.add(mine.name)
            if p.has_default and not mine.has_default:
                problems.append(f"requires `{p.name}`, which the base makes optional")
    if base.varargs and not adapter.varargs:
        problems.append("takes no *args, which the base takes")
    if base.varkw and not adapter.varkw:
        problems.append("takes no **kwargs, which the base takes")
    for p in adapter.params:
        if p.name not in matched and not p.has_default:
            problems.append(f"requires `{p.name}`, which the base does not take")
    return problems


def call_fits(sig: Signature, positional: int | None, keywords: set[str], complete: bool) -> list[str]:
    """How a call with `positional` arguments (None: a *starred one) and `keywords` fails `sig`.

    `complete`: the call names all its arguments (no `*x` / `**x`), so missing required ones count.
    """
    problems = []
    if positional is not None and not sig.accepts_positional(positional):
        problems.append(f"passes {positional} positional arguments, it takes {len(sig.positional)}")
    problems += [f"passes `{k}=`, which it does not take" for k in sorted(keywords) if not sig.accepts_keyword(k)]
    if complete and positional is not None:
        bound = {p.name for p in sig.positional[:positional]} | keywords
        problems += [f"does not pass the required `{p.name}`" for p in sig.params if not p.has_default and p.name not in bound]
    return problems


# --- classes ----------------------------------------------------------------------------------


@dataclass
class ClassInfo:
    """A class read from source: its methods, the attributes it sets, and its own bases."""

    name: str
    path: Path
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    attrs: set[str]
    bases: list[ClassInfo] = field(default_factory=list)

    def mro(self) -> list[ClassInfo]:
        out, todo = [], [self]
        while todo:
            cls = todo.pop(0)
            if cls not in out:
                out.append(cls)
                todo.extend(cls.bases)
        return out

    def method(self, name: str) -> tuple[ClassInfo, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        return next(((c, c.methods[name]) for c in self.mro() if name in c.methods), None)

    def defines_here(self, name: str) -> bool:
        return name in self.methods or name in self.attrs

    def defines(self, name: str) -> bool:
        return any(c.defines_here(name) for c in self.mro())


def _source(path: Path) -> str:
    """A module's text as Python decodes it on import: a UTF-8 BOM or a PEP 263 coding cookie
    is honoured (a release may ship either), newlines made universal."""
    try:
        return importlib.util.decode_source(path.read_bytes())
    except (SyntaxError, UnicodeDecodeError) as error:  # a wrong cookie, bytes that do not decode
        raise SyntaxError(f"{path} does not decode as Python source: {error}") from error


def _parse(path: Path) -> ast.Module:
    return ast.parse(_source(path), filename=str(path))


def _imports(tree: ast.Module, module: str) -> dict[str, tuple[str, str]]:
    """Local name -> (module, name) of the module's `from X import Y [as Z]` statements."""
    out = {}
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                source = f"{anchor}.{source}" if source else anchor
            for alias in node.names:
                out[alias.asname or alias.name] = (source, alias.name)
    return out


def _self_attrs(node: ast.AST) -> set[str]:
    """Attributes assigned on `self` anywhere below `node` (plain, augmented, annotated, tuple)."""
    out = set()
    for sub in ast.walk(node):
        targets = []
        if isinstance(sub, ast.Assign):
            targets = sub.targets
        elif isinstance(sub, (ast.AugAssign, ast.AnnAssign)):
            targets = [sub.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    out.add(t.attr)
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "setattr":
            if sub.args and isinstance(sub.args[0], ast.Name) and sub.args[0].id == "self":
                if len(sub.args) > 1 and isinstance(sub.args[1], ast.Constant):
                    out.add(str(sub.args[1].value))
    return out


def load_class(root: Path, module: str, name: str, _seen: frozenset[str] = frozenset()) -> ClassInfo | None:
    """The class `module.name` under `root`, with the bases it imports from `root` (others skipped)."""
    path = module_file(root, module)
    if path is None or f"{module}.{name}" in _seen:
        return None
    tree = _parse(path)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if node is None:
        return None
    methods = {n.name: n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    attrs = _self_attrs(node)
    for n in node.body:
        if isinstance(n, ast.Assign):
            attrs |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            attrs.add(n.target.id)
    info = ClassInfo(name, path, methods, attrs)
    imports = _imports(tree, module)
    seen = _seen | {f"{module}.{name}"}
    for base in node.bases:
        if not isinstance(base, ast.Name):
            continue
        if base.id in imports:
            base_module, base_name = imports[base.id]
        elif any(isinstance(n, ast.ClassDef) and n.name == base.id for n in tree.body):
            base_module, base_name = module, base.id
        else:
            continue
        parent = load_class(root, base_module, base_name, seen)
        if parent is not None:
            info.bases.append(parent)
    return info


# --- the release's calls ----------------------------------------------------------------------


@dataclass(frozen=True)
class CallSite:
    method: str
    where: str  # path:line, relative to the site root
    positional: int | None  # None: a *starred argument
    keywords: frozenset[str]
    complete: bool  # no `*x` / `**x`: every argument is named here
    unresolved: str | None = None  # why the keywords could not all be read


def _dict_keys(value: ast.AST) -> set[str] | None:
    """String keys of a dict display / `dict(...)` / conditional of those; None if not literal."""
    if isinstance(value, ast.Dict):
        if all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys):
            return {k.value for k in value.keys}  # type: ignore[union-attr]
        return None
    if isinstance(value, ast.IfExp):
        body, other = _dict_keys(value.body), _dict_keys(value.orelse)
        return None if body is None or other is None else body | other
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict" and not value.args:
        names = [k.arg for k in value.keywords]
        return None if None in names else set(names)  # type: ignore[arg-type]
    return None


def _kwargs_keys(function: ast.AST, name: str) -> tuple[set[str], str | None]:
    """Every key the function can put into its dict `name`; the reason when one is not literal."""
    keys: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    found = _dict_keys(node.value)
                    if found is None:
                        return keys, f"`{name}` is built from a non-literal at line {node.lineno}"
                    keys |= found
                elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == name:
                    if not (isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str)):
                        return keys, f"`{name}[...]` set with a non-literal key at line {node.lineno}"
                    keys.add(target.slice.value)
        elif (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("update", "setdefault")
            and isinstance(node.func.value, ast.Name) and node.func.value.id == name
        ):
            return keys, f"`{name}.{node.func.attr}(...)` at line {node.lineno}"
    return keys, None


def _class_functions(tree: ast.Module, name: str) -> set[int]:
    """ids of the functions inside the module's class `name` (where `self` is that class)."""
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    return set() if node is None else {id(n) for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def release_calls(root: Path, adapter: Adapter, methods: set[str], family: tuple[Adapter, ...]) -> list[CallSite]:
    """The release's calls of `methods` on an `adapter` object: in the scheduler's modules and the
    modules of the `family`'s bases, on a name in `adapter.receivers` (`x.model_worker.m(...)`,
    `verify_input.m(...)`), and the base class's own `self.m(...)`."""
    files = set((root / CALLER_DIR).rglob("*.py"))
    files |= {f for f in (module_file(root, a.base_module) for a in family) if f is not None}
    sites = []
    for path in sorted(files):
        text = _source(path)
        if not any(f".{m}" in text for m in methods):
            continue
        tree = ast.parse(text, filename=str(path))
        own = _class_functions(tree, adapter.base_name) if path == module_file(root, adapter.base_module) else set()
        seen: set[int] = set()
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for call in ast.walk(function):
                if id(call) in seen or not (
                    isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in methods
                ):
                    continue
                seen.add(id(call))
                value = call.func.value
                named = value.attr if isinstance(value, ast.Attribute) else value.id if isinstance(value, ast.Name) else None
                if not (named in adapter.receivers or (named == "self" and id(function) in own)):
                    continue
                where = f"{path.relative_to(root).as_posix()}:{call.lineno}"
                starred = any(isinstance(a, ast.Starred) for a in call.args)
                keywords, unresolved = {k.arg for k in call.keywords if k.arg}, None
                for k in call.keywords:
                    if k.arg is not None:
                        continue
                    if not isinstance(k.value, ast.Name):
                        unresolved = f"passes **{ast.unparse(k.value)}"
                        continue
                    more, why = _kwargs_keys(function, k.value.id)
                    keywords |= more
                    unresolved = unresolved or why
                complete = not starred and all(k.arg for k in call.keywords)
                sites.append(CallSite(call.func.attr, where, None if starred else len(call.args),
                                      frozenset(keywords), complete, unresolved))
    return sites


# --- release guards ---------------------------------------------------------------------------


def _arg_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Every parameter name of `fn`, as `inspect.signature(fn).parameters` lists them."""
    a = fn.args
    names = {arg.arg for arg in a.posonlyargs + a.args + a.kwonlyargs}
    return names | {arg.arg for arg in (a.vararg, a.kwarg) if arg is not None}


def _guards(root: Path, adapter: Adapter) -> tuple[dict[str, bool], list[str]]:
    """The adapter module's release guards evaluated on this release, and what is wrong with any."""
    path = module_file(root, adapter.module)
    if path is None:
        return {}, []
    tree = _parse(path)
    imports = _imports(tree, adapter.module)
    guards: dict[str, bool] = {}
    found: list[str] = []
    for node in tree.body:
        call = node.value if isinstance(node, ast.Assign) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == GUARD):
            continue
        args = call.args
        if not (
            len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and len(args) == 2 and not call.keywords
            and isinstance(args[0], ast.Attribute) and isinstance(args[0].value, ast.Name)
            and isinstance(args[1], ast.Constant) and isinstance(args[1].value, str)
        ):
            found.append(f"release guard at line {node.lineno} is not `NAME = {GUARD}(Class.method, \"param\")`")
            continue
        name, cls, method = node.targets[0].id, args[0].value.id, args[0].attr
        info = load_class(root, *imports.get(cls, (adapter.module, cls)))
        owner = info.method(method) if info is not None else None
        if owner is None:
            found.append(f"release guard {name} (line {node.lineno}) reads {cls}.{method}, which this release does not have")
            continue
        guards[name] = args[1].value in _arg_names(owner[1])
    return guards, found


def _guard_value(test: ast.AST, guards: dict[str, bool]) -> bool | None:
    """What a branch test made of one guard (`G` / `not G`) is on this release; None: not a guard."""
    if isinstance(test, ast.Name) and test.id in guards:
        return guards[test.id]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _guard_value(test.operand, guards)
        return None if inner is None else not inner
    return None


def _live(node: ast.AST, guards: dict[str, bool]) -> Iterator[ast.AST]:
    """`ast.walk(node)` without the branches of guarded `if`s / conditionals this release does not run."""
    todo = deque([node])
    while todo:
        current = todo.popleft()
        yield current
        value = _guard_value(current.test, guards) if isinstance(current, (ast.If, ast.IfExp)) else None
        if value is None:
            todo.extend(ast.iter_child_nodes(current))
            continue
        taken = current.body if value else current.orelse
        todo.extend(taken if isinstance(taken, list) else [taken])


# --- the check --------------------------------------------------------------------------------


def _calls_on_base(adapter: ClassInfo, guards: dict[str, bool]) -> list[tuple[str, ast.Call, bool]]:
    """(name, call, via super()) for the adapter's `self.x(...)` / `super().x(...)` calls."""
    out = []
    for fn in adapter.methods.values():
        for node in _live(fn, guards):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            value = node.func.value
            if isinstance(value, ast.Name) and value.id == "self":
                out.append((node.func.attr, node, False))
            elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
                out.append((node.func.attr, node, True))
    return out


def _self_reads(adapter: ClassInfo, guards: dict[str, bool]) -> dict[str, int]:
    """`self.x` read in the adapter's methods -> first line."""
    out: dict[str, int] = {}
    for fn in adapter.methods.values():
        called = {id(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}  # checked as calls
        for node in _live(fn, guards):
            if (
                id(node) not in called and isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                and isinstance(node.value, ast.Name) and node.value.id == "self"
            ):
                out.setdefault(node.attr, node.lineno)
    return out


def _state_uses(adapter: ClassInfo, guards: dict[str, bool], names: tuple[str, ...]) -> dict[tuple[str, str, bool], int]:
    """(name, attribute, set) -> first line, for `name.attribute` in the adapter's methods."""
    out: dict[tuple[str, str, bool], int] = {}
    for fn in adapter.methods.values():
        for node in _live(fn, guards):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names:
                out.setdefault((node.value.id, node.attr, isinstance(node.ctx, ast.Store)), node.lineno)
    return out


def _imports_as(node: ast.AST, name: str) -> bool:
    """`node` is an import statement that binds `name`."""
    return isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in node.names)


def _stand_in_problems(adapter: Adapter, root: Path) -> list[str]:
    """A stand-in takes effect only if the release function builds the base as `Base(...)` through
    the name its module binds at the top level (an import or a class), never rebinding it locally."""
    if adapter.stands_in is None:
        return []
    module, function = adapter.stands_in
    name, path = adapter.base_name, module_file(root, module)
    if path is None:
        return [f"{module} is not in this SGLang, so {adapter.name} cannot stand in there"]
    tree = _parse(path)
    bound = any(isinstance(n, ast.ClassDef) and n.name == name or _imports_as(n, name) for n in tree.body)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    inner = [n for fn in functions for n in ast.walk(fn)]
    builds = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name for n in inner)
    rebinds = any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) or _imports_as(n, name)
        for n in inner
    )
    if bound and builds and not rebinds:
        return []
    return [f"{module}.{function} no longer builds {name}(...) through its module-level name, so "
            f"{adapter.name} cannot stand in for it there"]


def problems(adapter: Adapter, root: Path) -> list[str]:
    """Every way `adapter` (each class of its family) does not fit the install at `root` (empty: it fits)."""
    found: list[str] = []
    for member in adapter.family():
        found += _class_problems(member, root, adapter.family())
    return sorted(set(found), key=found.index)


def _class_problems(adapter: Adapter, root: Path, family: tuple[Adapter, ...]) -> list[str]:
    mine = load_class(root, adapter.module, adapter.name)
    base = load_class(root, adapter.base_module, adapter.base_name)
    if mine is None:
        return [f"{adapter.module}.{adapter.name} is not installed"]
    if base is None:
        return [f"{adapter.base_module}.{adapter.base_name} is not in this SGLang"]
    guards, found = _guards(root, adapter)
    found += _stand_in_problems(adapter, root)
    theirs = {(c.path, c.name) for c in base.mro()}
    ours = [c for c in mine.mro() if (c.path, c.name) not in theirs]  # the adapter and its own bases
    label = f"{adapter.name}.{{}} vs {base.name}.{{}}"

    overridden = {}
    for name, fn in sorted(mine.methods.items()):
        owner = base.method(name)
        if owner is None or name.startswith("__") and name != "__init__":
            continue
        found += [f"{label.format(name, name)}: {p}" for p in overrides_fit(Signature.of(fn), Signature.of(owner[1]))]
        if name != "__init__":
            overridden[name] = Signature.of(fn)

    found += [f"{adapter.name} does not override {base.name}.{hook}" for hook in adapter.hooks if hook not in overridden]
    sites = release_calls(root, adapter, set(overridden), family)
    for site in sites:
        if site.unresolved:
            found.append(f"call at {site.where}: cannot read its keywords ({site.unresolved})")
        found += [
            f"call at {site.where} {p} ({adapter.name}.{site.method})"
            for p in call_fits(overridden[site.method], site.positional, set(site.keywords), site.complete)
        ]
    called = {site.method for site in sites}
    found += [
        f"no call of {base.name}.{hook} on `self` or `{'` / `'.join(adapter.receivers)}` in {CALLER_DIR} or "
        f"DFlash's modules: the release no longer calls it, so {adapter.name}.{hook} would be bypassed"
        for hook in adapter.hooks if hook in overridden and hook not in called
    ]

    for cls in ours:  # the adapter and its own bases (a set-up mixin shared by the workers)
        found += _base_use_problems(cls, ours, base, guards)

    for state in adapter.state:
        info = load_class(root, state.module, state.name)
        if info is None:
            found.append(f"{state.module}.{state.name} is not in this SGLang")
            continue
        for (name, attr, store), line in sorted(_state_uses(mine, guards, state.names).items()):
            if not info.defines(attr):
                verb = "sets" if store else "reads"
                found.append(f"{adapter.name} {verb} {name}.{attr} (line {line}), which {state.name} neither sets nor defines")
    return found


def _base_use_problems(cls: ClassInfo, ours: list[ClassInfo], base: ClassInfo, guards: dict[str, bool]) -> list[str]:
    """What `cls` (one of ours) calls on or reads from the DFlash base that the base lacks or takes otherwise."""
    found = []
    for name, call, via_super in _calls_on_base(cls, guards):
        if not via_super and any(c.defines_here(name) for c in ours):
            continue
        owner = base.method(name)
        if owner is None:
            if not base.defines(name):
                found.append(f"{cls.name} calls {base.name}.{name} (line {call.lineno}), which this release does not have")
            continue
        positional = None if any(isinstance(a, ast.Starred) for a in call.args) else len(call.args)
        keywords = {k.arg for k in call.keywords if k.arg}
        complete = all(k.arg for k in call.keywords)
        found += [
            f"{cls.name} line {call.lineno} calls {base.name}.{name}: it {p}"
            for p in call_fits(Signature.of(owner[1]), positional, keywords, complete)
        ]
    for name, line in sorted(_self_reads(cls, guards).items()):
        if any(c.defines_here(name) for c in ours) or base.defines(name):
            continue
        found.append(f"{cls.name} reads self.{name} (line {line}), which {base.name} neither sets nor defines")
    return found


def refusal(problems_found: list[str], version: str) -> str:
    """The one message the server refuses DDTREE with (and `apply` warns with)."""
    return (
        f"DDTREE's worker does not fit the worker contract of SGLang {version}, so DDTREE is refused "
        f"before serving: " + "; ".join(problems_found)
        + ". This SGLang release needs a newer ddtree-patch (DFLASH and other algorithms are unaffected)."
    )
