"""The audit after apply proves the applied plan: the preview's sites, decisions and counts, each
edit "(applied)" and each KEEP "(kept)", at its place in the patched file; drift, another plan's
bytes and missing drop-ins still fail it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddtree_patch import __version__
from ddtree_patch.audit import AuditReport, audit
from ddtree_patch.locate import from_folder
from ddtree_patch.plan import build_plan
from ddtree_patch.sites import Decision, Site, with_carried
from ddtree_patch.source_text import SourceText
from ddtree_patch.transaction import apply
from tests.sglang_releases import RELEASES

MINI = Path(__file__).resolve().parent.parent / "fixtures" / "mini_site"
MINIMAX = "srt/arg_groups/model_overrides/minimax_m3.py"
# The shape of 0.5.23's MiniMax M3.1 override: an allow-list DDTree stays out of (KEEP) and a
# refusal it shares (WIDEN), whose rewrite `algorithm in ("DFLASH", "DDTREE")` reads afresh as an
# allow-list, so a proof that re-decided the patched code would call it KEEP.
MINIMAX_SOURCE = '''def _minimax_m3_overrides(cfg):
    if cfg.speculative_algorithm in ("DSPARK", "DFLASH"):
        algorithm = cfg.speculative_algorithm
        if algorithm == "DFLASH" and cfg.disaggregation_mode != "null":
            raise ValueError("M3.1 NVFP4 DFLASH currently requires colocated serving")
'''


def _identity(site: Site) -> tuple:
    """A site as the ledger decides it (its line and column move when the patch adds lines)."""
    return (site.path, site.qualname, site.kind, site.form, site.rule, site.decision, site.reason, site.capability)


def _token(package_dir: Path, site: Site) -> str:
    line = SourceText.decode((package_dir / site.path).read_bytes()).lines[site.line - 1]
    return re.match(r"[\w\"']*", line[site.col:]).group(0)


def assert_proof_matches_preview(preview: AuditReport, proof: AuditReport, pristine: Path) -> None:
    """Same sites in the same order, same decisions and counts; each planned site applied (as the
    table shows them: with the calls a widened predicate carries); each site's line and column in
    the patched file point at the token the preview found."""
    assert proof.ok and proof.state == "patched", proof.problems
    assert [_identity(s) for s in proof.sites] == [_identity(s) for s in preview.sites]
    assert proof.counts == preview.counts
    for before, after in zip(preview.sites, with_carried(proof.sites)):
        assert after.applied == (before.applied or before.planned), after
        token = _token(pristine, before)
        assert token and _token(proof.install.package_dir, after) == token, (before, after)


def _cli(*args: str, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250", "DDTREE_PATCH_CACHE": "off"}
    return subprocess.run([sys.executable, "-m", "ddtree_patch", *args, "--target", str(site)],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture
def mini(tmp_path):
    """The mini site plus the MiniMax override; (site folder, pristine copy of its package)."""
    site = tmp_path / "site"
    shutil.copytree(MINI, site)
    path = site / "sglang" / MINIMAX
    path.parent.mkdir(parents=True)
    path.write_text(MINIMAX_SOURCE)
    shutil.copytree(site / "sglang", tmp_path / "pristine")
    return site, tmp_path / "pristine"


def test_proof_is_the_preview_applied(mini, monkeypatch):
    monkeypatch.setenv("DDTREE_PATCH_CACHE", "off")
    site, pristine = mini
    install = from_folder(site)
    preview = audit(install)
    assert preview.ok and preview.state == "pristine" and preview.counts["KEEP"]
    apply(install, build_plan, __version__)
    proof = audit(install)
    assert_proof_matches_preview(preview, proof, pristine)
    refusal = [s for s in proof.sites if s.path == MINIMAX and s.form == "equality"]
    assert [(s.decision, s.applied) for s in refusal] == [(Decision.WIDEN, True)]
    assert 'in ("DFLASH", "DDTREE")' in refusal[0].snippet  # the line as it reads now
    assert proof.result.scanned == preview.result.scanned  # the drop-ins are checked, not scanned


def test_table_marks_every_edit_applied_and_every_keep_kept(mini):
    site, _ = mini
    rows = lambda text: [line.split("\t") for line in text.splitlines() if line.startswith("  ") and "\t" in line]
    before = _cli("audit", site=site)
    assert _cli("apply", site=site).returncode == 0
    after = _cli("audit", site=site)
    assert after.returncode == 0, after.stdout
    marks = {row[3] for row in rows(after.stdout)}
    assert marks == {"KEEP (kept)", "WIDEN (applied)", "EDIT (applied)"}
    assert [row[1:3] + row[4:] for row in rows(after.stdout)] == [row[1:3] + row[4:] for row in rows(before.stdout)]
    summary = lambda text: next(line for line in text.splitlines() if line.startswith("sites: "))
    assert summary(after.stdout) == summary(before.stdout)


def _rewrite_as_another_plan(site: Path, rel: str, old: bytes, new: bytes) -> None:
    """The file as an apply of another plan left it: its bytes and the manifest agree."""
    path = site / "sglang" / rel
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new))
    manifest_path = site / ".ddtree-patch" / "sglang" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for entry in manifest["changes"]["edited"]:
        if entry["path"] == f"sglang/{rel}":
            entry["sha256_after"] = hashlib.sha256(path.read_bytes()).hexdigest()
            entry["size_after"] = len(path.read_bytes())
    manifest_path.write_text(json.dumps(manifest))


def test_bytes_of_another_plan_fail_the_proof(mini):
    site, _ = mini
    assert _cli("apply", site=site).returncode == 0
    _rewrite_as_another_plan(site, MINIMAX, b'algorithm in ("DFLASH", "DDTREE")', b'algorithm in ("DDTREE", "DFLASH")')
    done = _cli("audit", "--json", site=site)
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["state"] == "patched" and not report["ok"]
    assert any(MINIMAX in p and f"`ddtree-patch apply --target {site}`" in p for p in report["problems"]), report["problems"]
    assert not any(s["applied"] for s in report["sites"] if s["path"] == MINIMAX and s["decision"] == "WIDEN")


def test_a_missing_dropin_still_fails(mini):
    site, _ = mini
    assert _cli("apply", site=site).returncode == 0
    (site / "sglang" / "srt" / "speculative" / "ddtree" / "__init__.py").unlink()
    done = _cli("audit", "--json", site=site)
    assert done.returncode == 1 and any("drop-ins" in p for p in json.loads(done.stdout)["problems"])


def test_drift_still_fails(mini):
    site, _ = mini
    assert _cli("apply", site=site).returncode == 0
    path = site / "sglang" / MINIMAX
    path.write_text(path.read_text() + "# a hand edit\n")
    done = _cli("audit", "--json", site=site)
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["state"] == "drifted"
    assert not any("another plan" in p for p in report["problems"]), report["problems"]  # drift, not a plan


@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES)
def test_proof_matches_preview_on_release(version, fresh_release, tmp_path):
    site = fresh_release(version)
    pristine = tmp_path / "pristine"
    shutil.copytree(site / "sglang", pristine)
    install = from_folder(site)
    preview = audit(install)
    assert preview.ok, preview.problems
    apply(install, build_plan, __version__)
    proof = audit(install)
    assert_proof_matches_preview(preview, proof, pristine)
    if version == "0.5.23":  # the refusal whose rewrite reads afresh as an allow-list
        refusal = [s for s in proof.sites if s.path == MINIMAX and s.form == "equality"]
        assert [(s.decision, s.applied) for s in refusal] == [(Decision.WIDEN, True)]
