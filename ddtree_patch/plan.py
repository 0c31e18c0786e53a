"""From a scan to a Plan: the edited bytes of every file plus the drop-ins, each proven to compile."""

from __future__ import annotations

import hashlib

from ddtree_patch.analyse import SourceText
from ddtree_patch.dropins import dropin_files
from ddtree_patch.errors import EngineError
from ddtree_patch.model import FileEdit, Install, Plan
from ddtree_patch.scan import Progress, ScanResult, scan


def check_compiles(path: str, data: bytes) -> None:
    try:
        compile(data, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        raise EngineError(f"the patched {path} does not compile ({error}): please report this bug") from error


def build_plan(install: Install, result: ScanResult | None = None, progress: Progress | None = None) -> Plan:
    result = result or scan(install, progress)
    plan = Plan(install)
    for file in result.files:
        if not file.replacements:
            continue
        before = (install.package_dir / file.path).read_bytes()
        after = SourceText.decode(before).encode(file.replacements)
        if hashlib.sha256(before).hexdigest() == hashlib.sha256(after).hexdigest():
            continue
        check_compiles(file.path, after)
        plan.edits.append(FileEdit(file.path, before, after))
    for added in dropin_files():
        check_compiles(added.path, added.data)
        plan.added.append(added)
    return plan
