"""The audit report: every site with its decision, plus whether the install is patched consistently.

Before apply it is a preview; after, a proof of the applied plan: the files apply rewrote are
analysed from their pristine backups (the same sites and decisions as the preview) and each must
hold exactly the plan's bytes (`proof.py`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

from ddtree_patch import __version__
from ddtree_patch.dropins import dropin_files
from ddtree_patch.model import Install
from ddtree_patch.native import native_ddtree
from ddtree_patch.proof import prove
from ddtree_patch.scan import Progress, ScanResult, scan
from ddtree_patch.sites import EDITING, Decision, Site
from ddtree_patch.state import load_manifest, package_prefix, pristine_view

SCHEMA = "ddtree-patch.audit/1"


@dataclass
class AuditReport:
    install: Install
    result: ScanResult
    dropins: dict[str, str] = field(default_factory=dict)  # path -> present / absent / differs
    native: list[str] = field(default_factory=list)  # evidence that SGLang ships DDTREE itself
    unproven: list[str] = field(default_factory=list)  # files as apply wrote them, by another plan than this one

    @property
    def sites(self) -> list[Site]:
        return [site for file in self.result.files for site in file.sites]

    @property
    def counts(self) -> Counter:
        return Counter(site.decision.value for site in self.sites)

    @property
    def state(self) -> str:
        """native (SGLang ships DDTREE itself), pristine (nothing applied), patched (every edit
        applied), or partial (some)."""
        if self.native:
            return "native"
        edits = [s for s in self.sites if s.decision in EDITING and s.rule]
        applied = [s for s in edits if s.applied]
        structural = (Decision.EDIT, Decision.NARROW)  # widenings need no edit at predicate calls
        dropins = set(self.dropins.values())
        if not any(s.decision in structural and s.applied for s in edits) and dropins <= {"absent"}:
            return "pristine"
        pending = any(s.decision in structural and not s.applied for s in edits)
        return "partial" if pending or dropins != {"present"} or not applied else "patched"

    @property
    def problems(self) -> list[str]:
        found = []
        if self.native:
            found.append("SGLang ships DDTREE itself (" + "; ".join(self.native) + "): `apply` refuses")
        if self.counts.get(Decision.UNHANDLED.value):
            found.append(f"{self.counts[Decision.UNHANDLED.value]} UNHANDLED site(s)")
        if self.result.skipped:  # a file we could not parse may hide a DFLASH condition
            found.append(f"{len(self.result.skipped)} file(s) that mention dflash could not be parsed")
        if self.unproven:
            found.append(f"{len(self.unproven)} patched file(s) hold another plan than this version's "
                         f"({', '.join(self.unproven)}): `ddtree-patch apply` puts this one in place")
        if self.state == "partial":
            missing = [p for p, s in self.dropins.items() if s != "present"]
            found.append("install is partly patched" + (f" (drop-ins {', '.join(missing)})" if missing else ""))
        return found

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        mentions: Counter = Counter()
        for file in self.result.files:
            mentions.update(file.mentions)
        return {
            "schema": SCHEMA,
            "tool_version": __version__,
            "sglang": {"version": self.install.version, "package_dir": str(self.install.package_dir)},
            "state": self.state,
            "ok": self.ok,
            "problems": self.problems,
            "summary": {d.value: self.counts.get(d.value, 0) for d in Decision},
            "mentions": dict(mentions),
            "files": {
                "scanned": self.result.scanned,
                "candidates": len(self.result.files),
                "cache_hits": self.result.cache_hits,
                "skipped": [{"path": p, "reason": r} for p, r in self.result.skipped],
            },
            "dropins": [{"path": p, "status": s} for p, s in self.dropins.items()],
            "native": list(self.native),
            "warnings": list(self.install.warnings),
            "sites": [site.to_json() for site in self.sites],
        }


def _dropin_status(install: Install) -> dict[str, str]:
    status = {}
    for added in dropin_files():
        path = install.package_dir / added.path
        status[added.path] = "absent" if not path.is_file() else "present" if path.read_bytes() == added.data else "differs"
    return status


def _written(install: Install) -> dict[str, str]:
    """Package path -> sha256 of the bytes the applied patch wrote there, from its manifest."""
    manifest = load_manifest(install)
    if manifest is None:
        return {}
    prefix = package_prefix(install) + "/"
    return {e.path.removeprefix(prefix): e.sha256_after for e in manifest.changes.edited}


def audit(install: Install, progress: Progress | None = None) -> AuditReport:
    view = pristine_view(install)
    result = scan(install, progress, originals=view.originals)
    written = _written(install) if view.originals else {}
    unproven = []
    for i, file in enumerate(result.files):
        if file.path not in view.originals:
            continue
        current = (install.package_dir / file.path).read_bytes()
        proven = prove(file, view.read(file.path), current)
        if proven is not None:
            result.files[i] = proven
        elif written.get(file.path) == hashlib.sha256(current).hexdigest():
            unproven.append(file.path)  # as apply wrote it, by another plan (a file changed since is drift)
    return AuditReport(install, result, _dropin_status(install), native_ddtree(install), unproven)
