"""From a scan to a Plan: the edited bytes of every file plus the drop-ins, each proven to compile."""

from __future__ import annotations

from ddtree_patch.analyse import SourceText, analyse_file
from ddtree_patch.dropins import dropin_files
from ddtree_patch.errors import Unpatchable
from ddtree_patch.compiled import check_compiles
from ddtree_patch.errors import NativeDDTree
from ddtree_patch.model import FileEdit, Install, Plan
from ddtree_patch.native import native_ddtree
from ddtree_patch.data.policy import default_policy
from ddtree_patch.scan import Progress, ScanResult, scan
from ddtree_patch.state import install_state, pristine_view


def build_plan(install: Install, result: ScanResult | None = None, progress: Progress | None = None) -> Plan:
    """The plan of the pristine package, also when it is patched now (files rewritten by a
    previous apply are read from their backups), so re-applying the same plan is a no-op."""
    base = install_state(install)  # before reading a file: apply_plan refuses it once this moved on
    refuse_native(install)
    result = result or scan(install, progress)
    if result.skipped:  # a file we cannot parse may hold a DFLASH site the patch must edit
        names = "; ".join(f"sglang/{path}: {why}" for path, why in result.skipped)
        raise Unpatchable(
            f"{len(result.skipped)} file(s) that mention dflash cannot be parsed, so they cannot "
            f"be patched ({names}); nothing was written. Reinstall SGLang (or fix the file)"
        )
    view = pristine_view(install)
    plan = Plan(install, base=base)
    for file in result.files:
        if file.path in view.originals:
            file = analyse_file(file.path, view.read(file.path), default_policy())
        if not file.replacements:
            continue
        before = view.read(file.path)
        after = SourceText.decode(before).encode(file.replacements)
        if before == after:
            continue
        check_compiles(file.path, after)
        plan.edits.append(FileEdit(file.path, before, after))
    for added in dropin_files():
        check_compiles(added.path, added.data)
        plan.added.append(added)
    return plan


def refuse_native(install: Install) -> None:
    evidence = native_ddtree(install)
    if evidence:
        raise NativeDDTree(
            f"SGLang {install.version} ships DDTREE itself ({'; '.join(evidence)}): use its own "
            "--speculative-algorithm DDTREE; ddtree-patch writes nothing over a native DDTree."
        )
