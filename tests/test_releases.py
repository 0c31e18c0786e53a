"""Real SGLang releases from the package index: every site decided, the plan compiles, idempotent."""

from __future__ import annotations

import pytest

from ddtree_patch.analyse import analyse_file
from ddtree_patch.audit import audit
from ddtree_patch.locate import from_folder
from ddtree_patch.plan import build_plan
from ddtree_patch.data.policy import default_policy
from ddtree_patch.sites import Decision
from tests.sglang_releases import RELEASES

STRUCTURAL = {"enum-member", "predicate-def", "worker-dispatch", "validation-hook", "request-hook", "server-arg-field"}

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("version", RELEASES)
def test_release_is_fully_decided_and_patchable(version, release_site):
    install = from_folder(release_site(version))
    report = audit(install)
    assert report.ok, report.problems
    assert report.counts.get("UNHANDLED", 0) == 0
    assert report.state == "pristine"
    assert STRUCTURAL <= {s.form for s in report.sites if s.decision is Decision.EDIT}
    assert not report.result.skipped, report.result.skipped

    plan = build_plan(install, report.result)  # compiles every edited file or raises
    assert {"srt/speculative/spec_info.py"} <= {e.path for e in plan.edits}
    for edit in plan.edits:
        again = analyse_file(edit.path, edit.after, default_policy())
        assert again.replacements == [], f"{edit.path}: a second application still changes it"
        pending = [s for s in again.sites if s.decision in (Decision.WIDEN, Decision.EDIT, Decision.NARROW)
                   and s.rule not in ("predicate-call",) and not s.applied]
        assert not pending, pending
        assert all(s.decision is not Decision.UNHANDLED for s in again.sites)

    gates = [s for s in report.sites if s.decision in (Decision.WIDEN, Decision.KEEP, Decision.NARROW)
             and s.form in ("predicate-call", "equality", "membership", "allow-list")
             and not s.path.startswith("test/") and "registry" not in s.path]
    assert all(s.capability for s in gates), [s for s in gates if not s.capability]
