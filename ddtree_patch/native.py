"""Does this SGLang ship DDTREE itself (upstream PR #29907 or later)? Decided by content, not version.

Read from the pristine view, so our own edits never count: a `DDTREE` member of
`SpeculativeAlgorithm` that was there before any patch, or a module named for DDTree that neither
we added nor lives in our drop-in folder. Patching over a native DDTree would send `create_worker`
to our worker and fight upstream's; `apply` refuses instead. A state that cannot give the pristine
bytes (a backup missing, backups without a manifest) raises CorruptState from the view: our own
DDTREE member must never pass for SGLang's.
"""

from __future__ import annotations

import ast
import os

from ddtree_patch.dropins import DROPIN_ROOT
from ddtree_patch.model import Install
from ddtree_patch.state import pristine_view
from ddtree_patch.tokens import TWIN_MEMBER

ENUM_FILE = "srt/speculative/spec_info.py"
ENUM_CLASS = "SpeculativeAlgorithm"


def _enum_defines_ddtree(source: bytes) -> bool:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == ENUM_CLASS:
            for statement in node.body:
                targets = statement.targets if isinstance(statement, ast.Assign) else (
                    [statement.target] if isinstance(statement, ast.AnnAssign) else [])
                if any(isinstance(t, ast.Name) and t.id == TWIN_MEMBER for t in targets):
                    return True
    return False


def native_ddtree(install: Install) -> list[str]:
    """Evidence (package-relative paths with what was found); empty when SGLang has no DDTREE of its own."""
    view = pristine_view(install)
    evidence = []
    if (install.package_dir / ENUM_FILE).is_file() and _enum_defines_ddtree(view.read(ENUM_FILE)):
        evidence.append(f"{ENUM_FILE}: {ENUM_CLASS}.{TWIN_MEMBER}")
    for folder, dirs, files in os.walk(install.package_dir):
        rel_folder = os.path.relpath(folder, install.package_dir).replace(os.sep, "/")
        if rel_folder == DROPIN_ROOT or rel_folder.startswith(DROPIN_ROOT + "/"):
            dirs.clear()
            continue
        for name in files:
            rel = name if rel_folder == "." else f"{rel_folder}/{name}"
            if name.endswith(".py") and "ddtree" in name.lower() and rel not in view.added:
                evidence.append(f"{rel}: a DDTree module")
    return evidence
