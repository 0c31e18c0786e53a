"""The --json envelope (docs/json.md), apart from the renderers: light enough (no rich, no engine)
that the CLI can print it while it is still starting up (a Ctrl-C during its imports)."""

from __future__ import annotations

from ddtree_patch import __version__
from ddtree_patch.model import Install

# Every verb, success or failure, prints one document with these keys; a verb's own fields sit
# beside them. A field's meaning never changes within a schema.
SCHEMA = "ddtree-patch/2"
ENVELOPE = ("schema", "command", "tool_version", "sglang", "ok", "error")


def sglang_json(install: Install | None) -> dict | None:
    if install is None:
        return None
    return {"version": install.version, "package_dir": str(install.package_dir),
            "site_packages": str(install.site_packages)}


def document(command: str, install: Install | None, ok: bool, body: dict | None = None,
             error: dict | None = None) -> dict:
    """One --json document: the envelope, then the verb's own fields (which never override it)."""
    fields = {k: v for k, v in (body or {}).items() if k not in ENVELOPE}
    return {"schema": SCHEMA, "command": command, "tool_version": __version__,
            "sglang": sglang_json(install), "ok": ok, "error": error, **fields}
